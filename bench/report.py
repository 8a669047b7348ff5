"""Medians, ratios against the baseline, the printed table, the JSON file and the PNG chart."""

from __future__ import annotations

import json
import random
import statistics
from pathlib import Path

METRICS = (
    "req_s",
    "p50_ms",
    "p99_ms",
    "max_ms",
    "softirq_us",
    "lb_user_us",
    "lb_system_us",
    "lb_us",
    "machine_us",
    "lb_packets",
)
TOTALS = ("errors", "lost", "syn_retrans", "requests")
DATAGRAMS = "datagrams"  # the connection kind of the UDP cases: no connection, no SYN; queries can be lost
# Bootstrap resamples of a peer ratio's rounds: another seed, or 20,000 resamples, moved the interval's ends by
# 0.003 at most (runs of 8, 24 and 40 rounds of the stateless farm, 2026-11-28).
RESAMPLES = 2000


def round_ratios(runs: list[dict], case: str, other: str, conn: str) -> list[float]:
    """``case``'s req/s over ``other``'s, round by round (rounds where both ran with ``conn``): both ran within
    seconds of each other, so a round's ratio shares the machine's load of that moment, which the medians
    over all rounds do not."""
    by_round: dict[int, dict[str, float]] = {}
    for r in runs:
        if r["conn"] == conn and r["case"] in (case, other):
            by_round.setdefault(r["round"], {})[r["case"]] = r["figures"]["req_s"]
    return [x[case] / x[other] for _round, x in sorted(by_round.items()) if x.get(other) and case in x]


def median_interval(values: list[float], level: float = 0.90) -> tuple[float, float, float]:
    """The median and a bootstrap ``level`` interval of it (percentile method, fixed seed: the same runs
    always print the same interval). A 0.97 goal is met when the interval's low end clears it, not when one
    run's median happens to: the rounds of one case spread over +-5 % on a shared 2-core machine."""
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(RESAMPLES))
    tail = int(RESAMPLES * (1 - level) / 2)
    return statistics.median(values), medians[tail], medians[RESAMPLES - 1 - tail]


def summarise(runs: list[dict], cases: list[dict]) -> list[dict]:
    """One row per case and connection kind: medians over the rounds, ratios to the baseline's medians.

    ``cases``: dicts with ``name``, ``baseline`` (the case it is compared with), ``conns`` and, for a
    case that could not run, ``unavailable`` (the reason, printed in its row).
    """
    rows = []
    for case in cases:
        for conn in case["conns"]:
            row = {"case": case["name"], "conn": conn, "baseline": case["baseline"]}
            if case.get("unavailable"):
                row["unavailable"] = case["unavailable"]
                rows.append(row)
                continue
            mine = [r["figures"] for r in runs if r["case"] == case["name"] and r["conn"] == conn]
            if not mine:
                row["unavailable"] = "not run"
                rows.append(row)
                continue
            row["rounds"] = len(mine)
            for metric in METRICS:
                row[metric] = statistics.median(f.get(metric, 0) for f in mine)
            for total in TOTALS:
                row[total] = sum(f.get(total, 0) for f in mine)
            row["req_s_min"] = min(f["req_s"] for f in mine)
            row["req_s_max"] = max(f["req_s"] for f in mine)
            rows.append(row)
    by_key = {(r["case"], r["conn"]): r for r in rows}
    for row in rows:
        base = by_key.get((row["baseline"], row["conn"]))
        if "req_s" not in row or not base or "req_s" not in base:
            continue
        for metric in ("req_s", "p99_ms", "lb_us", "machine_us"):
            row[f"{metric}_ratio"] = row[metric] / base[metric] if base[metric] else None
    peers = {c["name"]: c.get("peers", {}) for c in cases}
    for row in rows:
        for label, other in peers.get(row["case"], {}).items():
            theirs = by_key.get((other, row["conn"]))
            if "req_s" in row and theirs and theirs.get("req_s"):
                ratios = round_ratios(runs, row["case"], other, row["conn"])
                row.setdefault("peer_ratios", {})[label] = {
                    "case": other,
                    "req_s": row["req_s"] / theirs["req_s"],
                    "lb_us": row["lb_us"] / theirs["lb_us"] if theirs.get("lb_us") else None,
                    "round_ratios": ratios,
                    "round_median_interval90": median_interval(ratios) if ratios else None,
                }
    return rows


def peer_table(rows: list[dict]) -> str:
    """lbweb's cases against the same farm as a minimal hand-written ruleset and as nftlb's ruleset."""
    head = f"{'case':<22} {'conn':<10} {'req/s':>9}  {'x minimal':>9} {'x nftlb':>8} {'x 1 farm':>8}"
    lines = [f"{head}  {'LB us x min':>11} {'x nftlb':>8}  {'x minimal by round: median [90 %]':>35}"]
    for row in rows:
        peers = row.get("peer_ratios")
        if not peers:
            continue
        minimal, nftlb, one = peers.get("minimal", {}), peers.get("nftlb", {}), peers.get("1 farm", {})
        lines.append(
            f"{row['case']:<22} {row['conn']:<10} {row['req_s']:>9.0f}  {_ratio(minimal.get('req_s')):>9}"
            f" {_ratio(nftlb.get('req_s')):>8} {_ratio(one.get('req_s')):>8}"
            f"  {_ratio(minimal.get('lb_us')):>11} {_ratio(nftlb.get('lb_us')):>8}"
            f"  {_interval(minimal.get('round_median_interval90')):>35}"
        )
    return "\n".join(lines)


def _interval(median_low_high: tuple[float, float, float] | list[float] | None) -> str:
    if not median_low_high:
        return "-"
    median, low, high = median_low_high
    return f"{median:.3f} [{low:.3f}-{high:.3f}]"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def table(rows: list[dict]) -> str:
    head = (
        f"{'case':<16} {'connection':<11} {'req/s':>9} {'x base':>6} {'p50 ms':>7} {'p99 ms':>8} "
        f"{'LB us/req':>9} {'x base':>6} {'all us/req':>10} {'x base':>6} {'LB pkt/req':>10} {'errors':>7} "
        f"{'lost':>7} {'SYN rtx':>7}"
    )
    lines = [head, "-" * len(head)]
    for row in rows:
        start = f"{row['case']:<16} {row['conn']:<11} "
        if "unavailable" in row:
            lines.append(start + row["unavailable"])
            continue
        udp = row["conn"] == DATAGRAMS
        lost = row["lost"] if udp else "-"
        syn = "-" if udp else row["syn_retrans"]
        lines.append(
            start + f"{row['req_s']:>9.0f} {_ratio(row.get('req_s_ratio')):>6} {row['p50_ms']:>7.2f} "
            f"{row['p99_ms']:>8.2f} {row['lb_us']:>9.1f} {_ratio(row.get('lb_us_ratio')):>6} "
            f"{row['machine_us']:>10.1f} {_ratio(row.get('machine_us_ratio')):>6} {row['lb_packets']:>10.1f} "
            f"{row['errors']:>7} {lost:>7} {syn:>7}"
        )
    return "\n".join(lines)


def write_json(path: Path, document: dict) -> None:
    path.write_text(json.dumps(document, indent=2, sort_keys=False) + "\n")


def chart(path: Path, rows: list[dict], conns: list[str], title: str) -> None:
    """Three panels (req/s, p99 latency, LB CPU per request): per case, one bar per connection kind it has
    (``conns``, in that order; a colour each)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = list(dict.fromkeys(r["case"] for r in rows))
    panels = [
        ("req_s", "requests per second (median; bar = min-max)"),
        ("p99_ms", "latency p99 (ms, median)"),
        ("lb_us", "LB CPU per request (us, softirq + LB processes, median)"),
    ]
    colours = ["#2b6cb0", "#dd6b20", "#38a169", "#805ad5"]
    width = 0.8 / max(max(sum(1 for r in rows if r["case"] == c and r["conn"] in conns) for c in cases), 1)
    fig, axes = plt.subplots(len(panels), 1, figsize=(12, 10), sharex=True)
    labelled: set[str] = set()
    for ax, (metric, label) in zip(axes, panels, strict=True):
        for x, case in enumerate(cases):
            mine = [r for conn in conns for r in rows if r["case"] == case and r["conn"] == conn]
            if not any(metric in r for r in mine):
                ax.text(x, 0, "n/a", ha="center", va="bottom", fontsize=9, color="grey")
                continue
            for j, row in enumerate(mine):
                if metric not in row:
                    continue
                conn = row["conn"]
                low = row[metric] - row.get(f"{metric}_min", row[metric])
                high = row.get(f"{metric}_max", row[metric]) - row[metric]
                ax.bar(
                    x + (j - (len(mine) - 1) / 2) * width,
                    row[metric],
                    width,
                    color=colours[conns.index(conn) % len(colours)],
                    yerr=[[low], [high]],
                    capsize=3,
                    label=None if conn in labelled else conn,
                )
                labelled.add(conn)
        ax.set_ylabel(label, fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend()
    axes[0].set_title(title, fontsize=10)
    axes[-1].set_xticks(range(len(cases)), cases, rotation=15)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
