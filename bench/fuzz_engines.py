"""Random hostile values in every field an operator types into an engine's configuration, checked by the engine.

    .venv/bin/python bench/fuzz_engines.py [--examples 5000] [--engines haproxy] [--seed N] [--out PATH]

The long run of the suite's property tests (``tests/l7/test_l7_fields.py``): for each engine of ``bench/fuzz`` (its
``__init__`` defines the plug-in interface), hypothesis draws one value per field and example; the engine's plug-in
writes them through the services (validation accepts or refuses each), renders the configuration, runs the
engine's own check and asks the engine what it made of every accepted value. Unlike the tests, nothing stops at a
failure: every verdict is counted, the first failures are kept. Per engine: examples, values, accepted, refused by
validation, refused by the engine (goal 0), meaning lost (goal 0), crashes (goal 0), seconds. Exit status 1 when
any of the last three is not 0.

Django runs on a throwaway SQLite database; each example is rolled back. Nothing leaves the machine: the HAProxy
plug-in runs HAProxy on UNIX sockets only (no root needed), the cluster's ask their engines as root in a throwaway
network namespace (``--engines haproxy`` runs without root). An engine that cannot run here is skipped, and the
exit status is then 1 too.
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import json
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def run(engine, examples: int, seed: int | None):
    """``examples`` examples of one engine's plug-in; its ``Counts``."""
    from django.db import transaction
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as with_seed

    from bench.fuzz import Counts

    counts = Counts()

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(engine.values())
    def example(values):
        try:
            with transaction.atomic():
                outcome = engine.check(values)
                transaction.set_rollback(True)
        except Exception:
            counts.crash(values, traceback.format_exc())
        else:
            counts.add(outcome)
        if counts.examples % 250 == 0:
            print(json.dumps({"engine": engine.NAME, **counts.as_dict()}), flush=True)

    if seed is not None:
        example = with_seed(seed)(example)
    example()
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=5000)
    parser.add_argument("--engines", default=None, help="comma-separated (default: every engine of bench/fuzz)")
    parser.add_argument("--seed", type=int, default=None, help="Hypothesis seed (default: random)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "fuzz_engines.json"))
    args = parser.parse_args()
    from bench import django_scratch

    work = Path(tempfile.mkdtemp(prefix="lbweb-fuzz-engines-"))
    atexit.register(shutil.rmtree, work, ignore_errors=True)
    django_scratch.setup(work)
    from bench.fuzz import ENGINES

    names = args.engines.split(",") if args.engines else list(ENGINES)
    report, failed = {}, False
    for name in names:
        engine = importlib.import_module(f"bench.fuzz.{name}")
        missing = engine.available()
        if missing:
            print(f"{name}: skipped ({missing})")
            report[name] = {"skipped": missing}
            failed = True
            continue
        started = time.monotonic()
        counts = run(engine, args.examples, args.seed)
        figures = {**counts.as_dict(), "seconds": round(time.monotonic() - started, 1)}
        report[name] = {"figures": figures, "by_field": counts.by_field, "failures": counts.failures}
        failed |= bool(counts.refused_by_engine or counts.meaning_lost or counts.crashes)
        print(f"{name}: " + ", ".join(f"{key.replace('_', ' ')} {value}" for key, value in figures.items()))
        for field_name, verdicts in sorted(counts.by_field.items()):
            print(f"    {field_name}: accepted {verdicts['accepted']}, refused {verdicts['refused']}")
        for failure in counts.failures[:3]:
            print(failure[:3000])
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1, default=str))
    print(f"written: {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
