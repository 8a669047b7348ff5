"""The metrics store and API against a real Redis, with samples written as the collector writes them.

No kernel here: the samples are built by hand, so every expectation (zeros for
an idle farm, null for an unknown rate, a gap where nothing was sampled, the
minute averages) is exact.
"""

from __future__ import annotations

import pytest
import redis
from rest_framework.test import APIClient

from collector.sampler import Sample
from farms import services
from lbweb import redis_keys
from monitoring.store import MetricStore, client
from tests.conftest import new_token

pytestmark = pytest.mark.django_db

T0 = 1_800_000_000.0  # a minute boundary (divisible by 60)


@pytest.fixture
def store(redis_server, settings) -> MetricStore:
    settings.REDIS_URL = redis_server.url
    settings.LBWEB_METRICS_INTERVAL = 2.0
    redis.Redis.from_url(redis_server.url).flushdb()
    return MetricStore(client(redis_server.url), interval=2.0)


@pytest.fixture
def api(admin_user) -> APIClient:
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {new_token(admin_user)}")
    return api


@pytest.fixture
def farm():
    farm = services.farm_create(name="web", vip="198.18.100.1", protocol="tcp", ports="80", mode="snat")
    services.backend_create(farm=farm, address="198.18.1.11")
    return farm


def farm_entry(backend_id: int, rate: float | None, census: bool = False, enabled: bool = True) -> dict:
    entry = {k: rate for k in ("bytes_in", "bytes_out", "packets_in", "packets_out", "new_conns")}
    backend = {"bytes": rate, "packets": rate, "new_conns": rate, "enabled": enabled}
    if census:
        entry.update(active_conns=2, tracked_conns=3, snat_ports=3, snat_port_use=0.1)
        backend.update(active_conns=2, snat_ports=3)
    entry["backends"] = {str(backend_id): backend}
    return entry


def write(store: MetricStore, t: float, farm, rate: float | None, census: bool = False) -> None:
    backend = farm.backends.get()
    system = {"new_conns": rate, "bytes_in": rate, "cpu": [None if rate is None else 50.0], "census_interval": 2.0}
    store.write(Sample(t=t, system=system, farms={farm.id: farm_entry(backend.id, rate, census)}, census=census))


def series(api, path: str, **query) -> dict:
    response = api.get(f"/api/v1/metrics/{path}", query)
    assert response.status_code == 200, response.content
    return response.json()


def test_idle_farm_reads_as_zeros_unknown_rates_as_null_and_missing_samples_as_a_gap(store, api, farm, monkeypatch):
    monkeypatch.setattr("monitoring.selectors.time.time", lambda: T0 + 40)
    write(store, T0, farm, None)  # first sample after a start: no rate yet
    write(store, T0 + 2, farm, 1000.0, census=True)
    write(store, T0 + 4, farm, 0.0)  # idle: nothing stored for the farm ...
    write(store, T0 + 6, farm, 0.0)
    write(store, T0 + 20, farm, 500.0)  # ... and the collector was away from T0+6 to T0+20
    assert store.redis.xlen(redis_keys.metrics_farm(farm.id, "raw")) == 3

    points = series(api, f"farms/{farm.id}/", window="5m")["points"]
    by_time = {p["t"]: p for p in points if not p.get("gap")}
    assert by_time[T0]["bytes_in"] is None and by_time[T0]["new_conns"] is None
    assert by_time[T0 + 2]["bytes_out"] == 1000 and by_time[T0 + 2]["active_conns"] == 2
    assert by_time[T0 + 4]["bytes_in"] == 0 and by_time[T0 + 4]["backends"][str(farm.backends.get().id)]["bytes"] == 0
    assert by_time[T0 + 4]["backends"][str(farm.backends.get().id)]["enabled"] is True  # carried forward
    assert "active_conns" not in by_time[T0 + 4]  # no census then: not a zero either
    gaps = [p for p in points if p.get("gap")]
    assert gaps == [{"t": T0 + 8, "gap": True}]
    assert [p["t"] for p in points] == [T0, T0 + 2, T0 + 4, T0 + 6, T0 + 8, T0 + 20]

    system = series(api, "system/", window="5m")
    assert system["stale"] is True and system["age"] == 20.0  # now is T0+40: no sample for 20 s
    assert [p.get("gap", False) for p in system["points"]] == [False, False, False, False, True, False]
    later = series(api, "system/", window="5m", since=T0 + 4)  # what a live chart asks for
    assert [p["t"] for p in later["points"]] == [T0 + 6, T0 + 8, T0 + 20]


def test_minute_averages_count_idle_samples_as_zero(store, api, farm, monkeypatch):
    monkeypatch.setattr("monitoring.selectors.time.time", lambda: T0 + 125)
    for i in range(30):  # one busy sample in a minute of 30
        write(store, T0 + 2 * i, farm, 600.0 if i == 0 else 0.0, census=i == 0)
    write(store, T0 + 60, farm, 0.0)  # crossing the minute writes the average of the previous one
    points = series(api, f"farms/{farm.id}/", window="24h")["points"]
    assert len(points) == 1 and points[0]["t"] == T0
    assert points[0]["bytes_out"] == pytest.approx(600 / 30)
    assert points[0]["active_conns"] == 2  # census figures average over the census samples only


def test_summary_lists_every_farm_with_its_newest_figures_and_the_newest_census(store, api, farm, monkeypatch):
    monkeypatch.setattr("monitoring.selectors.time.time", lambda: T0 + 3)
    write(store, T0, farm, 100.0, census=True)
    write(store, T0 + 2, farm, 300.0)
    summary = series(api, "summary/")
    assert summary["stale"] is False and summary["census_at"] == T0
    (row,) = summary["farms"]
    assert row["name"] == "web" and row["bytes_in"] == 300.0 and row["active_conns"] == 2


def test_metrics_need_authentication_and_say_503_when_redis_is_down(api, farm, settings):
    assert APIClient().get("/api/v1/metrics/summary/").status_code in (401, 403)
    settings.REDIS_URL = "unix:///nonexistent/redis.sock"
    response = api.get("/api/v1/metrics/summary/")
    assert response.status_code == 503 and "Redis" in response.json()["detail"]


def test_metrics_endpoints_are_in_the_openapi_schema(api):
    schema = api.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    for path in ("/api/v1/metrics/summary/", "/api/v1/metrics/system/", "/api/v1/metrics/farms/{farm_id}/"):
        assert path in schema["paths"], sorted(schema["paths"])
    parameters = {p["name"] for p in schema["paths"]["/api/v1/metrics/system/"]["get"]["parameters"]}
    assert {"window", "since"} <= parameters


def test_dashboard_pages_render_for_a_signed_in_user(admin_user, farm, client):
    client.force_login(admin_user)
    assert b"chart-conntrack" in client.get("/monitoring/").content
    page = client.get(f"/monitoring/farms/{farm.id}/").content
    assert b"chart-active" in page and b"vendor/chart.js/chart.umd.js" in page
    assert client.get("/monitoring/farms/999999/").status_code == 404
