"""Smoke test of ``bench/failover.py`` (docs/benchmarks.md's command): two failovers (keepalived killed,
failback) with 10 keep-alive connections, lbweb's set-up only; its JSON and table say what the full run reports."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support.stack import ROOT

pytestmark = pytest.mark.dataplane


def test_bench_failover_smoke(tmp_path):
    if os.geteuid() != 0:
        pytest.fail("bench/failover.py builds network namespaces: run the suite as root")
    out = tmp_path / "failover.json"
    command = [sys.executable, "bench/failover.py", "--failovers", "2", "--keepalive", "10", "--settle", "1",
               "--no-baseline", "--out", str(out)]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "| established connections lost | 0 |" in done.stdout
    (summary,) = json.loads(out.read_text())["summaries"]
    assert summary["failovers"] == 2 and summary["commit_before_addresses"] == 2
    assert set(summary["failover_time"]) == {"kill", "failback"}
    assert summary["established_lost"] == 0 and summary["new_failed_beyond_window"] == 0
    assert summary["persistence_entries_min"] >= 4
