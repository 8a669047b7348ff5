"""Smoke test of bench/dataplane.py: the harness runs end to end and writes sane figures.

Not a benchmark (one-second runs, one round): it proves the lab (with its DSR segment), lbweb in the
LB namespace, wrk and dnsperf, the CPU sampling and the report work together for every kind of case,
so that the real run (minutes) does not fail late.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.support.stack import ROOT, VENV_BIN

pytestmark = pytest.mark.dataplane

CASES = (
    "baseline",
    "minimal-snat",
    "nftlb-snat",
    "lbweb-snat",
    "lbweb-c1-snat-uncounted",  # a compiled document (no worker), a farm option, its own SNAT source address
    "baseline-l2",
    "lbweb-dsr",
    "baseline-udp",
    "lbweb-stateless",
    "lbweb-c1-dnat-udp-uncounted",
)


def test_dataplane_bench_quick_runs_http_dsr_and_stateless_udp_cases_and_writes_sane_json(tmp_path):
    if os.geteuid() != 0:
        pytest.fail("the benchmark builds network namespaces: run the suite as root")
    command = [str(VENV_BIN / "python"), "bench/dataplane.py", "--quick", "--no-install", "--out", str(tmp_path)]
    command += ["--cases", ",".join(CASES), "--conns", "close", "--duration", "1", "--rounds", "1"]
    command += ["--idle", "0.2", "--gap", "0", "--connections", "6"]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    document = json.loads((tmp_path / "dataplane.json").read_text())
    rows = {(row["case"], row["conn"]): row for row in document["summary"]}
    kinds = {case: "datagrams" if "udp" in case or "stateless" in case else "close" for case in CASES}
    assert "x minimal" in result.stdout  # the table of ratios to the other rulesets of the same farm
    assert set(rows) == set(kinds.items()), sorted(rows)
    for case, conn in kinds.items():
        row = rows[(case, conn)]
        assert "unavailable" not in row, row
        assert row["req_s"] > 100 and row["requests"] > 100, row  # ~10,000 req/s (HTTP close) on two shared cores
        assert row["errors"] < row["requests"] / 10 and row["lost"] < row["requests"] / 10, row
        assert 0 < row["p50_ms"] <= row["p99_ms"] < 5000, row
        assert row["machine_us"] >= 0 and row["lb_us"] >= 0, row  # idle-corrected: others' load may zero one 1-s run
    for baseline in ("baseline", "baseline-l2", "baseline-udp"):
        assert rows[(baseline, kinds[baseline])]["req_s_ratio"] == 1
    assert rows[("lbweb-snat", "close")]["baseline"] == "baseline"
    assert rows[("lbweb-dsr", "close")]["baseline"] == "baseline-l2"
    assert rows[("lbweb-stateless", "datagrams")]["baseline"] == "baseline-udp"
    for case in ("lbweb-snat", "lbweb-dsr", "lbweb-stateless", "minimal-snat", "nftlb-snat"):
        assert rows[(case, kinds[case])]["req_s_ratio"] > 0
    assert rows[("lbweb-c1-dnat-udp-uncounted", "datagrams")]["baseline"] == "baseline-udp"
    assert rows[("lbweb-c1-snat-uncounted", "close")]["peer_ratios"]["nftlb"]["case"] == "nftlb-snat"
    # lbweb's SNAT farm beside a hand-written ruleset and nftlb's ruleset of the same farm, same rounds
    peers = rows[("lbweb-snat", "close")]["peer_ratios"]
    assert peers["minimal"]["case"] == "minimal-snat" and peers["nftlb"]["case"] == "nftlb-snat"
    assert peers["minimal"]["req_s"] > 0 and peers["nftlb"]["req_s"] > 0
    # The paths are what they claim: the L2 baseline never touches the LB; DSR passes it one way only
    # (fewer packets per request than SNAT, which carries both ways); the UDP cases route query and answer.
    assert rows[("baseline-l2", "close")]["lb_packets"] < 0.1
    assert 0 < rows[("lbweb-dsr", "close")]["lb_packets"] < 0.75 * rows[("lbweb-snat", "close")]["lb_packets"]
    assert rows[("lbweb-stateless", "datagrams")]["lb_packets"] >= 1.9
    assert sorted(run["case"] for run in document["runs"]) == sorted(CASES)
    for run in document["runs"]:  # the CPU counters behind those figures did move
        # The kernel's share moved too: softirq, or system where packets were handled in the sender's own
        # context (veth transmits there: a quiet machine's 1-s UDP baseline showed 0 softirq ticks once).
        kernel = run["raw"]["ticks"]["softirq"] + run["raw"]["ticks"]["system"]
        assert run["raw"]["busy_ticks"] > 0 and kernel > 0, run["case"]
    assert {run["raw"]["tool"] for run in document["runs"] if run["conn"] == "datagrams"} == {"dnsperf"}
    assert (tmp_path / "dataplane.png").stat().st_size > 10_000
    assert "lbweb-stateless" in result.stdout and "not available" not in result.stdout  # the printed table
    existing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    assert document["lab_namespaces"] and not set(document["lab_namespaces"]) & set(existing)  # all removed
