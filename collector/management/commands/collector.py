"""``manage.py collector``: sample the kernel every LBWEB_METRICS_INTERVAL seconds into Redis.

Run it where the worker runs (same network namespace, CAP_NET_ADMIN to read
conntrack and nftables). It only reads the kernel. If Redis is down it keeps
sampling and writes again once Redis is back; the missed samples are gaps.

Nothing a sample meets ends the process: a farm whose figures cannot be read says why in its entry
(collector/sampler.py), and a sample that fails as a whole is a gap, logged, whose reason the heartbeat
carries. The heartbeat also says when the last sample was done, so a collector that lives but does not
sample (stuck, or crashing before its first sample and restarted) never shows as running
(lbweb/heartbeat.py).
"""

from __future__ import annotations

import logging
import signal
import time

import redis
from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import close_old_connections, connection
from django.db.utils import Error as DatabaseError

from collector.sampler import Sampler
from lbweb import heartbeat
from monitoring.farm_index import FarmIndex, load_index
from monitoring.store import MetricStore, client

log = logging.getLogger("lbweb.monitoring")


class Command(BaseCommand):
    help = "Sample link, conntrack, nftables counter and CPU figures into Redis (run next to the worker)."

    def add_arguments(self, parser):
        parser.add_argument("--interval", type=float, default=None, help="seconds between samples")
        parser.add_argument("--count", type=int, default=0, help="stop after this many samples (0: run forever)")

    def handle(self, *args, interval: float | None, count: int, **options):
        interval = interval or settings.LBWEB_METRICS_INTERVAL
        sampler = Sampler(census_budget=settings.LBWEB_METRICS_CENSUS_BUDGET, min_census_interval=interval)
        store = MetricStore(client(), interval)
        stopping = []
        signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
        index = FarmIndex()
        tick = time.monotonic()
        done = 0
        progress = heartbeat.Progress(every=interval)
        publisher = heartbeat.start_publisher("collector", progress.info)
        log.info("collector: sampling every %.1f s into %s", interval, settings.REDIS_URL)
        try:
            while not stopping and (not count or done < count):
                try:
                    index = self._refresh(index)
                    sample = sampler.sample(index)
                    progress.done()
                    publisher.beat()  # the heartbeat says so before the figures are stored
                    store.write(sample)
                except redis.RedisError as exc:  # sampled; only its storing failed (and so does the heartbeat's)
                    log.warning("collector: sample not stored (%s)", exc)
                except Exception as exc:  # a gap, said in the heartbeat; the next sample tries again
                    error = f"sample failed: {type(exc).__name__}: {exc}"
                    if error != progress.error:  # its traceback once, not at every sample
                        log.exception("collector: %s", error)
                    progress.failed(error)
                done += 1
                tick += interval
                delay = tick - time.monotonic()
                if delay < 0:  # fell behind (a long census, a stall): skip the missed ticks, they are gaps
                    tick = time.monotonic()
                    delay = 0
                time.sleep(delay)
        except KeyboardInterrupt:
            pass
        finally:
            sampler.close()

    def _refresh(self, index: FarmIndex) -> FarmIndex:
        try:
            close_old_connections()
            return load_index(index)
        except DatabaseError as exc:  # keep sampling with the farms we know
            log.warning("collector: farms not reloaded (%s)", exc)
            connection.close()
            return index
