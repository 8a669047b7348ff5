"""HA pair failovers under traffic: lbweb's ordering (conntrack committed, then the addresses) beside the classic
set-up (keepalived's own virtual_ipaddress, the commit in a notify script that runs after them), in one invocation.

    .venv/bin/python bench/failover.py [--failovers 10] [--keepalive 50] [--advert 0.5] [--preempt-delay 3]
                                       [--no-baseline] [--out bench/results/failover.json]

Each set-up gets the namespace lab of ``tests/support/lab_ha.py`` (client, router, two LB nodes on a shared segment,
three backends; real keepalived and conntrackd configured by lbweb's generators and run by its wrapper, as lbweb with
only their capabilities). While ``--keepalive`` HTTP keep-alive connections stay open and new connections keep coming
through a DNAT, a SNAT and a persistence farm, the master changes ``--failovers`` times, cycling through: its
keepalived killed (SIGKILL; restarted a second later), the preferred node taking the role back after
``--preempt-delay`` (failback), the master's link losing its carrier (restored once the peer took over), failback.

Per failover: the time from the event to the new master's floating addresses up, whether the commit ended first,
the persistence entries on the new master and its conntrack entries. Over the run: established connections lost,
new connections failed inside the failover windows and beyond them, persistence bindings that moved.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.lab_ha import HaLab, Traffic, analyse, failover, reachable_dir  # noqa: E402

CYCLE = ("kill", "failback", "link", "failback")


def run_setup(classic: bool, args: argparse.Namespace) -> dict:
    with reachable_dir("lbweb-failover") as work:  # the daemons run as lbweb: it must reach their directories
        lab = HaLab(work / "ha", advert=args.advert, preempt_delay=args.preempt_delay, classic=classic)
        lab.build()
        try:
            lab.start()
            lab.wait_preferred(timeout=30 + args.preempt_delay)
            time.sleep(1)
            traffic = Traffic(lab, keepalive=args.keepalive)
            time.sleep(2)
            rows = []
            for i in range(args.failovers):
                kind = CYCLE[i % len(CYCLE)]
                rows.append(failover(lab, kind, settle=args.settle))
                print(f"  {'classic' if classic else 'lbweb'} #{i + 1} {kind}: {rows[-1]['from']} -> {rows[-1]['to']} "
                      f"in {rows[-1]['failover_s']:.3f} s", flush=True)  # fmt: skip
            report = traffic.stop()
        finally:
            lab.destroy()
    result = analyse(rows, report, traffic.ready)
    result["setup"] = "classic" if classic else "lbweb"
    result["raw"] = report  # every connection's record, for a closer look
    return result


def summary(result: dict) -> dict:
    rows = result["failovers"]
    by_kind = {}
    for kind in dict.fromkeys(r["kind"] for r in rows):
        times = [r["failover_s"] for r in rows if r["kind"] == kind]
        by_kind[kind] = {"count": len(times), "median_s": round(statistics.median(times), 3), "max_s": max(times)}
    return {
        "setup": result["setup"],
        "failovers": len(rows),
        "failover_time": by_kind,
        "commit_before_addresses": sum(r["commit_before_addresses"] for r in rows),
        "established_lost": result["established_lost"],
        "keepalive_connections": result["keepalive_connections"],
        "new_attempts": result["new_attempts"],
        "new_failed_in_window": result["new_failed_in_window"],
        "new_failed_beyond_window": result["new_failed_beyond_window"],
        "persistence_entries_min": min(r["persistence_entries"] for r in rows),
        "persistence_sources_moved": len(result["persistence_sources_moved"]),
    }


def table(summaries: list[dict]) -> str:
    lines = ["| figure | " + " | ".join(s["setup"] for s in summaries) + " |", "|---|" + "---|" * len(summaries)]
    kinds = list(dict.fromkeys(k for s in summaries for k in s["failover_time"]))
    for kind in kinds:
        cells = [f"{s['failover_time'][kind]['median_s']:.3f} / {s['failover_time'][kind]['max_s']:.3f}"
                 if kind in s["failover_time"] else "—" for s in summaries]  # fmt: skip
        lines.append(f"| failover time, {kind} (median / max s) | " + " | ".join(cells) + " |")
    for key, label in (
        ("failovers", "failovers"),
        ("commit_before_addresses", "commit ended before the addresses came up"),
        ("established_lost", "established connections lost"),
        ("new_attempts", "new connections tried"),
        ("new_failed_in_window", "new connections failed inside a failover window"),
        ("new_failed_beyond_window", "new connections failed beyond the windows"),
        ("persistence_entries_min", "persistence entries on the new master (fewest)"),
        ("persistence_sources_moved", "clients whose persistence binding moved"),
    ):
        lines.append(f"| {label} | " + " | ".join(str(s[key]) for s in summaries) + " |")
    if len(summaries) == 2:
        a, b = summaries
        ratio = "0" if not a["established_lost"] else f"{a['established_lost'] / max(b['established_lost'], 1):.2f}"
        lines.append(f"| lost connections, lbweb / classic | {ratio} | 1 |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--failovers", type=int, default=10)
    parser.add_argument("--keepalive", type=int, default=50)
    parser.add_argument("--advert", type=float, default=0.5, help="VRRPv3 advert interval (s)")
    parser.add_argument("--preempt-delay", type=int, default=3, help="seconds before a failback")
    parser.add_argument("--settle", type=float, default=3.0, help="seconds after each failover")
    parser.add_argument("--no-baseline", action="store_true", help="lbweb's set-up only")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "failover.json"))
    args = parser.parse_args()
    results = [run_setup(False, args)]
    if not args.no_baseline:
        results.append(run_setup(True, args))
    summaries = [summary(r) for r in results]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": vars(args), "summaries": summaries, "runs": results}, indent=1))
    print(table(summaries))
    print(f"written: {out}")


if __name__ == "__main__":
    main()
