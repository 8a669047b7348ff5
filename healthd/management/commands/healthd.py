"""``manage.py healthd``: the health-check daemon (one asyncio process; user lbweb with CAP_NET_RAW only).

Command checks are not run here but by the prober (``python -m healthd.prober``, user lbweb-probe).
"""

import asyncio
import logging
import signal

from django.core.management.base import BaseCommand

from healthd.daemon import HealthDaemon


class Command(BaseCommand):
    help = "Probe every backend of every farm; record health transitions and ask for an apply on a change."

    def add_arguments(self, parser):
        parser.add_argument(
            "--reload-seconds",
            type=float,
            default=0.5,
            help="how often the configuration generation is polled for changed farms or checks",
        )

    def handle(self, *args, reload_seconds: float, **options):
        logging.getLogger("lbweb").setLevel(logging.INFO)
        asyncio.run(self._main(reload_seconds))

    async def _main(self, reload_seconds: float) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await HealthDaemon(reload_seconds=reload_seconds).run(stop)
