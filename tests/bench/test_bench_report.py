"""bench/report.py's peer ratios round by round: how sure a run is of a ratio (pure: no lab, no packets)."""

from __future__ import annotations

from bench import report


def _run(round_: int, case: str, req_s: float, conn: str = "datagrams") -> dict:
    return {"round": round_, "case": case, "conn": conn, "figures": {"req_s": req_s, "lb_us": 10.0}}


def test_round_ratios_pair_the_cases_of_each_round_and_skip_rounds_where_one_did_not_run():
    runs = [
        _run(1, "lbweb", 95.0),
        _run(1, "minimal", 100.0),
        _run(2, "minimal", 50.0),  # a slow round for both: its ratio is what counts, not its level
        _run(2, "lbweb", 49.0),
        _run(3, "lbweb", 80.0),  # minimal did not run in round 3
        _run(4, "lbweb", 1.0, conn="close"),
        _run(4, "minimal", 2.0, conn="close"),  # another connection kind
    ]
    assert report.round_ratios(runs, "lbweb", "minimal", "datagrams") == [0.95, 0.98]


def test_the_interval_brackets_the_median_is_reproducible_and_narrows_with_more_rounds():
    spread = [0.91, 1.11, 0.99, 0.95, 1.00, 0.98, 0.96, 0.99]  # the per-round ratios of a real 8-round run
    median, low, high = report.median_interval(spread)
    assert median == 0.985 and low <= median <= high
    assert report.median_interval(spread) == (median, low, high)  # fixed seed: the same runs print the same
    _m, low3, high3 = report.median_interval(spread * 3)
    assert high3 - low3 < high - low


def test_summarise_and_the_peer_table_carry_the_rounds_and_the_interval():
    runs = [_run(r, "minimal", 100.0) for r in (1, 2, 3)] + [
        _run(1, "lbweb", 96.0),
        _run(2, "lbweb", 98.0),
        _run(3, "lbweb", 97.0),
    ]
    cases = [
        {"name": "minimal", "baseline": "minimal", "conns": ["datagrams"]},
        {"name": "lbweb", "baseline": "minimal", "conns": ["datagrams"], "peers": {"minimal": "minimal"}},
    ]
    rows = {row["case"]: row for row in report.summarise(runs, cases)}
    peer = rows["lbweb"]["peer_ratios"]["minimal"]
    assert peer["round_ratios"] == [0.96, 0.98, 0.97]
    assert peer["round_median_interval90"][0] == 0.97
    assert "0.970 [0.960-0.980]" in report.peer_table(list(rows.values()))
