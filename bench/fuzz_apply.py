"""Thousands of random validated configurations, each compiled and applied by libnftables for real.

    .venv/bin/python bench/fuzz_apply.py [--examples 5000] [--seed N] [--out bench/results/fuzz_apply.json]

As root. The long run of ``tests/dataplane/test_fuzz_apply.py`` (see ``tests/support/fuzz_farms.py``): policies, farms
over every field (unicode included), backends and static sessions created through the services on a
throwaway SQLite database (only what validation accepts exists), the whole configuration compiled by
the pure compiler and applied in a throwaway network namespace by a child process
(``tests/support/apply_sandbox.py``). Unlike the test it does not stop at the first failure: it counts every
kernel refusal and every crash of the libnftables process, keeps the first configurations that caused
them, and prints the figures: examples, objects created and refused by validation, refusals, crashes,
time. Validation reads the kernel's capabilities as the worker would publish them (probed in the same
kind of namespace). Exit status 1 when anything was refused or crashed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=None, help="Hypothesis seed (default: random)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "fuzz_apply.json"))
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root: every example is applied in a throwaway network namespace (unshare -n)")

    from bench import django_scratch

    django_scratch.setup(Path(tempfile.mkdtemp(prefix="lbweb-fuzz-")))
    from django.db import transaction
    from hypothesis import HealthCheck, given, seed, settings
    from hypothesis import strategies as st

    from farms import capabilities
    from tests.support.apply_sandbox import Sandbox
    from tests.support.fuzz_farms import Stats, build_and_apply, dumps_failure

    stats = Stats()
    with Sandbox() as sandbox:
        probed = sandbox.capabilities()
        capabilities.published = lambda: probed  # what the worker would publish from this kernel

        @settings(
            max_examples=args.examples,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(st.data())
        def example(data):
            with transaction.atomic():
                build_and_apply(data.draw, sandbox, stats)
                transaction.set_rollback(True)
            if stats.examples % 250 == 0:
                print(json.dumps(stats.as_dict()), flush=True)

        if args.seed is not None:
            example = seed(args.seed)(example)
        example()
    figures = {**stats.as_dict(), "capabilities": probed}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"figures": figures, "failures": stats.failures}, indent=1, default=str))
    print(json.dumps(figures, indent=1))
    for failure in stats.failures[:3]:
        print(dumps_failure(failure)[:4000])
    print(f"written: {out}")
    return 1 if stats.kernel_refusals or stats.crashes else 0


if __name__ == "__main__":
    sys.exit(main())
