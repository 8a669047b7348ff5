"""Smoke test of bench/l7_isolation.py at its smallest: it runs to the end and finds the bad farm in every case."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support.units import ROOT

pytestmark = pytest.mark.dataplane


def test_bench_l7_isolation_runs_and_finds_the_bad_farm(tmp_path):
    if os.geteuid() != 0:
        pytest.fail("the benchmark builds network namespaces: run the suite as root")
    out = tmp_path / "isolation.json"
    result = subprocess.run(
        [sys.executable, "bench/l7_isolation.py", "--farms", "3", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    report = json.loads(out.read_text())
    assert len(report["cases"]) == 6
    for case in report["cases"]:
        expected = [1] if case["case"].endswith("-bad") else [4]  # farm n // 2, or the new farm n + 1
        assert case["refused"] == expected, case
