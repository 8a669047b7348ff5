"""The appliance never cuts its own management off, and never names an interface it has not.

With the real worker in the lab's LB namespace, which publishes that namespace's interfaces and addresses
(network/appliance.py reads them): a farm on one of the LB's own addresses is refused on a port lbweb's UI
and API listen on (settings.LBWEB_MANAGEMENT_PORTS: 8000 and 8080 here) and with intra-connect, by every
path that writes a farm (the API, the form, both imports); an interface must exist, and a name Linux would
refuse is refused whether or not anything was published.
"""

from __future__ import annotations

import pytest

from tests.cluster.test_cluster_api import body, node  # noqa: F401 - node: a fixture
from tests.conftest import wait_for
from tests.farms.test_api import farm_data
from tests.farms.test_validation import NFTLB_FARM, api_errors, config_import_errors, form_errors, nftlb_import_errors
from tests.support.lab import backend4

OWN = "198.18.0.1"  # the LB namespace's address on cli0, the client side (tests/support/lab.py)


def published(client) -> dict:
    """The worker's reading of its namespace, once it has published it (it does when it starts)."""
    return wait_for(lambda: (r := client.get("/api/v1/network/observed/")).status_code == 200 and r.json(),
                    what="the worker's network view")  # fmt: skip


def dsr_farm(**values) -> dict:
    return farm_data(**{"name": "dsr", "mode": "dsr", "scheduler": "hash", "sched_param": "srcip", "interface": "br0",
                        **values})  # fmt: skip


@pytest.mark.dataplane
@pytest.mark.django_db(transaction=True)
def test_a_farm_on_the_appliances_own_address_may_not_take_its_management(client, worker, settings):
    assert settings.LBWEB_MANAGEMENT_PORTS == (8000, 8080)
    links = {link["name"]: link for link in published(client)["links"]}
    assert "198.18.0.1/24" in links["cli0"]["addresses"]

    cases = [({"ports": "8000"}, "ports", "TCP port 8000"), ({"ports": "7000-9000"}, "ports", "8000 and 8080"),
             ({"ports": "", "protocol": "all"}, "ports", "8000 and 8080"),
             ({"ports": "80", "intra_connect": True}, "intra_connect", "intra-connect")]  # fmt: skip
    for values, field, words in cases:
        body = farm_data(vip=OWN, **values)
        message = api_errors(client, "farms/", body)[field][0]
        assert "198.18.0.1 is one of this appliance's own addresses (cli0)" in message and words in message, message
        assert message in form_errors(**{k: v for k, v in body.items() if k != "name"}, name="web")[field]
        assert config_import_errors(client, body)[field] == message
    nftlb = {**NFTLB_FARM, "virtual-addr": OWN, "virtual-ports": "8000"}
    assert any("own addresses (cli0)" in m for m in nftlb_import_errors(client, nftlb))
    nftlb = {**NFTLB_FARM, "virtual-addr": OWN, "intra-connect": "on"}
    assert any("with intra-connect" in m for m in nftlb_import_errors(client, nftlb))
    # On the same address other ports are the farm's; UDP 8000 is not the UI's; another address may have 8000.
    for values in ({"vip": OWN, "ports": "80"}, {"vip": OWN, "ports": "8000", "protocol": "udp", "name": "dns"},
                   {"vip": "198.18.100.9", "ports": "8000", "intra_connect": True, "name": "away"}):  # fmt: skip
        response = client.post("/api/v1/farms/", farm_data(**values), format="json")
        assert response.status_code == 201, response.content


@pytest.mark.dataplane
@pytest.mark.django_db(transaction=True)
def test_interfaces_must_be_the_appliances_and_the_message_names_those_it_has(client, worker):
    published(client)
    refused = api_errors(client, "farms/", dsr_farm(oface="eth7"))["oface"][0]
    assert "This appliance has no interface 'eth7': it has " in refused, refused
    assert all(name in refused for name in ("br0", "cli0", "b1", "lo")), refused
    assert form_errors(**dsr_farm(oface="eth7"))["oface"] == [refused]
    assert config_import_errors(client, dsr_farm(oface="eth7"))["oface"] == refused
    nftlb = {**NFTLB_FARM, "mode": "dsr", "scheduler": "hash", "sched-param": "srcip", "iface": "eth7"}
    assert any("no interface 'eth7'" in m for m in nftlb_import_errors(client, nftlb))
    assert "no interface 'eth7'" in api_errors(client, "farms/", dsr_farm(interface="eth7"))["interface"][0]

    farm = client.post("/api/v1/farms/", dsr_farm(oface="cli0"), format="json")
    assert farm.status_code == 201, farm.content
    backend = {"farm": farm.json()["id"], "address": backend4("b1"), "mac": "02:00:00:00:00:11"}
    assert "no interface 'eth7'" in api_errors(client, "backends/", {**backend, "oface": "eth7"})["oface"][0]
    created = client.post("/api/v1/backends/", {**backend, "oface": "b1"}, format="json")
    assert created.status_code == 201, created.content
    # An Ethernet interface of the network settings is a device the machine has.
    assert (
        "no interface 'eth7'"
        in api_errors(client, "network/interfaces/", {"name": "eth7", "kind": "ethernet"})["name"][0]
    )


@pytest.mark.dataplane
@pytest.mark.django_db(transaction=True)
def test_an_address_added_after_the_workers_start_is_known_after_a_reconcile(client, worker, lab):
    """DHCP, keepalived's handler or an operator add addresses without lbweb's network apply: the periodic
    reconcile reads them again."""
    from lbweb.celery import app
    from network import appliance

    published(client)
    added = "198.18.100.77"
    lab.ns(lab.lb, "ip", "addr", "add", f"{added}/32", "dev", "lo")
    try:
        app.send_task("farms.tasks.reconcile", kwargs={"reason": "test"})

        def seen():
            appliance.forget()
            return added in (appliance.published() or appliance.Published(frozenset(), {}, "")).addresses

        wait_for(seen, what=f"{added} in the worker's view")
        message = api_errors(client, "farms/", farm_data(vip=added, ports="8080"))["ports"][0]
        assert f"{added} is one of this appliance's own addresses (lo)" in message, message
    finally:
        lab.ns(lab.lb, "ip", "addr", "del", f"{added}/32", "dev", "lo", check=False)


@pytest.mark.django_db
def test_an_interface_the_network_settings_make_is_one_the_appliance_has(client, redis_server):
    """A VLAN the worker has not created yet. The view is written here as the worker writes it (the test
    above has the worker's own); no worker runs, and nothing is committed, so no network apply is queued."""
    import json

    from lbweb import redis_keys
    from lbweb.redis_client import get_redis
    from network import services as network

    view = {"links": [{"name": "eth0", "addresses": ["198.18.0.1/24"]}, {"name": "lo", "addresses": []}],
            "routes": [], "read_at": "2026-12-01T12:00:00+00:00"}  # fmt: skip
    get_redis().set(redis_keys.NETWORK_OBSERVED, json.dumps(view))
    eth0 = network.interface_create(name="eth0", kind="ethernet")
    network.interface_create(name="eth0.42", kind="vlan", parent=eth0, vlan_id=42)
    farm = client.post("/api/v1/farms/", dsr_farm(interface="eth0", oface="eth0.42"), format="json")
    assert farm.status_code == 201, farm.content
    message = api_errors(client, "farms/", dsr_farm(name="other", interface="eth0", oface="eth0.43"))["oface"][0]
    assert message == (
        "This appliance has no interface 'eth0.43': it has eth0, eth0.42, lo (as the worker read them at "
        "2026-12-01 12:00:00 UTC, and those the network settings make)."
    )
    # The interface goes away: an edit of something else is not refused for it, a new name still is checked.
    from network import appliance
    from network.models import Interface

    Interface.objects.filter(name="eth0.42").delete()
    appliance.forget()
    url = f"/api/v1/farms/{farm.json()['id']}/"
    assert client.patch(url, {"description": "kept"}, format="json").status_code == 200
    refused = client.patch(url, {"oface": "eth0.44"}, format="json")
    assert refused.status_code == 400 and "no interface 'eth0.44'" in refused.json()["oface"][0], refused.content


@pytest.mark.parametrize(
    "name, words",
    [("../../etc", "is not an interface name"), ("no such/if", "is not an interface name"),
     ("eth0 eth1", "is not an interface name"), ("..", "is not an interface name"),
     ("eth\n0", "is not an interface name"), ("a" * 16, "no more than 15 characters")],
)  # fmt: skip
@pytest.mark.django_db
def test_a_name_linux_refuses_is_refused_with_nothing_published(client, name, words):
    """No worker has published anything: a valid name is accepted (the apply says what the kernel lacks), an
    invalid one is refused all the same."""
    from network import appliance

    assert appliance.published() is None
    message = api_errors(client, "farms/", dsr_farm(oface=name))["oface"][0]
    assert words in message, message
    farm = client.post("/api/v1/farms/", dsr_farm(oface="eth7"), format="json")
    assert farm.status_code == 201, farm.content
    backend = {"farm": farm.json()["id"], "address": backend4("b1"), "mac": "02:00:00:00:00:11", "oface": name}
    assert words in api_errors(client, "backends/", backend)["oface"][0]


@pytest.mark.django_db
@pytest.mark.usefixtures("node")
def test_a_clusters_management_address_is_the_appliances_own_without_any_worker(client):
    """The database knows it: a farm there on the UI's port is refused before any worker has published."""
    response = client.put("/api/v1/cluster/", body(), format="json")
    assert response.status_code == 200, response.content
    management = body()["management_address"].split("/")[0]
    message = api_errors(client, "farms/", farm_data(vip=management, ports="8080"))["ports"][0]
    assert "the cluster's management address" in message, message
