"""``/metrics`` scraped by Debian's real Prometheus: the test starts ``prometheus`` with a configuration
pointing at a live lbweb (the real worker and collector in the lab's LB namespace, real traffic through a
farm), then asks Prometheus' own API for the series. A second job scrapes with a wrong token and must
be refused. Without Prometheus on the machine (``deploy/test.sh`` installs it) the test fails.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from monitoring.models import MetricsToken
from monitoring.prometheus import exposition
from tests.conftest import OUTPUT, wait_for
from tests.support.lab import backend4, vip4

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
VIP = vip4(90)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def prometheus(live_server, tmp_path, request):
    """Debian's Prometheus scraping the live server every second: job ``lbweb`` with a metrics token,
    job ``intruder`` with a token lbweb never issued."""
    _row, token = MetricsToken.issue(name="prometheus")
    target = urllib.parse.urlsplit(live_server.url).netloc
    config = tmp_path / "prometheus.yml"
    jobs = [("lbweb", token), ("intruder", "not-a-token")]
    config.write_text(
        json.dumps(  # YAML is a superset of JSON
            {
                "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
                "scrape_configs": [
                    {
                        "job_name": job,
                        "metrics_path": "/metrics",
                        "authorization": {"type": "Bearer", "credentials": credentials},
                        "static_configs": [{"targets": [target]}],
                    }
                    for job, credentials in jobs
                ],
            }
        )
    )
    port = free_port()
    log = (OUTPUT / "logs" / f"prometheus-{request.node.name}.log").open("w")
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _ready(base), timeout=30, what="prometheus ready")
        yield base, token
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _ready(base: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base}/-/ready", timeout=1) as answer:
            return answer.status == 200
    except OSError:
        return False


def query(base: str, promql: str) -> dict[tuple, float]:
    """Prometheus' instant query: {label values (sorted by name, __name__ and job left out): value}."""
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=5) as answer:
        body = json.load(answer)
    assert body["status"] == "success", body
    return {
        tuple(v for k, v in sorted(r["metric"].items()) if k not in ("__name__", "job", "instance")): float(
            r["value"][1]
        )
        for r in body["data"]["result"]
    }


def targets(base: str) -> dict[str, dict]:
    with urllib.request.urlopen(f"{base}/api/v1/targets", timeout=5) as answer:
        return {t["labels"]["job"]: t for t in json.load(answer)["data"]["activeTargets"]}


DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "lbweb-dashboard.json"
NO_DATA_HERE = {"Apply failures", "Certificates: days left", "Backends down (health check)"}


def dashboard_queries_answer(base: str) -> None:
    """Every expression of the Grafana dashboard, with its variables as Grafana fills them, is PromQL that
    this Prometheus accepts, and answers with series (but for what this lab cannot show)."""
    dashboard = json.loads(DASHBOARD.read_text())
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            expr = target["expr"].replace("$farm", "scraped").replace("$__rate_interval", "1m")
            if panel["title"] in NO_DATA_HERE:
                query(base, expr)  # accepted (a refused expression fails the query)
            else:
                wait_for(lambda e=expr: query(base, e), timeout=10, what=f"{panel['title']}: {expr}")


@pytest.mark.dataplane
@pytest.mark.django_db(transaction=True)
def test_prometheus_scrapes_lbweb_figures_with_a_scoped_token(api, lab, collector, prometheus, client):
    base, token = prometheus
    farm = api.farm(
        name="scraped",
        vip=VIP,
        protocol="tcp",
        ports="80",
        mode="snat",
        scheduler="rr",
        backends=[{"address": backend4(b)} for b in ("b1", "b2")],
    )
    api.wait_applied(farm["id"])
    api.patch(f"backends/{farm['backends'][1]['id']}/", {"state": "disabled"})
    api.wait_applied(farm["id"])
    lab.http_get(VIP, 80, count=6)
    held = [lab.connect(VIP, 80) for _ in range(3)]
    try:
        conns = wait_for(
            lambda: (r := query(base, 'lbweb_farm_connections_total{farm="scraped"}')) and r[("scraped",)] >= 9 and r,
            timeout=30,
            what="the farm's connections in Prometheus",
        )
        assert conns == {("scraped",): 9.0}
        sessions = wait_for(
            lambda: (r := query(base, 'lbweb_farm_current_sessions{farm="scraped"}')) and r[("scraped",)] == 3 and r,
            timeout=30,
            what="a census in Prometheus",
        )
        assert sessions
        b1, b2 = backend4("b1"), backend4("b2")
        # the disabled backend has no counter in the kernel: no series (unmeasured is not zero)
        assert query(base, "lbweb_backend_connections_total") == {(b1, "scraped"): 9.0}
        assert query(base, "lbweb_backend_current_sessions")[(b1, "scraped")] == 3
        assert query(base, "lbweb_backend_status") == {(b1, "scraped"): 1.0, (b2, "scraped"): 0.0}
        assert (
            query(base, "lbweb_farm_bytes_out_total")[("scraped",)]
            > query(base, "lbweb_farm_bytes_in_total")[("scraped",)]
        )
        assert query(base, "lbweb_farm_status") == {("scraped", "snat", "tcp"): 1.0}
        assert query(base, "lbweb_farm_snat_ports_in_use")[("scraped",)] == 9  # closed ones linger (TIME_WAIT)
        assert query(base, "lbweb_snat_ports_in_use")[()] >= 9
        check = query(base, f'lbweb_backend_check_status{{backend="{b1}"}}')
        assert sum(check.values()) == 1 and {k[-1] for k in check} == {"up", "down", "unknown"}
        assert query(base, "lbweb_conntrack_limit")[()] > 0 and query(base, "lbweb_conntrack_entries")[()] >= 3
        up = query(base, "lbweb_process_up")
        assert up[("worker",)] == 1 and up[("collector",)] == 1 and up[("web",)] == 1
        assert query(base, "lbweb_apply_duration_seconds_count")[()] >= 2
        buckets = query(base, "lbweb_apply_duration_seconds_bucket")
        assert buckets[("+Inf",)] == query(base, "lbweb_apply_duration_seconds_count")[()]
        assert query(base, "histogram_quantile(0.5, lbweb_apply_duration_seconds_bucket)")[()] > 0
        dashboard_queries_answer(base)
    finally:
        for sock in held:
            sock.close()

    # The wrong token never got a figure; lbweb's token reads /metrics and nothing else.
    refused = wait_for(
        lambda: (t := targets(base)["intruder"])["health"] != "unknown" and t, what="the intruder's scrape"
    )
    assert refused["health"] == "down" and "401" in refused["lastError"], refused
    assert targets(base)["lbweb"]["health"] == "up"
    assert query(base, 'up{job="intruder"}') == {(): 0.0}
    from rest_framework.test import APIClient

    scraper = APIClient()
    scraper.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert scraper.get("/api/v1/farms/").status_code == 401
    scraper.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert scraper.get("/api/v1/farms/").status_code == 401
    assert client.get("/metrics").status_code == 401  # an API token does not read /metrics either
    assert b"lbweb_farm_status" in exposition()
