"""bench/versions.py runs to its table at its smallest size (its figures are the benchmark's business)."""

from __future__ import annotations

import subprocess
import sys

from tests.support.stack import ROOT


def test_the_versions_bench_prints_its_table():
    out = subprocess.run(
        [sys.executable, "bench/versions.py", "--farms", "20", "--rounds", "1"],
        cwd=ROOT, capture_output=True, text=True, check=True, timeout=300,
    ).stdout  # fmt: skip
    header, row = out.strip().splitlines()[-2:]
    assert "unchanged/export" in header and row.split()[0] == "20"
