"""REST API: CRUD, authentication, field-level validation, OpenAPI schema and offline docs."""

from __future__ import annotations

import re

import pytest
from rest_framework.test import APIClient

from farms.models import Backend, Farm

pytestmark = pytest.mark.django_db


def farm_data(**overrides) -> dict:
    data = {"name": "web", "vip": "198.18.100.1", "protocol": "tcp", "ports": "80", "mode": "dnat", "scheduler": "rr"}
    return {**data, **overrides}


def create_farm(client, **overrides) -> dict:
    response = client.post("/api/v1/farms/", farm_data(**overrides), format="json")
    assert response.status_code == 201, response.content
    return response.json()


def test_anonymous_requests_are_refused():
    response = APIClient().get("/api/v1/farms/")
    assert response.status_code in (401, 403)


def test_session_authentication_works(admin_user):
    client = APIClient()
    client.force_login(admin_user)
    assert client.get("/api/v1/farms/").status_code == 200


def test_create_read_update_delete_farm_and_backends(client):
    farm = create_farm(client, ports="443, 80,8000-8100")
    assert farm["ports"] == "80,443,8000-8100"
    assert farm["apply_status"]["status"] == "pending"  # no worker in this test: saved, not yet in the kernel
    backend = client.post(
        "/api/v1/backends/", {"farm": farm["id"], "address": "198.18.1.11", "weight": 5}, format="json"
    )
    assert backend.status_code == 201, backend.content
    detail = client.get(f"/api/v1/farms/{farm['id']}/").json()
    assert [b["address"] for b in detail["backends"]] == ["198.18.1.11"]
    assert client.patch(f"/api/v1/farms/{farm['id']}/", {"mode": "snat"}, format="json").json()["mode"] == "snat"
    bid = backend.json()["id"]
    assert client.patch(f"/api/v1/backends/{bid}/", {"state": "disabled"}, format="json").json()["state"] == "disabled"
    assert client.get("/api/v1/backends/", {"farm_name": "web"}).json()["count"] == 1
    assert client.delete(f"/api/v1/farms/{farm['id']}/").status_code == 204
    assert not Farm.objects.exists() and not Backend.objects.exists()


def test_every_write_bumps_the_generation_so_status_turns_pending(client):
    farm = create_farm(client)
    first = farm["apply_status"]["config_generation"]
    Farm.objects.filter(id=farm["id"]).update(applied_generation=first)  # as if the worker had applied it
    assert client.get(f"/api/v1/farms/{farm['id']}/").json()["apply_status"]["status"] == "applied"
    client.post("/api/v1/backends/", {"farm": farm["id"], "address": "198.18.1.11"}, format="json")
    status = client.get(f"/api/v1/farms/{farm['id']}/").json()["apply_status"]
    assert status["status"] == "pending" and status["config_generation"] > first


@pytest.mark.parametrize(
    "overrides, field, words",
    [
        ({"vip": "300.1.1.1"}, "vip", "valid"),
        ({"ports": "0"}, "ports", "out of range"),
        ({"ports": "70000"}, "ports", "out of range"),
        ({"ports": "http"}, "ports", "not a port"),
        ({"ports": "90-80"}, "ports", "ends before"),
        ({"mode": "stlsdnat", "protocol": "tcp", "scheduler": "rr"}, "scheduler", "hash"),
        ({"mark": 2**32}, "mark", "less than or equal"),
        ({"name": "Not a slug!"}, "name", "slug"),
        ({"mode": "magic"}, "mode", "valid choice"),
    ],
)
def test_bad_farm_fields_get_a_field_level_400(client, overrides, field, words):
    response = client.post("/api/v1/farms/", farm_data(**overrides), format="json")
    assert response.status_code == 400
    assert words in " ".join(response.json()[field]).lower(), response.json()
    assert not Farm.objects.exists()


def test_duplicate_vip_protocol_port_across_farms_is_refused(client):
    create_farm(client, name="first", ports="80,8000-8100")
    response = client.post("/api/v1/farms/", farm_data(name="second", ports="443,8050"), format="json")
    assert response.status_code == 400
    assert "8050" in response.json()["ports"][0] and "first" in response.json()["ports"][0]
    assert client.post("/api/v1/farms/", farm_data(name="udp", protocol="udp"), format="json").status_code == 201
    everything = client.post("/api/v1/farms/", farm_data(name="all", protocol="all", ports=""), format="json")
    assert everything.status_code == 400 and "vip" in everything.json()
    twin = client.post("/api/v1/farms/", farm_data(name="first", vip="198.18.100.9"), format="json")
    assert twin.status_code == 400 and "already exists" in twin.json()["name"][0]
    assert Farm.objects.count() == 2


@pytest.mark.parametrize(
    "payload, field",
    [
        ({"address": "2001:2:0:1::11"}, "address"),
        ({"address": "not-an-ip"}, "address"),
        ({"address": "198.18.1.11", "port": 0}, "port"),
        ({"address": "198.18.1.11", "port": 65536}, "port"),
        ({"address": "198.18.1.11", "weight": 0}, "weight"),
        ({"address": "198.18.1.11", "weight": 10001}, "weight"),
    ],
)
def test_bad_backend_fields_get_a_field_level_400(client, payload, field):
    farm = create_farm(client)
    response = client.post("/api/v1/backends/", {"farm": farm["id"], **payload}, format="json")
    assert response.status_code == 400
    assert field in response.json(), response.json()
    assert not Backend.objects.exists()


def test_duplicate_backend_and_family_change_are_refused(client):
    farm = create_farm(client)
    ok = client.post("/api/v1/backends/", {"farm": farm["id"], "address": "198.18.1.11"}, format="json")
    assert ok.status_code == 201
    twin = client.post("/api/v1/backends/", {"farm": farm["id"], "address": "198.18.1.11"}, format="json")
    assert twin.status_code == 400 and "already has backend" in twin.json()["address"][0]
    to_v6 = client.patch(f"/api/v1/farms/{farm['id']}/", {"vip": "2001:2:0:100::1"}, format="json")
    assert to_v6.status_code == 400 and "vip" in to_v6.json()
    assert Farm.objects.get().vip == "198.18.100.1"


def test_openapi_schema_and_offline_docs(client, admin_user):
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json")
    assert schema.status_code == 200
    paths = schema.json()["paths"]
    assert "/api/v1/farms/" in paths and "/api/v1/backends/{id}/" in paths and "/api/v1/apply-runs/" in paths
    docs = client.get("/api/docs/")
    assert docs.status_code == 200
    html = docs.content.decode()
    assert "swagger-ui" in html
    external = [u for u in re.findall(r"""(?:src|href)=["']([^"']+)""", html) if re.match(r"(https?:)?//", u)]
    assert external == [], f"the docs page must work offline, found {external}"


def test_farm_list_page_shows_apply_status(admin_user, client):
    farm = create_farm(client)
    web = APIClient()
    assert web.get("/").status_code == 302  # login first
    web.force_login(admin_user)
    page = web.get("/").content.decode()
    assert farm["name"] in page and "pending" in page and "198.18.100.1" in page


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"mode": "stlsdnat", "protocol": "all", "ports": "", "scheduler": "hash", "sched_param": "srcip"}, "protocol"),
        (
            {"mode": "stlsdnat", "protocol": "udp", "ports": "53", "persistence": "srcip"},
            "persistence",
        ),
        ({"scheduler": "hash"}, "sched_param"),
        ({"scheduler": "hash", "sched_param": "srcip colour"}, "sched_param"),
        ({"sched_param": "srcip"}, "sched_param"),
        ({"mode": "dnat", "source_addr": "198.18.1.2"}, "source_addr"),
        ({"mode": "snat", "source_addr": "2001:2::1"}, "source_addr"),
        ({"mode": "snat", "source_addr": "198.18.1.9-198.18.1.2"}, "source_addr"),
        ({"mode": "snat", "source_ports": "70000"}, "source_ports"),
        ({"helper": "tftp"}, "helper"),
        ({"protocol": "udp", "ports": "53", "rst_rtlimit": 5}, "rst_rtlimit"),
        ({"interface": "eth0"}, "interface"),
        ({"mode": "dsr", "scheduler": "hash", "sched_param": "srcip"}, "interface"),
        (
            {"mode": "dsr", "interface": "eth0", "scheduler": "hash", "sched_param": "srcip", "log_output": True},
            "log_output",
        ),
        ({"mode": "stlsdnat", "protocol": "udp", "ports": "514", "scheduler": "leastconn"}, "scheduler"),
        ({"mode": "stlsdnat", "protocol": "udp", "ports": "514", "helper": "tftp"}, "helper"),
        ({"scheduler": "weight", "persistence": "srcmac", "intra_connect": True}, "persistence"),
    ],
)
def test_combinations_the_kernel_cannot_honour_get_a_400_naming_the_field(client, overrides, field):
    response = client.post("/api/v1/farms/", farm_data(**overrides), format="json")
    assert response.status_code == 400, response.content
    assert field in response.json(), response.json()
    assert not Farm.objects.exists()


def test_policies_are_validated_shared_and_protected(client):
    bad = client.post("/api/v1/policies/", {"name": "bad", "elements": "198.18.0.0/24, nonsense"}, format="json")
    assert bad.status_code == 400 and "nonsense" in bad.json()["elements"][0]
    policy = client.post("/api/v1/policies/", {"name": "block", "elements": "198.18.5.1 198.18.6.0/24"}, format="json")
    assert policy.status_code == 201 and policy.json()["elements"] == "198.18.5.1\n198.18.6.0/24"
    farm = create_farm(client, policies=["block"])
    assert farm["policies"] == ["block"]
    dsr = client.post(
        "/api/v1/farms/",
        farm_data(name="d", vip="198.18.100.2", mode="dsr", interface="eth0", scheduler="hash", sched_param="srcip",
                  policies=["block"]),
        format="json",
    )  # fmt: skip
    assert dsr.status_code == 400 and "policies" in dsr.json()
    used = client.delete(f"/api/v1/policies/{policy.json()['id']}/")
    assert used.status_code == 400 and "web" in used.json()["policy"][0]


def test_snat_capacity_is_reported(client):
    farm = create_farm(client, mode="snat", source_addr="198.18.1.2-198.18.1.5", source_ports="1024-2047")
    assert farm["snat_capacity"] == {"addresses": 4, "ports": 1024, "per_backend": 4096}
    assert create_farm(client, name="masq", vip="198.18.100.7", mode="snat")["snat_capacity"]["addresses"] == 1
    assert create_farm(client, name="dn", vip="198.18.100.8")["snat_capacity"] is None


def test_static_sessions_need_persistence_and_a_backend_of_the_farm(client):
    plain = create_farm(client)
    backend = client.post("/api/v1/backends/", {"farm": plain["id"], "address": "198.18.1.11"}, format="json").json()
    refused = client.post(
        "/api/v1/static-sessions/",
        {"farm": plain["id"], "client": "198.18.0.2", "backend": backend["id"]},
        format="json",
    )
    assert refused.status_code == 400 and "farm" in refused.json()
    sticky = create_farm(client, name="sticky", vip="198.18.100.3", scheduler="weight", persistence="srcip srcport")
    other = client.post("/api/v1/backends/", {"farm": sticky["id"], "address": "198.18.1.12"}, format="json").json()
    bad_key = client.post(
        "/api/v1/static-sessions/",
        {"farm": sticky["id"], "client": "198.18.0.2", "backend": other["id"]},
        format="json",
    )
    assert bad_key.status_code == 400 and "client" in bad_key.json()
    wrong_backend = client.post(
        "/api/v1/static-sessions/",
        {"farm": sticky["id"], "client": "198.18.0.2:4000", "backend": backend["id"]},
        format="json",
    )
    assert wrong_backend.status_code == 400 and "backend" in wrong_backend.json()
    ok = client.post(
        "/api/v1/static-sessions/",
        {"farm": sticky["id"], "client": "198.18.0.2:4000", "backend": other["id"]},
        format="json",
    )
    assert ok.status_code == 201, ok.content
