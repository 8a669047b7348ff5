"""Health checks through the API and the services: validation, defaults, events, transitions, healthd's status."""

from __future__ import annotations

import json
import time

import pytest
import redis
from rest_framework.test import APIClient

from farms import health_services
from farms.health_services import HealthTransition
from farms.models import Backend, ConfigGeneration, Farm, HealthEvent
from healthd.state import DOWN, UNKNOWN, UP, BackendHealth
from lbweb import heartbeat

pytestmark = pytest.mark.django_db


@pytest.fixture
def farm(client) -> dict:
    data = {"name": "web", "vip": "198.18.100.1", "protocol": "tcp", "ports": "80,443", "mode": "dnat"}
    farm = client.post("/api/v1/farms/", data, format="json").json()
    for address in ("198.18.1.11", "198.18.1.12"):
        client.post("/api/v1/backends/", {"farm": farm["id"], "address": address}, format="json")
    return client.get(f"/api/v1/farms/{farm['id']}/").json()


def test_a_farm_shows_its_protocol_default_check_traffic_and_backend_health(client, farm):
    assert farm["health_check"]["configured"] is False and farm["health_check"]["type"] == "tcp"
    assert farm["traffic"] == "balanced" and farm["when_all_down"] == "reject"
    assert {b["health"] for b in farm["backends"]} == {"unknown"}
    udp = client.post(
        "/api/v1/farms/", {"name": "dns", "vip": "198.18.100.2", "protocol": "udp", "ports": "53"}, format="json"
    )
    assert udp.json()["health_check"]["type"] == "none"  # a UDP service answers only what it understands


@pytest.mark.parametrize(
    "payload, field",
    [
        ({"type": "tcp", "interval": 1, "timeout": 2}, "timeout"),
        ({"type": "tcp", "interval": 0.01}, "interval"),
        ({"type": "tcp", "fall": 0}, "fall"),
        ({"type": "http", "http_path": "status"}, "http_path"),
        ({"type": "http", "http_statuses": "200,700"}, "http_statuses"),
        ({"type": "https", "http_statuses": "ok"}, "http_statuses"),
        ({"type": "http", "http_host": "a b"}, "http_host"),
        ({"type": "udp"}, "udp_send"),
        ({"type": "command", "command": ""}, "command"),
        ({"type": "command", "command": "echo 'unbalanced"}, "command"),
        ({"type": "ping"}, "type"),
    ],
)
def test_bad_health_checks_get_a_field_level_400(client, farm, payload, field):
    response = client.post("/api/v1/health-checks/", {"farm": farm["id"], **payload}, format="json")
    assert response.status_code == 400 and field in response.json(), response.json()


def test_a_farm_for_all_protocols_needs_the_port_to_probe(client):
    data = {"name": "any", "vip": "198.18.100.3", "protocol": "all", "ports": ""}
    farm = client.post("/api/v1/farms/", data, format="json").json()
    assert farm["health_check"]["type"] == "icmp"
    no_port = client.post("/api/v1/health-checks/", {"farm": farm["id"], "type": "tcp"}, format="json")
    assert no_port.status_code == 400 and "port" in no_port.json()
    ok = client.post("/api/v1/health-checks/", {"farm": farm["id"], "type": "tcp", "port": 22}, format="json")
    assert ok.status_code == 201


def test_one_check_per_farm_that_stays_with_its_farm(client, farm):
    first = client.post("/api/v1/health-checks/", {"farm": farm["id"], "type": "http"}, format="json")
    assert first.status_code == 201
    twin = client.post("/api/v1/health-checks/", {"farm": farm["id"], "type": "tcp"}, format="json")
    assert twin.status_code == 400 and "already has a health check" in twin.json()["farm"][0]
    changed = client.patch(f"/api/v1/health-checks/{first.json()['id']}/", {"http_path": "/up"}, format="json")
    assert changed.json()["http_path"] == "/up"
    assert client.get(f"/api/v1/farms/{farm['id']}/").json()["health_check"]["configured"] is True


@pytest.mark.parametrize(
    "payload, field",
    [
        ({"when_all_down": "fallback"}, "fallback_address"),
        ({"when_all_down": "fallback", "fallback_address": "2001:2::9"}, "fallback_address"),
        ({"fallback_address": "198.18.1.13"}, "fallback_address"),
        ({"when_all_down": "drop"}, "when_all_down"),
    ],
)
def test_bad_all_down_behaviour_is_refused(client, farm, payload, field):
    response = client.patch(f"/api/v1/farms/{farm['id']}/", payload, format="json")
    assert response.status_code == 400 and field in response.json(), response.json()


def test_health_fields_are_read_only_and_events_cannot_be_written(client, farm):
    backend = farm["backends"][0]["id"]
    client.patch(f"/api/v1/backends/{backend}/", {"health": "down"}, format="json")
    assert Backend.objects.get(id=backend).health == "unknown"
    assert client.post("/api/v1/health-events/", {"backend": backend}, format="json").status_code == 405


def generation_of(farm_id: int) -> int:
    return Farm.objects.get(id=farm_id).config_generation


def test_only_a_transition_that_changes_the_traffic_bumps_the_generation(client, farm):
    first, second = (b["id"] for b in farm["backends"])
    before = generation_of(farm["id"])
    health_services.health_record([HealthTransition(first, UP, "TCP port 80 open")])  # unknown -> up: same traffic
    assert generation_of(farm["id"]) == before
    changed = health_services.health_record(
        [HealthTransition(first, DOWN, "refused"), HealthTransition(second, DOWN, "refused")]
    )
    assert sorted(changed) == [first, second]
    after = generation_of(farm["id"])
    assert after == before + 1 == ConfigGeneration.current()  # two backends, one bump, one apply
    assert health_services.health_record([HealthTransition(first, DOWN, "again")]) == []  # no change, no event
    detail = client.get(f"/api/v1/farms/{farm['id']}/").json()
    assert detail["traffic"] == "rejected" and detail["apply_status"]["status"] == "pending"
    assert {b["health"] for b in detail["backends"]} == {"down"}
    events = client.get("/api/v1/health-events/", {"farm": farm["id"]}).json()
    assert events["count"] == 3
    assert (events["results"][0]["current"], events["results"][0]["reason"]) == ("down", "refused")


def test_turning_checks_off_brings_every_backend_back_as_unknown(client, farm):
    backend = farm["backends"][0]["id"]
    health_services.health_record([HealthTransition(backend, DOWN, "refused")])
    check = client.post("/api/v1/health-checks/", {"farm": farm["id"], "type": "none"}, format="json")
    assert check.status_code == 201
    assert Backend.objects.get(id=backend).health == UNKNOWN
    assert HealthEvent.objects.filter(backend_id=backend).first().reason == "health checking off"
    assert client.get(f"/api/v1/farms/{farm['id']}/").json()["traffic"] == "balanced"


@pytest.fixture
def redis_settings(settings, redis_server):
    settings.REDIS_URL = redis_server.url
    settings.LBWEB_HEALTHD_STALE_SECONDS = 5
    client = redis.Redis.from_url(redis_server.url)
    client.delete(heartbeat.KEY)
    return client


def test_health_status_tells_running_impaired_stopped_never_seen_and_unknown(client, redis_settings, settings):
    assert client.get("/api/v1/health-status/").json()["state"] == "never_seen"
    beat = {"pid": 1, "backends": 2, "checks_per_second": 2.0, "local_errors": 0, "last_local_error": ""}
    redis_settings.set(heartbeat.KEY, heartbeat.encode(beat))
    status = client.get("/api/v1/health-status/").json()
    assert status["state"] == "running" and status["backends_checked"] == 2
    own_error = {"last_local_error": "this appliance's interface br0 towards 198.18.1.12 has no carrier"}
    redis_settings.set(heartbeat.KEY, heartbeat.encode({**beat, **own_error, "last_local_error_at": time.time()}))
    status = client.get("/api/v1/health-status/").json()
    assert status["state"] == "impaired" and "br0" in status["detail"] and "last health" in status["detail"], status
    redis_settings.set(heartbeat.KEY, heartbeat.encode({**beat, **own_error, "last_local_error_at": time.time() - 6}))
    assert client.get("/api/v1/health-status/").json()["state"] == "running"  # an old error is history
    redis_settings.set(heartbeat.KEY, json.dumps({**beat, "beat_at": time.time() - 60}))
    status = client.get("/api/v1/health-status/").json()
    assert status["state"] == "stopped" and status["age_seconds"] >= 60
    settings.REDIS_URL = "unix:///nonexistent/redis.sock"
    assert client.get("/api/v1/health-status/").json()["state"] == "unknown"


def test_rise_and_fall_need_consecutive_results():
    state = BackendHealth(UP, rise=2, fall=3)
    assert state.observe(False) is None
    assert state.observe(True) is None  # one lost probe: forgotten
    assert [state.observe(False) for _ in range(3)] == [None, None, DOWN]
    assert [state.observe(True), state.observe(False), state.observe(True), state.observe(True)] == [
        None,
        None,
        None,
        UP,
    ]
    assert BackendHealth(UNKNOWN, rise=5, fall=3).observe(True) == UP  # first check of a new backend


def test_the_farms_page_shows_backend_health_traffic_and_a_stopped_healthd(client, admin_user, farm, redis_settings):
    health_services.health_record([HealthTransition(farm["backends"][0]["id"], DOWN, "TCP connect: refused")])
    redis_settings.set(heartbeat.KEY, json.dumps({"beat_at": time.time() - 60}))
    web = APIClient()
    web.force_login(admin_user)
    page = web.get("/").content.decode()
    assert "Health checking stopped" in page and "down: TCP connect: refused" in page and "balanced" in page
    redis_settings.set(heartbeat.KEY, heartbeat.encode({}))
    assert "healthd-status" not in web.get("/").content.decode()
