"""Smoke test of bench/http_farms.py (docs/benchmarks.md's command, with one-second cases): the lab with nginx
backends, lbweb's HAProxy and nginx as a reverse proxy, wrk over HTTP and HTTPS, the capacity experiment, and a
sane JSON report."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.support.stack import ROOT, VENV_BIN

pytestmark = pytest.mark.dataplane


def test_http_bench_runs_every_case_and_the_capacity_experiment(tmp_path):
    if os.geteuid() != 0:
        pytest.fail("the benchmark builds network namespaces: run the suite as root")
    out = tmp_path / "http.json"
    command = [
        str(VENV_BIN / "python"),
        "bench/http_farms.py",
        "--duration",
        "1",
        "--rounds",
        "1",
        "--connections",
        "8",
    ]
    result = subprocess.run(
        [*command, "--capacity", "2", "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    document = json.loads(out.read_text())
    engines = ("direct http", "haproxy http", "haproxy https", "nginx http", "nginx https")
    assert set(document["cases"]) == {f"{e} {k}" for e in engines for k in ("keep-alive", "close")}
    for name, row in document["cases"].items():
        assert row["req_s"] > 20 and row["errors"] < row["requests"] / 10, (name, row)
    assert set(document["https_http_ratio"]) == {
        "haproxy keep-alive",
        "haproxy close",
        "nginx keep-alive",
        "nginx close",
    }
    capacity = document["capacity"]
    assert capacity["declared"]["service_max_held"] <= 2 < capacity["not declared"]["service_max_held"]
    assert "HTTPS/HTTP req/s" in result.stdout and "capacity experiment" in result.stdout
