"""The cluster's engine plug-ins (``keepalived.py``, ``conntrackd.py``) on their own, the long run of issue 39
until the engines' fuzz runner (``fuzz_engines``) drives them:

    .venv/bin/python -m bench.fuzz.run keepalived conntrackd [--examples 5000] [--seed N] [--out FILE]

As root. A plug-in exposes ``FIELDS`` (name -> hypothesis strategy of the values tried there), ``clean(values) ->
errors | None`` (lbweb's validation) and ``engine_check(values) -> (ok, message)`` (the engine's verdict on the
file lbweb writes from values ``clean`` accepted). For each, ``--examples`` examples drawn by hypothesis (one field
of the base configuration replaced at a time); each goes through ``clean`` and, if accepted, ``engine_check``.
Counts per plug-in: examples, accepted, refused by validation, refused by the engine (goal 0), crashes (goal 0),
with the first few failures kept. Exit status 1 when an engine refused anything or something crashed.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
import traceback
from pathlib import Path

KEPT = 5  # examples kept of each kind of failure


def run(name: str, examples: int, seed: int | None) -> dict:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hypothesis_seed
    from hypothesis import strategies as st

    plugin = importlib.import_module(f"bench.fuzz.{name}")  # after Django's setup: the plug-ins import models
    counts = {"examples": 0, "accepted": 0, "refused_by_validation": 0, "refused_by_engine": 0, "crashes": 0}
    kept: dict[str, list] = {"first_refused_by_engine": [], "first_crashes": []}
    started = time.monotonic()
    fields = st.sampled_from(sorted(plugin.FIELDS))

    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(fields.flatmap(lambda field: plugin.FIELDS[field].map(lambda value: {field: value})))
    def one(values: dict) -> None:
        counts["examples"] += 1
        try:
            if plugin.clean(values):
                counts["refused_by_validation"] += 1
                return
            counts["accepted"] += 1
            ok, message = plugin.engine_check(values)
            if not ok:
                counts["refused_by_engine"] += 1
                if len(kept["first_refused_by_engine"]) < KEPT:
                    kept["first_refused_by_engine"].append({"values": repr(values), "message": message})
        except Exception:
            counts["crashes"] += 1
            if len(kept["first_crashes"]) < KEPT:
                kept["first_crashes"].append({"values": repr(values), "traceback": traceback.format_exc()})

    if seed is not None:
        one = hypothesis_seed(seed)(one)
    one()
    return {"plugin": name, **counts, "seconds": round(time.monotonic() - started, 1), **kept}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("plugins", nargs="+", choices=("keepalived", "conntrackd"))
    parser.add_argument("--examples", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--out", default=None, help="also write the results here (JSON)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root: the engines are asked in a throwaway network namespace")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "lbweb.settings")
    import django

    django.setup()  # the models validate without a database
    results = []
    for name in args.plugins:  # each printed when done: a long run's first figures survive a later failure
        result = run(name, args.examples, args.seed)
        results.append(result)
        print(json.dumps({k: v for k, v in result.items() if not isinstance(v, list)}), flush=True)
        for kind in ("first_refused_by_engine", "first_crashes"):
            for item in result[kind]:
                print(f"  {kind}: {json.dumps(item)[:2000]}", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    return 1 if any(r["refused_by_engine"] or r["crashes"] for r in results) else 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))
    sys.exit(main())
