"""``/metrics`` without a kernel: the exposition's names and values from the database and from samples
written as the collector writes them, the scoped token (only ``/metrics``, nothing else), its API and
command, and certificate expiry (the web's own, and a source another app registers)."""

from __future__ import annotations

import datetime
import io

import pytest
import redis
from django.core.management import call_command
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.test import APIClient

from collector.sampler import Sample
from farms import services
from farms.models import ApplyRun, AuditEvent
from monitoring import prometheus
from monitoring.models import MetricsToken
from monitoring.store import MetricStore, client
from tests.conftest import new_token
from tests.support import certs

pytestmark = pytest.mark.django_db


@pytest.fixture
def store(redis_server, settings) -> MetricStore:
    settings.REDIS_URL = redis_server.url
    redis.Redis.from_url(redis_server.url).flushdb()
    return MetricStore(client(redis_server.url), interval=2.0)


def scrape(token: str | None) -> tuple[int, dict[str, dict[tuple, float]]]:
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    answer = Client().get("/metrics", **headers)
    if answer.status_code != 200:
        return answer.status_code, {}
    assert answer["Content-Type"].startswith("text/plain; version=0.0.4")
    series: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(answer.content.decode()):
        for s in family.samples:
            series.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return 200, series


def test_exposition_from_the_database_and_the_collectors_samples(store, admin_user, monkeypatch):
    farm = services.farm_create(name="web", vip="198.18.100.1", ports="80", mode="snat")
    up = services.backend_create(farm=farm, address="198.18.1.11", port=8080)
    down = services.backend_create(farm=farm, address="198.18.1.12", port=8080)
    type(down).objects.filter(pk=down.pk).update(health="down")
    entry = {
        "total_bytes_in": 1000,
        "total_bytes_out": 9000,
        "total_conns": 12,
        "active_conns": 2,
        "snat_ports": 5,
        "backends": {str(up.id): {"total_bytes": 10000, "total_conns": 12, "active_conns": 2, "snat_ports": 5}},
    }
    system = {"conntrack_count": 40, "conntrack_max": 262144}
    store.write(Sample(t=1_800_000_000.0, system=system, farms={farm.id: entry}, census=True))
    for ms, ok in ((3, True), (40, True), (700, False)):
        ApplyRun.objects.create(generation=1, kind="full", started="2026-11-24T00:00Z", duration_ms=ms, ok=ok)
    _row, token = MetricsToken.issue(name="prometheus")

    status, series = scrape(token)
    assert status == 200
    web = (("farm", "web"),)
    b_up, b_down = (
        (("backend", "198.18.1.11:8080"), ("farm", "web")),
        (("backend", "198.18.1.12:8080"), ("farm", "web")),
    )
    assert series["lbweb_farm_bytes_in_total"] == {web: 1000} and series["lbweb_farm_bytes_out_total"] == {web: 9000}
    assert series["lbweb_farm_connections_total"] == {web: 12}
    assert series["lbweb_farm_current_sessions"] == {web: 2} and series["lbweb_farm_snat_ports_in_use"] == {web: 5}
    assert series["lbweb_farm_status"] == {(("farm", "web"), ("mode", "snat"), ("protocol", "tcp")): 0}  # pending
    assert series["lbweb_backend_bytes_total"] == {b_up: 10000}  # the other has no counter: no series, not 0
    assert series["lbweb_backend_status"] == {b_up: 1, b_down: 0}
    assert series["lbweb_backend_check_status"][(*b_down[:1], b_down[1], ("state", "down"))] == 1
    assert series["lbweb_backend_check_status"][(*b_down[:1], b_down[1], ("state", "unknown"))] == 0
    assert series["lbweb_conntrack_entries"] == {(): 40} and series["lbweb_conntrack_limit"] == {(): 262144}
    assert series["lbweb_snat_ports_in_use"] == {(): 5}
    assert series["lbweb_process_up"][(("process", "web"),)] == 1
    assert series["lbweb_process_up"][(("process", "worker"),)] == 0  # no heartbeat here
    buckets = series["lbweb_apply_duration_seconds_bucket"]
    assert buckets[(("le", "0.005"),)] == 1 and buckets[(("le", "0.05"),)] == 2 and buckets[(("le", "+Inf"),)] == 3
    assert series["lbweb_apply_duration_seconds_count"] == {(): 3}
    assert abs(series["lbweb_apply_duration_seconds_sum"][()] - 0.743) < 1e-9
    assert series["lbweb_apply_failures_total"] == {(): 1}
    assert series["lbweb_changes_pending"] == {(): 1}


def test_certificates_expiry_the_web_one_and_registered_sources(store, tmp_path, monkeypatch):
    monkeypatch.setenv("LBWEB_VAR_DIR", str(tmp_path / "var"))
    call_command("ensure_tls")
    ends = datetime.datetime(2027, 3, 1, tzinfo=datetime.UTC)
    source = lambda: [("http-farm shop", "CN=shop.example", ends)]  # noqa: E731
    prometheus.register_certificates(source)
    from l7.models import Certificate

    leaf = certs.chain()[2]
    Certificate.objects.create(
        name="shop-cert",
        certificate=leaf.pem,
        private_key=leaf.key_pem,
        names=["localhost"],
        not_after=leaf.cert.not_valid_after_utc,
    )
    try:
        _row, token = MetricsToken.issue(name="prometheus")
        certificates = scrape(token)[1]["lbweb_certificate_expiry_timestamp_seconds"]
    finally:
        prometheus._CERTIFICATES.remove(source)
    assert certificates[(("certificate", "http-farm shop"), ("subject", "CN=shop.example"))] == ends.timestamp()
    assert (
        certificates[(("certificate", "http shop-cert"), ("subject", "localhost"))]
        == leaf.cert.not_valid_after_utc.timestamp()
    )
    (web,) = [v for k, v in certificates.items() if ("certificate", "web") in k]
    assert web > datetime.datetime.now(datetime.UTC).timestamp() + 800 * 86400  # 825 days from now


def test_the_token_reads_metrics_and_nothing_else(store, admin_user):
    row, token = MetricsToken.issue(name="prometheus")
    assert scrape(None)[0] == 401 and scrape("wrong")[0] == 401
    assert Client().get("/metrics", HTTP_AUTHORIZATION=f"Token {token}").status_code == 401
    assert scrape(token)[0] == 200
    row.refresh_from_db()
    assert row.last_used is not None and row.digest != token and token.startswith(row.prefix)
    scraper = APIClient()
    for scheme in ("Bearer", "Token"):
        scraper.credentials(HTTP_AUTHORIZATION=f"{scheme} {token}")
        assert scraper.get("/api/v1/farms/").status_code == 401
        assert scraper.get("/api/v1/metrics/summary/").status_code == 401
    admin = APIClient()
    admin.credentials(HTTP_AUTHORIZATION=f"Token {new_token(admin_user)}")
    assert admin.get("/metrics").status_code == 401  # an API token is not a metrics token either
    assert Client().post("/metrics", HTTP_AUTHORIZATION=f"Bearer {token}").status_code == 405


def test_tokens_api_and_command_are_audited_and_admin_only(store, admin_user, role_users):
    admin = APIClient()
    admin.credentials(HTTP_AUTHORIZATION=f"Token {new_token(admin_user)}")
    made = admin.post("/api/v1/metrics/tokens/", {"name": "grafana-agent"}, format="json")
    assert made.status_code == 201, made.content
    token = made.json()["token"]
    assert scrape(token)[0] == 200
    listed = admin.get("/api/v1/metrics/tokens/").json()["results"]
    assert [t["name"] for t in listed] == ["grafana-agent"] and "token" not in listed[0]
    assert admin.post("/api/v1/metrics/tokens/", {"name": "grafana-agent"}, format="json").status_code == 400
    operator = APIClient()
    operator.credentials(HTTP_AUTHORIZATION=f"Token {new_token(role_users['operator'])}")
    assert operator.get("/api/v1/metrics/tokens/").status_code == 403
    assert admin.delete(f"/api/v1/metrics/tokens/{made.json()['id']}/").status_code == 204
    assert scrape(token)[0] == 401
    events = [(e.action, e.object_type, e.actor_name) for e in AuditEvent.objects.order_by("id")]
    assert events == [("create", "metricstoken", "admin"), ("delete", "metricstoken", "admin")]

    out = io.StringIO()
    call_command("create_metrics_token", "prometheus", stdout=out, stderr=io.StringIO())
    assert scrape(out.getvalue().strip())[0] == 200


def test_http_farms_retries_and_redispatches_from_the_newest_sample(store):
    farm = services.farm_create(name="shop", vip="198.18.100.1", ports="80", mode="http")
    entry = {"requests": 40.0, "retries": 12.5, "redispatches": 12.5, "backends": {}}
    store.write(Sample(t=1_800_000_000.0, system={}, farms={farm.id: entry}, census=False))
    _row, token = MetricsToken.issue(name="prometheus")
    status, series = scrape(token)
    assert status == 200
    assert series["lbweb_http_farm_retries_per_second"] == {(("farm", "shop"),): 12.5}
    assert series["lbweb_http_farm_redispatches_per_second"] == {(("farm", "shop"),): 12.5}
