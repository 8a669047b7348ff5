"""The compiler's full document at 1,000 / 2,000 / 4,000 farms, with Python's cyclic GC on and paused.

    .venv/bin/python bench/compile.py [--farms 1000,2000,4000] [--rounds 3]

No root, no kernel: the pure compiler alone (farms of 10 backends, weight scheduler, DNAT, as
bench/control_plane.py's scale farms). Both variants run in the same invocation, alternating,
and the table gives medians and the ratio; it never passes or fails. The worker runs its applies
and reconciles with the collector paused (``dataplane.applier.cyclic_gc_paused``).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import compiler  # noqa: E402
from compiler.spec import BackendSpec, FarmSpec  # noqa: E402


def scale_farms(count: int, backends: int = 10) -> list[FarmSpec]:
    farms = []
    for i in range(count):
        members = tuple(
            BackendSpec(
                id=i * backends + j, address=f"198.19.{(i * backends + j) // 250}.{(i * backends + j) % 250 + 1}"
            )
            for j in range(backends)
        )
        vip = f"198.18.{128 + i // 250}.{i % 250 + 1}"
        farms.append(FarmSpec(id=i + 1, name=f"s{i}", vip=vip, ports=((80, 80),), scheduler="weight", backends=members))
    return farms


def timed(farms: list[FarmSpec], paused: bool) -> float:
    gc.collect()
    if paused:
        gc.disable()
    try:
        started = time.perf_counter()
        compiler.full_document(farms)
        return time.perf_counter() - started
    finally:
        gc.enable()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--farms", default="1000,2000,4000")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"{'farms':>7} {'GC on s':>9} {'GC paused s':>12} {'on / paused':>12}")
    for count in (int(n) for n in args.farms.split(",")):
        farms = scale_farms(count)
        on, paused = [], []
        for _ in range(args.rounds):
            on.append(timed(farms, paused=False))
            paused.append(timed(farms, paused=True))
        a, b = statistics.median(on), statistics.median(paused)
        print(f"{count:7,} {a:9.2f} {b:12.2f} {a / b:12.2f}")


if __name__ == "__main__":
    main()
