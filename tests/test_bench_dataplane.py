"""Smoke test of bench/dataplane.py: the harness runs end to end and writes sane figures.

Not a benchmark (one-second runs, one round): it proves the lab, lbweb in the LB namespace, wrk,
the CPU sampling and the report work together, so that the real run (minutes) does not fail late.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.stack import ROOT, VENV_BIN

pytestmark = pytest.mark.dataplane


def test_dataplane_bench_runs_baseline_and_lbweb_snat_and_writes_sane_json(tmp_path):
    if os.geteuid() != 0:
        pytest.fail("the benchmark builds network namespaces: run the suite as root")
    command = [str(VENV_BIN / "python"), "bench/dataplane.py", "--no-install", "--out", str(tmp_path)]
    command += ["--cases", "baseline,lbweb-snat,lbweb-dsr", "--conns", "close", "--duration", "1", "--rounds", "1"]
    command += ["--idle", "0.2", "--gap", "0", "--connections", "6"]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    document = json.loads((tmp_path / "dataplane.json").read_text())
    rows = {(row["case"], row["conn"]): row for row in document["summary"]}
    for case in ("baseline", "lbweb-snat"):
        row = rows[(case, "close")]
        assert row["req_s"] > 100 and row["requests"] > 100, row  # ~10,000 req/s on two shared cores
        assert row["errors"] < row["requests"] / 10, row
        assert 0 < row["p50_ms"] <= row["p99_ms"] < 5000, row
        assert row["machine_us"] > 0, row
    assert rows[("baseline", "close")]["req_s_ratio"] == 1
    assert rows[("lbweb-snat", "close")]["req_s_ratio"] > 0
    assert rows[("lbweb-dsr", "close")]["unavailable"].startswith("not available"), rows[("lbweb-dsr", "close")]
    assert [(run["case"], run["round"]) for run in document["runs"]] == [("baseline", 1), ("lbweb-snat", 1)]
    assert (tmp_path / "dataplane.png").stat().st_size > 10_000
    assert "lbweb-snat" in result.stdout and "not available" in result.stdout  # the printed table
    existing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    assert document["lab_namespaces"] and not set(document["lab_namespaces"]) & set(existing)  # all removed
