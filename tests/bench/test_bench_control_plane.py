"""Smoke test of bench/control_plane.py: the harness runs end to end at tiny sizes and writes sane figures.

Not a benchmark (a few changes, 3 and 10 farms): it proves the lab, the worker in the LB namespace, the
kernel watcher, the kernel-limit load, the single changes and the burst work together, so that the real
run (100, 1,000 and 10,000 farms: most of an hour) does not fail late.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.support.stack import ROOT, VENV_BIN

pytestmark = pytest.mark.dataplane


def test_control_plane_bench_at_5_and_20_farms_writes_every_figure(tmp_path):
    if os.geteuid() != 0:
        pytest.fail("the benchmark builds network namespaces: run the suite as root")
    command = [str(VENV_BIN / "python"), "bench/control_plane.py", "--out", str(tmp_path), "--farms", "3,10"]
    command += ["--backends", "2", "--changes", "3", "--back-to-back", "2", "--single", "2", "--burst", "6"]
    command += ["--burst-clients", "2", "--drain-seconds", "3"]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    (path,) = tmp_path.glob("control_plane-*.json")
    document = json.loads(path.read_text())
    assert document["config"]["farms"] == [3, 10] and document["config"]["cpus"] >= 1
    for key, n in (("isolated", 3), ("back_to_back", 2)):
        series = document["latency"][key]
        assert series["kernel_ms"]["n"] == n and 0 < series["kernel_ms"]["p50"] <= series["kernel_ms"]["p99"] < 10_000
        assert 0 < series["api_ms"]["p50"] < 10_000
    assert [stage["farms"] for stage in document["scale"]] == [3, 10]
    for stage in document["scale"]:
        full = stage["full_apply"]
        assert full["backend_rows"] == stage["farms"] * 2
        assert 0 < full["worker_apply_s"] < 60 and full["worker_ms_per_farm"] > 0
        limit = full["kernel_limit"]
        assert limit["farms"] == stage["farms"] + 1  # the latency farm too
        assert 0 < limit["nft_load_s"] < 60 and limit["ms_per_farm"] > 0 and limit["commands"] > stage["farms"]
        assert full["ratio_worker_to_kernel"] > 0
        single = stage["single"]
        assert single["kernel_ms"]["n"] == 2 and 0 < single["kernel_ms"]["p50"] < 10_000
        assert single["apply_runs"] == 2 and single["kinds"] == ["incremental"] and single["farms_changed"] == [1]
        assert 0 < single["apply_run_ms"]["p50"] < 10_000 and single["commands"][0] > 0
        burst = stage["burst"]
        assert burst["writes"] == 6 and burst["writes_per_s"] > 0
        assert 1 <= burst["transactions"] <= 6 and burst["transactions_per_s"] > 0
        assert 0 <= burst["last_write_to_applied_ms"] < 60_000
        assert stage["kernel_matches"] is True
    growth = document["single_growth"]
    assert growth["from"] == 3 and growth["to"] == 10 and growth["kernel_p50"] > 0 and growth["apply_run_p50"] > 0
    assert "Full apply" in result.stdout and "x kernel" in result.stdout and "Burst" in result.stdout
    existing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    assert document["lab_namespaces"] and not set(document["lab_namespaces"]) & set(existing)  # all removed
