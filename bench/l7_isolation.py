"""What isolating a farm HAProxy refuses costs (``dataplane.l7.engine.Engine.apply_isolating``), at N HTTP farms.

    .venv/bin/python bench/l7_isolation.py [--farms N] [--out FILE]

As root. The namespace lab of tests/support/lab.py, the real HAProxy in its LB namespace (tests/support/l7_lab.py), N
HTTP farms of 4 backends each on one VIP (ports 8001...). Cases, each from the N farms served:

| case | what changes | the refusal |
|---|---|---|
| one-bad | one farm, with a regex PCRE2 refuses | ``haproxy -c`` |
| all-changed-one-bad | every farm's weights (runtime API), one farm bad | ``haproxy -c`` |
| unknown-one-bad | one farm bad, and nothing known served (the record void: every farm is a change) | ``haproxy -c`` |
| one-held | a new farm on a port another process holds | the reload |
| all-changed-one-held | every farm's weights, and a new farm on a port another process holds | the reload |
| unknown-one-held | that new farm, and nothing known served | the reload |

Figures: seconds, ``haproxy -c`` runs, reloads; and what the alternative, each changed farm checked alone against
what runs, would cost (N checks, measured by the median of one check of the N farms).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from compiler.haproxy.spec import EngineSpec, FarmSpec, ServerSpec, ServiceSpec  # noqa: E402
from dataplane.l7 import engine as engine_module  # noqa: E402
from tests.support.l7_lab import HAProxyLab  # noqa: E402
from tests.support.lab import Lab, backend4  # noqa: E402

VIP = "198.18.100.1"
HELD_PORT = 7999


def farm(i: int, weight: int = 1, host_regex: str = "") -> FarmSpec:
    servers = tuple(ServerSpec(i * 10 + k, backend4(f"b{1 + k % 3}"), 80, weight=weight) for k in range(4))
    service = ServiceSpec(i, "all", host_regex=host_regex, servers=servers)
    return FarmSpec(i, f"farm{i}", "http", VIP, (8000 + i,), services=(service,))


def farms(n: int, **changes) -> list[FarmSpec]:
    return [farm(i, **changes) for i in range(1, n + 1)]


@contextlib.contextmanager
def counted(engine: engine_module.Engine):
    """Counts ``haproxy -c`` runs and reloads within the block."""
    counts = {"checks": 0, "reloads": 0}
    check, reload = engine_module.check, engine.cli.reload

    def counted_check(*args, **kwargs):
        counts["checks"] += 1
        return check(*args, **kwargs)

    def counted_reload(*args, **kwargs):
        counts["reloads"] += 1
        return reload(*args, **kwargs)

    engine_module.check, engine.cli.reload = counted_check, counted_reload
    try:
        yield counts
    finally:
        engine_module.check = check
        del engine.cli.reload


def case(haproxy: HAProxyLab, n: int, name: str, wanted: list[FarmSpec], forget: bool) -> dict:
    engine = haproxy.engine
    engine.apply(EngineSpec(tuple(farms(n))))  # the N farms served
    if forget:  # as after a restart of HAProxy by someone else: its record no longer says what it serves
        engine.running = None
        (haproxy.conf_dir / engine_module.SERVED_NAME).unlink()
    with counted(engine) as counts:
        started = time.monotonic()
        _outcome, refused = engine.apply_isolating(EngineSpec(tuple(wanted)))
        seconds = time.monotonic() - started
    return {"case": name, "seconds": round(seconds, 2), **counts, "refused": sorted(refused)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--farms", type=int, default=50)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    n = args.farms
    lab = Lab().build()
    holder = None
    try:
        with tempfile.TemporaryDirectory(prefix="lbweb-bench-l7-") as work:
            haproxy = HAProxyLab(lab, Path(work)).start()
            code = f"import socket,time; s=socket.socket(); s.bind(({VIP!r},{HELD_PORT})); s.listen(); time.sleep(3600)"
            holder = subprocess.Popen(["ip", "netns", "exec", lab.lb, sys.executable, "-c", code])
            one = []
            for _ in range(5):
                started = time.monotonic()
                engine_module.check(EngineSpec(tuple(farms(n))))
                one.append(time.monotonic() - started)
            check_s = statistics.median(one)
            bad = farm(n // 2, host_regex="(?a)x")
            held = dataclasses.replace(farm(n + 1), ports=(HELD_PORT,))
            results = [
                case(haproxy, n, "one-bad", [*farms(n)[: n // 2 - 1], bad, *farms(n)[n // 2 :]], forget=False),
                case(haproxy, n, "all-changed-one-bad",
                     [*farms(n, weight=2)[: n // 2 - 1], bad, *farms(n, weight=2)[n // 2 :]], forget=False),
                case(haproxy, n, "unknown-one-bad", [*farms(n)[: n // 2 - 1], bad, *farms(n)[n // 2 :]], forget=True),
                case(haproxy, n, "one-held", [*farms(n), held], forget=False),
                case(haproxy, n, "all-changed-one-held", [*farms(n, weight=2), held], forget=False),
                case(haproxy, n, "unknown-one-held", [*farms(n), held], forget=True),
            ]  # fmt: skip
            haproxy.stop()
    finally:
        if holder is not None:
            holder.kill()
            holder.wait(timeout=5)
        lab.destroy()
    report = {"farms": n, "one_check_s": round(check_s, 3), "each_alone_s": round(n * check_s, 1), "cases": results}
    for row in results:
        print(f"{row['case']:<22} {row['seconds']:>6.2f} s  {row['checks']:>3} checks  {row['reloads']:>3} reloads"
              f"  refused {row['refused']}")  # fmt: skip
    print(f"one haproxy -c of {n} farms: {check_s:.3f} s; each farm alone: {n} checks, {n * check_s:.1f} s")
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
