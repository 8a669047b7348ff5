"""System > Network: the database through the worker's pyroute2 apply into a network namespace the test makes
(veth pairs, and VLAN and bond devices where the kernel has them), the systemd files, the management
address guard, the API and the audit.

Only 198.18.0.0/15 and 2001:2::/48, only inside the test's namespace, removed at the end.
"""

from __future__ import annotations

import configparser
import json
import os

import pytest
from django.core.exceptions import ValidationError
from rest_framework.test import APIClient

from farms.models import AuditEvent
from network import services
from network.models import Address, Interface, NetworkSettings, Route
from network.services import Management
from tests.conftest import OUTPUT, new_token, wait_for
from tests.support.lab import run_in_netns, sh

NS = f"lbnet{os.getpid() % 100000}"


def ip(*args: str) -> list | dict:
    out = sh("ip", "-j", "-n", NS, *args).stdout
    return json.loads(out) if out.strip() else []


def addresses(dev: str) -> set[str]:
    links = ip("addr", "show", "dev", dev)
    return {f"{a['local']}/{a['prefixlen']}" for link in links for a in link["addr_info"] if a["scope"] == "global"}


def routes(family: str = "-4") -> set[tuple]:
    return {(r["dst"], r.get("gateway"), r.get("dev"), r.get("metric", 0)) for r in ip(family, "route", "show")}


def link(dev: str) -> dict | None:
    found = (
        ip("link", "show", "dev", dev)
        if sh("ip", "-n", NS, "link", "show", "dev", dev, check=False).returncode == 0
        else []
    )
    return found[0] if found else None


@pytest.fixture
def netns():
    """A namespace with two veth pairs (eth1/peer1, eth2/peer2) and two more for a bond (bm0, bm1)."""
    sh("ip", "netns", "del", NS, check=False)
    sh("ip", "netns", "add", NS)
    try:
        for a, b in (("eth1", "peer1"), ("eth2", "peer2"), ("bm0", "bp0"), ("bm1", "bp1")):
            sh("ip", "-n", NS, "link", "add", a, "type", "veth", "peer", "name", b)
            sh("ip", "-n", NS, "link", "set", b, "up")
        yield NS
    finally:
        sh("ip", "netns", "del", NS, check=False)


def kernel_has(kind: str) -> bool:
    """Can this kernel make ``kind`` devices (vlan: 8021q, bond: bonding)? Tried in a namespace of its own."""
    probe = f"{NS}p"
    sh("ip", "netns", "add", probe)
    try:
        sh("ip", "-n", probe, "link", "add", "d0", "type", "veth", "peer", "name", "d1")
        args = ("link", "d0", "type", "vlan", "id", "2") if kind == "vlan" else ("type", "bond")
        return sh("ip", "-n", probe, "link", "add", "x0", *args, check=False).returncode == 0
    finally:
        sh("ip", "netns", "del", probe, check=False)


@pytest.fixture
def network_dir(tmp_path, settings):
    settings.LBWEB_NETWORK_DIR = str(tmp_path / "etc")
    return tmp_path / "etc"


def apply_in_netns():
    from dataplane.network import applier as worker

    return run_in_netns(NS, lambda: worker.apply_network())


def ini(path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str
    parser.read_string(path.read_text())
    return parser


@pytest.mark.django_db(transaction=True)
def test_veth_addresses_routes_mtu_and_files_converge(netns, network_dir, redis_server, settings, admin_user):
    settings.REDIS_URL = redis_server.url
    sh("ip", "-n", NS, "addr", "add", "198.18.61.1/24", "dev", "eth1")  # not lbweb's: must stay
    eth1 = services.interface_create(name="eth1", kind="ethernet", mtu=1400, actor=admin_user)
    services.address_create(interface=eth1, address="198.18.60.1/24", actor=admin_user)
    services.address_create(interface=eth1, address="2001:2:0:60::1/64", actor=admin_user)
    services.route_create(destination="198.18.64.0/18", gateway="198.18.60.254", metric=5, actor=admin_user)
    gateway = services.route_create(destination="default", gateway="198.18.60.254", metric=100, actor=admin_user)
    services.route_create(destination="default", gateway="2001:2:0:60::fe", actor=admin_user)
    services.settings_update(
        settings=NetworkSettings.load(), dns_servers="198.18.0.53, 2001:2::53", search_domains="lab.example",
        ntp_servers="ntp.lab.example", actor=admin_user,
    )  # fmt: skip
    assert gateway.destination == "0.0.0.0/0"

    report = apply_in_netns()
    assert report.ok, report.errors
    assert addresses("eth1") == {"198.18.60.1/24", "198.18.61.1/24", "2001:2:0:60::1/64"}
    state = link("eth1")
    assert state["mtu"] == 1400 and "UP" in state["flags"]
    assert ("198.18.64.0/18", "198.18.60.254", "eth1", 5) in routes()
    assert ("default", "198.18.60.254", "eth1", 100) in routes()
    assert any(r[0] == "default" and r[1] == "2001:2:0:60::fe" for r in routes("-6"))
    saved = NetworkSettings.load()
    assert saved.status == "applied" and saved.applied_generation == saved.generation

    files = sorted(str(p.relative_to(network_dir)) for p in network_dir.rglob("*") if p.is_file())
    assert files == [
        "systemd/network/50-lbweb-eth1.network",
        "systemd/resolved.conf.d/50-lbweb.conf",
        "systemd/timesyncd.conf.d/50-lbweb.conf",
    ]
    text = (network_dir / "systemd/network/50-lbweb-eth1.network").read_text()
    assert "Address=198.18.60.1/24" in text and "Address=2001:2:0:60::1/64" in text and "MTUBytes=1400" in text
    assert "[Route]\nDestination=0.0.0.0/0\nGateway=198.18.60.254\nMetric=100" in text
    assert ini(network_dir / "systemd/network/50-lbweb-eth1.network")["Match"]["Name"] == "eth1"
    assert ini(network_dir / "systemd/resolved.conf.d/50-lbweb.conf")["Resolve"]["DNS"] == "198.18.0.53 2001:2::53"
    assert ini(network_dir / "systemd/timesyncd.conf.d/50-lbweb.conf")["Time"]["NTP"] == "ntp.lab.example"

    from network.selectors import observed

    seen = {link["name"]: link for link in observed()["links"]}
    assert "198.18.60.1/24" in seen["eth1"]["addresses"] and seen["eth1"]["mtu"] == 1400

    # Take some away: lbweb removes what it added, and only that. The IPv6 default route stays declared
    # while its interface goes down: the kernel refuses it, and says so by name; the rest is applied.
    services.address_delete(address=Address.objects.get(address="198.18.60.1/24"), actor=admin_user)
    services.route_delete(route=Route.objects.get(destination="198.18.64.0/18"), actor=admin_user)
    services.route_delete(route=gateway, actor=admin_user)
    services.interface_update(interface=eth1, enabled=False, actor=admin_user)
    services.settings_update(settings=NetworkSettings.load(), dns_servers="", search_domains="", ntp_servers="")
    report = apply_in_netns()
    assert report.errors == ["route default via 2001:2:0:60::fe: No route to host (errno 113)"]
    assert NetworkSettings.load().status == "failed" and "2001:2:0:60::fe" in NetworkSettings.load().apply_error
    assert addresses("eth1") == {"198.18.61.1/24", "2001:2:0:60::1/64"}
    assert not any(r[0] in ("198.18.64.0/18", "default") for r in routes())
    assert "UP" not in link("eth1")["flags"]
    assert not (network_dir / "systemd/resolved.conf.d/50-lbweb.conf").exists()
    assert "ActivationPolicy=down" in (network_dir / "systemd/network/50-lbweb-eth1.network").read_text()

    # Stop managing it: lbweb's last address goes, the foreign one stays, its file goes.
    services.route_delete(route=Route.objects.get(), actor=admin_user)
    services.interface_delete(interface=Interface.objects.get(name="eth1"), actor=admin_user)
    assert apply_in_netns().ok
    assert addresses("eth1") == {"198.18.61.1/24"}
    assert not (network_dir / "systemd/network/50-lbweb-eth1.network").exists()
    kinds = [(e.action, e.object_type) for e in AuditEvent.objects.order_by("id")]
    assert (
        ("create", "interface") in kinds and ("delete", "address") in kinds and ("update", "networksettings") in kinds
    )
    assert {e.actor_name for e in AuditEvent.objects.filter(object_type="interface")} == {"admin"}


@pytest.mark.django_db(transaction=True)
def test_vlan_and_bond_devices_are_created_converged_and_removed(netns, network_dir, admin_user):
    if not (kernel_has("vlan") and kernel_has("bond")):
        pytest.skip("this kernel has no VLAN (8021q) or bonding support: see the next test")
    bond = services.interface_create(name="bond0", kind="bond", bond_mode="active-backup", actor=admin_user)
    for name in ("bm0", "bm1"):
        services.interface_create(name=name, kind="ethernet", bond=bond, actor=admin_user)
    eth2 = services.interface_create(name="eth2", kind="ethernet", actor=admin_user)
    vlan = services.interface_create(name="eth2.100", kind="vlan", parent=eth2, vlan_id=100, actor=admin_user)
    services.address_create(interface=vlan, address="198.18.62.1/24", actor=admin_user)
    services.address_create(interface=bond, address="198.18.63.1/24", actor=admin_user)
    report = apply_in_netns()
    assert report.ok, report.errors
    assert link("eth2.100")["linkinfo"]["info_kind"] == "vlan" and addresses("eth2.100") == {"198.18.62.1/24"}
    assert link("bm0")["master"] == "bond0" and link("bm1")["master"] == "bond0"
    assert addresses("bond0") == {"198.18.63.1/24"}
    assert "Kind=vlan" in (network_dir / "systemd/network/50-lbweb-eth2.100.netdev").read_text()
    assert "VLAN=eth2.100" in (network_dir / "systemd/network/50-lbweb-eth2.network").read_text()
    assert "Bond=bond0" in (network_dir / "systemd/network/50-lbweb-bm0.network").read_text()
    services.interface_delete(interface=Interface.objects.get(name="eth2.100"), actor=admin_user)
    services.interface_update(interface=Interface.objects.get(name="bm1"), bond=None, actor=admin_user)
    assert apply_in_netns().ok
    assert link("eth2.100") is None and link("bm1").get("master") is None and link("bm0")["master"] == "bond0"


@pytest.mark.django_db(transaction=True)
def test_a_kernel_without_vlan_or_bond_support_is_reported_by_name(netns, network_dir, admin_user):
    if kernel_has("vlan") and kernel_has("bond"):
        pytest.skip("this kernel has VLANs and bonds: the previous test applies them")
    bond = services.interface_create(name="bond0", kind="bond", bond_mode="802.3ad", actor=admin_user)
    services.interface_create(name="bm0", kind="ethernet", bond=bond, actor=admin_user)
    eth2 = services.interface_create(name="eth2", kind="ethernet", actor=admin_user)
    vlan = services.interface_create(name="eth2.100", kind="vlan", parent=eth2, vlan_id=100, actor=admin_user)
    services.address_create(interface=vlan, address="198.18.62.1/24", actor=admin_user)
    services.address_create(interface=eth2, address="198.18.65.1/24", actor=admin_user)
    report = apply_in_netns()
    errors = "\n".join(report.errors)
    if not kernel_has("vlan"):
        assert "create vlan eth2.100: this kernel cannot make VLAN devices (CONFIG_VLAN_8021Q" in errors
    if not kernel_has("bond"):
        assert "create bond bond0: this kernel cannot make bonds (CONFIG_BONDING" in errors
    assert addresses("eth2") == {"198.18.65.1/24"}  # the rest was applied
    state = NetworkSettings.load()
    assert state.status == "failed" and "eth2.100" in state.apply_error
    # the files say what systemd-networkd is to make at boot all the same
    netdev = ini(network_dir / "systemd/network/50-lbweb-eth2.100.netdev")
    assert netdev["NetDev"]["Kind"] == "vlan" and netdev["VLAN"]["Id"] == "100"
    assert ini(network_dir / "systemd/network/50-lbweb-bond0.netdev")["Bond"]["Mode"] == "802.3ad"
    assert "Bond=bond0" in (network_dir / "systemd/network/50-lbweb-bm0.network").read_text()


@pytest.mark.django_db
def test_the_management_address_is_never_cut_without_confirmation(admin_user):
    eth1 = services.interface_create(name="eth1", kind="ethernet")
    eth2 = services.interface_create(name="eth2", kind="ethernet")
    vlan = services.interface_create(name="eth1.7", kind="vlan", parent=eth1, vlan_id=7)
    here = services.address_create(interface=vlan, address="198.18.60.1/24")
    services.address_create(interface=eth2, address="198.18.66.1/24")
    near = Management(address="198.18.60.1", client="198.18.60.50")
    for attempt in (
        lambda **kw: services.address_delete(address=here, management=near, **kw),
        lambda **kw: services.interface_update(interface=vlan, enabled=False, management=near, **kw),
        lambda **kw: services.interface_update(interface=eth1, enabled=False, management=near, **kw),  # its parent
    ):
        with pytest.raises(ValidationError) as refused:
            attempt()
        assert "198.18.60.1" in refused.value.message_dict["confirm"][0]
    assert Address.objects.filter(pk=here.pk).exists() and Interface.objects.get(pk=eth1.pk).enabled
    # what does not carry it is free
    services.interface_update(interface=eth2, enabled=False, management=near)
    # a client behind a gateway: the route it is reached by is guarded, others are not
    far = Management(address="198.18.60.1", client="198.18.200.9")
    via = services.route_create(destination="198.18.200.0/24", gateway="198.18.60.254")
    other = services.route_create(destination="198.18.210.0/24", gateway="198.18.60.254")
    services.route_create(destination="default", gateway="198.18.60.254")
    with pytest.raises(ValidationError):
        services.route_delete(route=via, management=far)
    services.route_delete(route=other, management=far)
    # confirmed: done, and audited like any change
    services.address_delete(address=here, management=near, confirm=True, actor=admin_user)
    assert not Address.objects.filter(pk=here.pk).exists()
    assert AuditEvent.objects.filter(action="delete", object_type="address", actor_name="admin").exists()


@pytest.mark.django_db
def test_models_refuse_what_the_kernel_would(admin_user):
    eth1 = services.interface_create(name="eth1", kind="ethernet")
    cases = [
        (lambda: services.interface_create(name="x" * 16, kind="ethernet"), "name"),
        (lambda: services.interface_create(name="v1", kind="vlan", vlan_id=5), "parent"),
        (lambda: services.interface_create(name="v2", kind="vlan", parent=eth1, vlan_id=5000), "vlan_id"),
        (lambda: services.interface_create(name="b1", kind="bond"), "bond_mode"),
        (lambda: services.address_create(interface=eth1, address="198.18.60.1"), "address"),
        (lambda: services.address_create(interface=eth1, address="fe80::1/64"), "address"),
        (lambda: services.route_create(destination="198.18.64.0/18"), "gateway"),
        (lambda: services.route_create(destination="198.18.64.1/18", gateway="198.18.60.1"), "destination"),
        (
            lambda: (
                services.route_create(destination="default", gateway="2001:2::1", interface=None, metric=0)
                and services.route_create(destination="::/0", gateway="2001:2::2")
            ),
            "destination",
        ),  # fmt: skip
        (lambda: services.route_create(destination="198.18.64.0/18", gateway="2001:2::1"), "gateway"),
        (lambda: services.settings_update(settings=NetworkSettings.load(), dns_servers="dns.example"), "dns_servers"),
    ]
    for attempt, field in cases:
        with pytest.raises(ValidationError) as refused:
            attempt()
        assert field in refused.value.message_dict, (field, refused.value.message_dict)
    services.address_create(interface=eth1, address="198.18.60.1/24")
    with pytest.raises(ValidationError) as twice:
        services.address_create(
            interface=services.interface_create(name="eth2", kind="ethernet"), address="198.18.60.1/16"
        )
    assert "on eth1 already" in twice.value.message_dict["address"][0]


@pytest.mark.django_db
def test_api_writes_are_admin_only_audited_and_confirmed(admin_user, role_users):
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {new_token(admin_user)}")
    made = api.post("/api/v1/network/interfaces/", {"name": "eth1", "kind": "ethernet", "mtu": 9000}, format="json")
    assert made.status_code == 201, made.content
    address = {"interface": "eth1", "address": "198.18.60.1/24"}
    assert api.post("/api/v1/network/addresses/", address, format="json").status_code == 201
    bad = api.post("/api/v1/network/routes/", {"destination": "198.18.64.0/18"}, format="json")
    assert bad.status_code == 400 and "gateway" in bad.json()
    route = {"destination": "default", "gateway": "198.18.60.254"}
    assert api.post("/api/v1/network/routes/", route, format="json").status_code == 201
    # the request comes in on 198.18.60.1: taking eth1 down needs ?confirm=1
    url = f"/api/v1/network/interfaces/{made.json()['id']}/"
    refused = api.patch(url, {"enabled": False}, format="json", HTTP_HOST="198.18.60.1:8443")
    assert refused.status_code == 400 and "198.18.60.1" in refused.json()["confirm"][0]
    confirmed = api.patch(url + "?confirm=1", {"enabled": False}, format="json", HTTP_HOST="198.18.60.1:8443")
    assert confirmed.status_code == 200
    body = api.patch("/api/v1/network/settings/", {"ntp_servers": "ntp.lab.example"}, format="json").json()
    assert body["ntp_servers"] == "ntp.lab.example" and body["status"] == "pending"
    assert api.get("/api/v1/network/interfaces/").json()["results"][0]["addresses"] == ["198.18.60.1/24"]
    operator = APIClient()
    operator.credentials(HTTP_AUTHORIZATION=f"Token {new_token(role_users['operator'])}")
    assert operator.get("/api/v1/network/interfaces/").status_code == 200
    assert operator.post("/api/v1/network/interfaces/", {"name": "eth2"}, format="json").status_code == 403
    actions = {(e.action, e.object_type, e.actor_name) for e in AuditEvent.objects.all()}
    assert ("update", "interface", "admin") in actions and ("create", "route", "admin") in actions


@pytest.mark.dataplane
@pytest.mark.django_db(transaction=True)
def test_the_real_worker_applies_what_the_api_saved(netns, network_dir, worker_env, api, request):
    """API -> database -> Celery -> the worker (in the test's namespace) -> pyroute2 -> the kernel."""
    from tests.support.stack import Worker

    env = dict(worker_env, LBWEB_NETWORK_DIR=str(network_dir))
    proc = Worker(NS, env, OUTPUT / "logs" / f"worker-{request.node.name}.log").start()
    try:
        api.post("network/interfaces/", {"name": "eth2", "kind": "ethernet"})
        api.post("network/addresses/", {"interface": "eth2", "address": "198.18.67.1/24"})
        api.post("network/routes/", {"destination": "198.18.128.0/17", "gateway": "198.18.67.254"})
        wait_for(lambda: api.get("network/settings/")["status"] == "applied", timeout=30, what="the network applied")
        assert addresses("eth2") == {"198.18.67.1/24"}
        assert ("198.18.128.0/17", "198.18.67.254", "eth2", 0) in routes()
        assert (network_dir / "systemd/network/50-lbweb-eth2.network").exists()
        seen = wait_for(lambda: api.get("network/observed/", expect=None), what="the kernel's view")
        assert any(link["name"] == "eth2" and "198.18.67.1/24" in link["addresses"] for link in seen["links"])
    finally:
        proc.stop()


@pytest.mark.django_db
def test_the_page_adds_confirms_and_reads(admin_user, role_users):
    from django.test import Client

    page = Client(HTTP_HOST="198.18.60.1")
    page.force_login(admin_user)
    assert "lbweb manages no interface yet" in page.get("/system/network/").content.decode()
    added = page.post(
        "/system/network/", {"action": "interface_add", "if-name": "eth1", "if-kind": "ethernet", "if-enabled": "on"}
    )
    assert added.status_code == 302
    eth1 = Interface.objects.get(name="eth1")
    page.post(
        "/system/network/", {"action": "address_add", "addr-interface": eth1.pk, "addr-address": "198.18.60.1/24"}
    )
    refused = page.post(
        "/system/network/", {"action": "route_add", "route-destination": "nowhere", "route-metric": "0"}
    )
    assert refused.status_code == 400 and "or &#x27;default&#x27;" in refused.content.decode()
    shown = page.get("/system/network/").content.decode()
    assert 'id="management-address">198.18.60.1<' in shown and "(you are here)" in shown and "pending" in shown
    # taking eth1 down would cut this page's address: the same change comes back to be confirmed
    asked = page.post("/system/network/", {"action": "interface_toggle", "pk": eth1.pk})
    body = asked.content.decode()
    assert asked.status_code == 409 and 'id="confirm-cut"' in body and 'name="confirm" value="1"' in body
    assert Interface.objects.get(pk=eth1.pk).enabled
    done = page.post("/system/network/", {"action": "interface_toggle", "pk": eth1.pk, "confirm": "1"})
    assert done.status_code == 302 and not Interface.objects.get(pk=eth1.pk).enabled
    viewer = Client()
    viewer.force_login(role_users["viewer"])
    read = viewer.get("/system/network/").content.decode()
    assert "eth1" in read and "Add an interface" not in read
    assert viewer.post("/system/network/", {"action": "interface_delete", "pk": eth1.pk}).status_code == 403


@pytest.mark.django_db
def test_the_interface_page_edits_and_asks_before_cutting(admin_user):
    from django.test import Client

    eth1 = services.interface_create(name="eth1", kind="ethernet")
    services.address_create(interface=eth1, address="198.18.60.1/24")
    page = Client(HTTP_HOST="198.18.60.1:8443")
    page.force_login(admin_user)
    url = f"/system/network/interfaces/{eth1.pk}/"
    assert "autofocus" in page.get(url).content.decode()
    form = {"name": "eth1", "kind": "ethernet", "enabled": "on", "mtu": "9000"}
    assert page.post(url, form).status_code == 302 and Interface.objects.get(pk=eth1.pk).mtu == 9000
    refused = page.post(url, {**form, "enabled": ""})
    assert refused.status_code == 409 and "198.18.60.1" in refused.content.decode()
    assert Interface.objects.get(pk=eth1.pk).enabled
    bad = page.post(url, {**form, "mtu": "20"})
    assert bad.status_code == 400 and "greater than or equal to 68" in bad.content.decode()
    assert page.post(url, {**form, "enabled": "", "confirm": "1"}).status_code == 302
    assert not Interface.objects.get(pk=eth1.pk).enabled
