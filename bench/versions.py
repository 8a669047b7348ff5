"""What keeping a configuration version costs the worker after an apply, at 1,000 and 10,000 farms.

After each apply that leaves the kernel holding the whole configuration, the worker exports it, hashes
it and stores it when it changed (``farms/versions.py``). Measured side by side in one invocation, on a
throw-away SQLite database with ``--farms`` farms of ``--backends`` backends each:

* ``export``: ``config_io.export_config()`` alone, what ``GET /api/v1/config/export/`` costs: the baseline;
* ``unchanged``: ``versions.record_applied`` when the document equals the newest version (a health
  transition, a reconcile): export + hash + compare, nothing stored;
* ``changed``: the same after one farm's weight changed: export + hash + one row with the document.

Each is the median of ``--rounds`` runs, printed with its ratio to ``export``.

    .venv/bin/python bench/versions.py [--farms 1000,10000] [--backends 3] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def populate(farms: int, backends: int) -> None:
    from django.db import transaction

    from farms.models import Backend, ConfigGeneration, Farm

    with transaction.atomic():
        rows = [
            Farm(
                name=f"f{i}",
                vip=f"198.18.{100 + i // 250 % 100}.{i % 250 + 1}",
                ports=str(1000 + i // 25000),
                mode="dnat",
            )
            for i in range(farms)
        ]
        Farm.objects.bulk_create(rows, batch_size=1000)
        made = list(Farm.objects.order_by("id"))
        Backend.objects.bulk_create(
            [
                Backend(farm=f, address=f"198.19.{b}.{i % 250 + 1}", port=80)
                for i, f in enumerate(made)
                for b in range(backends)
            ],
            batch_size=2000,
        )
        generation = ConfigGeneration.bump()
        Farm.objects.update(config_generation=generation, applied_generation=generation)


def median_ms(action, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        action()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def measure(farms: int, backends: int, rounds: int) -> dict[str, float]:

    from farms import config_io, versions
    from farms.models import ApplyRun, Backend, ConfigGeneration, ConfigVersion, Farm

    def run() -> ApplyRun:
        return ApplyRun.objects.create(
            generation=ConfigGeneration.current(), kind="incremental", started="2026-01-01T00:00Z", ok=True
        )

    populate(farms, backends)
    versions.record_applied(run())
    export = median_ms(config_io.export_config, rounds)
    unchanged = median_ms(lambda: versions.record_applied(run()), rounds)

    def change() -> None:
        backend = Backend.objects.order_by("?").first()
        Backend.objects.filter(pk=backend.pk).update(weight=backend.weight % 100 + 1)
        generation = ConfigGeneration.bump()
        Farm.objects.update(config_generation=generation, applied_generation=generation)
        started = time.perf_counter()
        assert versions.record_applied(run()) is not None
        timings.append((time.perf_counter() - started) * 1000)

    timings: list[float] = []
    for _ in range(rounds):
        change()
    size = len(str(versions.document_of(ConfigVersion.objects.first())))
    return {"export": export, "unchanged": unchanged, "changed": statistics.median(timings), "document_chars": size}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--farms", default="1000,10000")
    parser.add_argument("--backends", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a child run: one farm count
    args = parser.parse_args()
    if args.one is not None:
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        print(json.dumps(measure(args.one, args.backends, args.rounds)))
        return
    print(
        f"{'farms':>7} {'export ms':>10} {'unchanged ms':>13} {'changed ms':>11} "
        f"{'unchanged/export':>17} {'changed/export':>15} {'document':>10}"
    )
    for farms in [int(n) for n in args.farms.split(",")]:
        with tempfile.TemporaryDirectory() as tmp:  # each count on a fresh database, in a process of its own
            env = dict(
                os.environ,
                DJANGO_SETTINGS_MODULE="lbweb.settings",
                LBWEB_VAR_DIR=tmp,
                DATABASE_URL=f"sqlite:///{tmp}/bench.sqlite3",
                LBWEB_LOG_LEVEL="WARNING",
            )
            cmd = [
                sys.executable,
                __file__,
                "--one",
                str(farms),
                "--backends",
                str(args.backends),
                "--rounds",
                str(args.rounds),
            ]
            out = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, check=True).stdout
            r = json.loads(out.strip().splitlines()[-1])
            print(
                f"{farms:>7} {r['export']:>10.0f} {r['unchanged']:>13.0f} {r['changed']:>11.0f} "
                f"{r['unchanged'] / r['export']:>17.2f} {r['changed'] / r['export']:>15.2f} "
                f"{r['document_chars'] / 1e6:>8.1f} M"
            )


if __name__ == "__main__":
    main()
