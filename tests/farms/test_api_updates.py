"""PATCH and PUT on every writable API object change it: one field alone (PATCH), or the whole object as GET
shows it with that field changed (PUT). The serializers validate with the model's ``clean()`` on the row being
changed, so an update is never refused as a duplicate of itself ("... with this ID already exists")."""

from __future__ import annotations

import pytest

from tests.support import certs

pytestmark = pytest.mark.django_db

READ_ONLY = {"id", "url", "created", "updated", "backends", "apply_status", "traffic", "health_check", "snat_capacity"}


def made(client, path: str, data: dict) -> dict:
    response = client.post(path, data, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def writable(shown: dict, *, drop: tuple[str, ...] = ()) -> dict:
    return {k: v for k, v in shown.items() if k not in READ_ONLY and k not in drop}


def check_patch(client, url: str, change: dict) -> dict:
    response = client.patch(url, change, format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert {k: body[k] for k in change} == change
    return body


def check_put(client, url: str, change: dict, *, extra: dict | None = None, drop: tuple[str, ...] = ()) -> dict:
    whole = {**writable(client.get(url).json(), drop=drop), **(extra or {}), **change}
    response = client.put(url, whole, format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert {k: body[k] for k in change} == change
    return body


@pytest.fixture
def l4_farm(client) -> dict:
    return made(client, "/api/v1/farms/", {"name": "l4", "vip": "198.18.100.1", "ports": "80", "mode": "dnat"})


@pytest.fixture
def http_farm(client) -> dict:
    return made(client, "/api/v1/farms/", {"name": "web", "vip": "198.18.100.2", "ports": "80", "mode": "http"})


def test_farms(client, l4_farm):
    url = f"/api/v1/farms/{l4_farm['id']}/"
    check_patch(client, url, {"description": "patched"})
    check_put(client, url, {"ports": "80,443"})


def test_backends(client, l4_farm):
    backend = made(client, "/api/v1/backends/", {"farm": l4_farm["id"], "address": "198.18.1.11"})
    url = f"/api/v1/backends/{backend['id']}/"
    check_patch(client, url, {"weight": 3})
    check_put(client, url, {"weight": 5}, drop=("health", "health_changed", "health_reason"))


def test_policies(client):
    policy = made(client, "/api/v1/policies/", {"name": "office", "type": "deny", "elements": "198.18.9.0/24"})
    url = f"/api/v1/policies/{policy['id']}/"
    check_patch(client, url, {"description": "patched"})
    check_put(client, url, {"elements": "198.18.9.9"}, drop=("farms",))


def test_health_checks(client, l4_farm):
    check = made(client, "/api/v1/health-checks/", {"farm": l4_farm["id"], "type": "tcp"})
    url = f"/api/v1/health-checks/{check['id']}/"
    check_patch(client, url, {"interval": 3})
    check_put(client, url, {"rise": 3})


def test_http_services(client, http_farm):
    service = made(client, "/api/v1/http-services/", {"farm": http_farm["id"], "name": "api", "path_prefix": "/api"})
    url = f"/api/v1/http-services/{service['id']}/"
    check_patch(client, url, {"position": 1})
    check_put(client, url, {"hosts": "api.example.com"})
    check_put(client, url, {"name": "api2", "position": 2})
    taken = made(client, "/api/v1/http-services/", {"farm": http_farm["id"], "name": "other"})
    refused = client.patch(f"/api/v1/http-services/{taken['id']}/", {"name": "api2"}, format="json")
    assert refused.status_code == 400 and "api2" not in str(client.get(f"/api/v1/http-services/{taken['id']}/").json())
    other = made(client, "/api/v1/farms/", {"name": "web2", "vip": "198.18.100.3", "ports": "80", "mode": "http"})
    moved = client.patch(url, {"farm": other["id"]}, format="json")
    assert moved.status_code == 400 and "another farm" in moved.json()["farm"][0]
    assert client.get(url).json()["farm"] == http_farm["id"]


def test_certificates(client):
    first = certs.issue("www.example.com", names=("www.example.com",))
    renewed = certs.issue("www.example.com", names=("www.example.com",))
    upload = {"name": "www", "certificate": first.pem, "private_key": first.key_pem}
    cert = made(client, "/api/v1/certificates/", upload)
    url = f"/api/v1/certificates/{cert['id']}/"
    check_patch(client, url, {"acme_domains": "www.example.com"})
    drop = ("source", "names", "issuer", "not_before", "not_after", "days_left", "expiry_status")
    body = check_put(client, url, {"chain": ""}, extra={"certificate": renewed.pem, "private_key": renewed.key_pem},
                     drop=drop)  # fmt: skip
    assert body["name"] == "www" and body["certificate"].strip() == renewed.pem.strip()


def test_an_http_farms_options_and_a_backends_http_options(client, http_farm):
    check_patch(client, f"/api/v1/farms/{http_farm['id']}/http/", {"hsts_max_age": 0, "timeout_client": 40})
    check_patch(client, f"/api/v1/farms/{http_farm['id']}/http/", {"timeout_client": 50})
    backend = made(client, "/api/v1/backends/", {"farm": http_farm["id"], "address": "198.18.1.11", "port": 80})
    check_patch(client, f"/api/v1/backends/{backend['id']}/http/", {"capacity": 10})
    check_patch(client, f"/api/v1/backends/{backend['id']}/http/", {"tls": True})


def test_network_interfaces_routes_and_settings(client):
    interface = made(client, "/api/v1/network/interfaces/", {"name": "eth1", "kind": "ethernet"})
    url = f"/api/v1/network/interfaces/{interface['id']}/"
    check_patch(client, url, {"mtu": 9000})
    check_put(client, url, {"description": "uplink"}, drop=("addresses",))
    made(client, "/api/v1/network/addresses/", {"interface": "eth1", "address": "198.18.60.1/24"})
    route = made(client, "/api/v1/network/routes/", {"destination": "198.18.64.0/18", "gateway": "198.18.60.254"})
    url = f"/api/v1/network/routes/{route['id']}/"
    check_patch(client, url, {"metric": 10})
    check_put(client, url, {"metric": 20})
    check_patch(client, "/api/v1/network/settings/", {"dns_servers": "198.18.0.53"})
