"""Combinations DSR and stateless DNAT cannot honour are refused by the API with a 400 naming the field."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from tests.conftest import new_token

pytestmark = pytest.mark.django_db

DSR = {"vip": "198.18.102.1", "protocol": "tcp", "ports": "80", "mode": "dsr", "interface": "eth0"}
STATELESS = {"vip": "198.18.100.90", "protocol": "udp", "ports": "514", "mode": "stlsdnat", "scheduler": "rr"}


@pytest.fixture
def client(admin_user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {new_token(admin_user)}")
    return client


def post(client, path, data):
    return client.post(f"/api/v1/{path}", data, format="json")


def refused_on(response, field: str) -> str:
    assert response.status_code == 400, response.content
    errors = response.json()
    assert field in errors, errors
    return " ".join(errors[field])


def test_dsr_with_a_snat_source_is_refused_on_source_addr(client):
    response = post(client, "farms/", {**DSR, "name": "d", "scheduler": "hash", "sched_param": "srcip",
                                       "source_addr": "198.18.2.1"})  # fmt: skip
    assert "SNAT" in refused_on(response, "source_addr")


def test_dsr_tcp_with_round_robin_is_refused_on_scheduler(client):
    message = refused_on(post(client, "farms/", {**DSR, "name": "d", "scheduler": "rr"}), "scheduler")
    assert "hash" in message
    # a farm for all protocols carries TCP too
    response = post(client, "farms/", {**DSR, "name": "a", "protocol": "all", "ports": "", "scheduler": "weight"})
    assert "TCP" in refused_on(response, "scheduler")
    udp = post(client, "farms/", {**DSR, "name": "u", "protocol": "udp", "ports": "514", "scheduler": "rr"})
    assert udp.status_code == 201, udp.content  # datagrams need no flow state


def test_dsr_backend_with_a_port_is_refused_on_port(client):
    farm = post(client, "farms/", {**DSR, "name": "d", "scheduler": "hash", "sched_param": "srcip srcport"})
    assert farm.status_code == 201, farm.content
    response = post(client, "backends/", {"farm": farm.json()["id"], "address": "198.18.2.11", "port": 8080})
    assert "virtual port" in refused_on(response, "port")


def test_stateless_dnat_of_tcp_needs_a_hash_and_is_refused_on_scheduler_with_round_robin(client):
    """Stateless TCP is rewritten both ways as in nftlb (issue 14), but only a hash keeps a connection's
    packets on one backend: round robin is refused on the scheduler, a hash is accepted."""
    message = refused_on(post(client, "farms/", {**STATELESS, "name": "s", "protocol": "tcp"}), "scheduler")
    assert "hash" in message
    hashed = {**STATELESS, "name": "s", "protocol": "tcp", "scheduler": "hash", "sched_param": "srcip srcport"}
    assert post(client, "farms/", hashed).status_code == 201


def test_a_stateless_farms_backend_address_and_port_cannot_serve_another_farm(client):
    """Replies are recognised by backend address and source port alone: sharing them mixes two farms' replies."""
    stateless = post(client, "farms/", {**STATELESS, "name": "s"}).json()
    assert post(client, "backends/", {"farm": stateless["id"], "address": "198.18.1.11"}).status_code == 201
    other = post(client, "farms/", {**STATELESS, "name": "d", "vip": "198.18.100.91", "mode": "dnat"}).json()
    message = refused_on(post(client, "backends/", {"farm": other["id"], "address": "198.18.1.11"}), "address")
    assert "'s'" in message and "514" in message
    response = post(client, "backends/", {"farm": other["id"], "address": "198.18.1.11", "port": 5514})
    assert response.status_code == 201, response.content  # another port: no clash
    # the clash is also caught when the other farm changes: its ports now reach b1:514 again
    tcp = post(client, "farms/", {**STATELESS, "name": "t", "vip": "198.18.100.92", "mode": "dnat",
                                  "protocol": "tcp", "ports": "514"}).json()  # fmt: skip
    assert post(client, "backends/", {"farm": tcp["id"], "address": "198.18.1.11"}).status_code == 201
    response = client.patch(f"/api/v1/farms/{tcp['id']}/", {"protocol": "udp"}, format="json")
    assert "'s'" in refused_on(response, "ports")
