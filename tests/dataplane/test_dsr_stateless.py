"""Direct server return and stateless DNAT, proven with real packets.

DSR runs in the one-segment lab of :mod:`tests.support.lab_l2` (client, LB and backends on one bridge);
stateless DNAT runs in the routed lab of :mod:`tests.support.lab`. Farms are created through the REST API
and applied by the real worker in the LB namespace.
"""

from __future__ import annotations

import collections
import json
import os
import re
import subprocess
import time

import pytest

from tests.support import lab as routed
from tests.support import lab_l2 as l2
from tests.support.stack import ROOT, VENV_BIN, Worker

pytestmark = [pytest.mark.dataplane, pytest.mark.django_db(transaction=True)]

THREE = ("b1", "b2", "b3")
UDP_PORT, OTHER_PORT = l2.UDP_PORTS  # a backend may listen on OTHER_PORT while the VIP port is UDP_PORT
OUTPUT = ROOT / "test-output"


# -- fixtures -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def l2lab():
    if os.geteuid() != 0:
        pytest.fail("the data-plane tests build network namespaces: run the suite as root")
    lab = l2.L2Lab().build()
    yield lab
    lab.destroy()


def _drop_lbweb_tables(lab) -> None:
    tables = json.loads(lab.ns(lab.lb, "nft", "-j", "list", "tables").stdout)["nftables"]
    for item in tables:
        table = item.get("table")
        if table and table["name"].startswith("lbweb"):
            lab.ns(lab.lb, "nft", "delete", "table", table["family"], table["name"], check=False)


@pytest.fixture
def l2worker(l2lab, worker_env, request):
    """The real worker in the L2 lab's LB namespace, starting from an LB without lbweb's tables."""
    _drop_lbweb_tables(l2lab)
    proc = Worker(l2lab.lb, worker_env, OUTPUT / "logs" / f"worker-{request.node.name}.log").start()
    yield proc
    proc.stop()
    _drop_lbweb_tables(l2lab)


@pytest.fixture(scope="module")
def routed_udp(lab):
    """UDP echo servers on the routed lab's backends, once its IPv6 link-local addresses are usable."""
    deadline = time.monotonic() + 10
    while any(lab.ns(ns, "ip", "-6", "addr", "show", "tentative").stdout.strip() for ns in lab.namespaces):
        assert time.monotonic() < deadline, "IPv6 duplicate address detection never finished in the lab"
        time.sleep(0.05)
    procs = l2.start_udp_servers(lab.backends)
    yield lab
    l2.stop_processes(procs)


# -- helpers --------------------------------------------------------------------------------


def dsr_farm(api, name, vip, backends, protocol="tcp", ports="80", **fields):
    address = l2.backend6 if ":" in vip else l2.backend4
    return api.farm(
        name=name,
        vip=vip,
        protocol=protocol,
        ports=ports,
        mode="dsr",
        interface=l2.INTERFACE,
        backends=[{"address": address(b) if b in l2.BACKENDS else b} for b in backends],
        **fields,
    )


def lb_counter(lab, table, name) -> int:
    listing = json.loads(lab.ns(lab.lb, "nft", "-j", "list", "counter", "netdev", table, name).stdout)
    return next(i["counter"]["packets"] for i in listing["nftables"] if "counter" in i)


def kernel_check(lab, worker) -> tuple[bool, str]:
    """``manage.py kernel --check`` in the LB namespace, against the worker's database."""
    cmd = ["ip", "netns", "exec", lab.lb, str(VENV_BIN / "python"), "manage.py", "kernel", "--check"]
    result = subprocess.run(cmd, cwd=ROOT, env=worker.env, capture_output=True, text=True)
    return result.returncode == 0, result.stdout + result.stderr


def conntrack_lines(lab, family: int) -> list[str]:
    result = lab.ns(lab.lb, "conntrack", "-L", "-f", f"ipv{family}", "-p", "udp", check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


# -- direct server return -------------------------------------------------------------------


@pytest.mark.parametrize("family", [4, 6])
def test_dsr_tcp_hashes_each_flow_to_one_backend_which_answers_the_client_directly(api, l2worker, l2lab, family):
    vip, client = (l2.vip4(1), l2.CLIENT4) if family == 4 else (l2.vip6(1), l2.CLIENT6)
    farm = dsr_farm(api, f"dsr-tcp{family}", vip, THREE, scheduler="hash", sched_param="srcip srcport")
    api.wait_applied(farm["id"])
    watch = l2.ClientWatch(l2lab, vip)
    try:
        answers = l2lab.http_get(vip, 80, count=60)
        spread = collections.Counter(a["backend"] for a in answers)
        assert set(spread) == set(THREE) and min(spread.values()) >= 5, spread  # 20 each expected
        assert {a["client"] for a in answers} == {client}  # the backends see the real client
        for _ in range(4):  # a flow sticks to its backend: every request of a keep-alive connection
            kept = routed.KeepAlive(l2lab, vip)
            try:
                assert len({kept.get()["backend"] for _ in range(5)}) == 1
            finally:
                kept.close()
        seen = watch.counters()
    finally:
        watch.remove()
    # Every answer came straight from a backend's MAC; none from the LB's ...
    assert seen["from_lb"] == 0 and seen["from_backends"] > 0, seen
    # ... and the LB's farm counter counted exactly what the client sent to the VIP: one direction only.
    assert lb_counter(l2lab, f"lbweb-dsr-{farm['name']}", f"farm-{farm['name']}") == seen["to_vip"] > 0
    # The LB's IP stack never saw these flows.
    result = l2lab.ns(l2lab.lb, "conntrack", "-L", "-f", f"ipv{family}", check=False)
    assert result.returncode == 0 and vip not in result.stdout and client not in result.stdout, result.stdout


def test_dsr_udp_round_robin_spreads_datagrams_whole_or_fragmented_and_answers_come_from_the_vip(api, l2worker, l2lab):
    farms = {
        (family, vip, client): dsr_farm(
            api, f"dsr-udp{family}", vip, THREE, protocol="udp", ports=str(UDP_PORT), scheduler="rr"
        )
        for family, vip, client in ((4, l2.vip4(2), l2.CLIENT4), (6, l2.vip6(2), l2.CLIENT6))
    }
    for farm in farms.values():
        api.wait_applied(farm["id"])
    for family, vip, client in farms:
        watch = l2.ClientWatch(l2lab, vip)
        try:
            answers = l2.udp_ask(l2lab.client, vip, UDP_PORT, count=30)
            seen = watch.counters()
        finally:
            watch.remove()
        assert collections.Counter(a["backend"] for a, _ in answers) == {b: 10 for b in THREE}, family
        assert {source for _, source in answers} == {(vip, UDP_PORT)}
        assert {(a["to"], a["client"]) for a, _ in answers} == {(vip, client)}
        assert seen == {"to_vip": 30, "from_lb": 0, "from_backends": 30}, seen
        # Beyond the MTU a datagram leaves in fragments; only the first carries the port. Every
        # fragment must reach the same backend, which reassembles and answers the whole datagram.
        big = l2.udp_ask(l2lab.client, vip, UDP_PORT, count=12, size=3000)
        assert {(a["size"], source) for a, source in big} == {(3000, (vip, UDP_PORT))}, family
        assert len({a["backend"] for a, _ in big}) >= 2, big  # still spread: 3 x (1/3)^12 to fail by chance
    ok, report = kernel_check(l2lab, l2worker)
    assert ok, report  # the worker reads DSR tables back and finds what the database says
    # A change replaces the farm's table in one transaction: a disabled backend gets nothing more.
    farm = farms[(4, l2.vip4(2), l2.CLIENT4)]
    b3 = next(b["id"] for b in farm["backends"] if b["address"] == l2.backend4("b3"))
    api.patch(f"backends/{b3}/", {"state": "disabled"})
    api.wait_applied(farm["id"])
    answers = l2.udp_ask(l2lab.client, l2.vip4(2), UDP_PORT, count=10)
    assert collections.Counter(a["backend"] for a, _ in answers) == {"b1": 5, "b2": 5}


def test_backends_hold_the_vip_but_never_answer_arp_or_nd_for_it(l2lab):
    """Without arp_ignore (IPv4) a backend would claim the VIP on the segment and steal the LB's traffic."""
    for vip in (l2.vip4(l2.VIP_COUNT), l2.vip6(l2.VIP_COUNT)):
        family = "-6" if ":" in vip else "-4"
        l2lab.ns(l2lab.client, "ip", family, "route", "add", vip, "dev", l2.INTERFACE)  # ask the segment directly
        try:
            assert l2lab.neighbour_state(l2lab.client, vip) == "FAILED"
        finally:
            l2lab.ns(l2lab.client, "ip", family, "route", "del", vip, "dev", l2.INTERFACE)
    assert l2lab.neighbour_state(l2lab.client, l2.backend4("b1")) == "REACHABLE"  # the probe does see answers
    for name, ns in l2lab.backends.items():
        lo = l2lab.ns(ns, "ip", "addr", "show", "dev", "lo").stdout
        assert f"{l2.vip4(1)}/32" in lo and f"{l2.vip6(1)}/128" in lo, name


def test_dsr_backend_without_a_mac_fails_its_farm_only(api, l2worker, l2lab):
    ghost = dsr_farm(api, "dsr-ghost", l2.vip4(3), ["198.18.2.99"], protocol="udp", ports=str(UDP_PORT))
    real = dsr_farm(api, "dsr-real", l2.vip4(4), ["b1"], scheduler="hash", sched_param="srcip")
    deadline = time.monotonic() + 30
    while (status := api.get(f"farms/{ghost['id']}/")["apply_status"])["status"] != "failed":
        assert time.monotonic() < deadline, status
        time.sleep(0.1)
    assert "198.18.2.99" in status["error"] and l2.INTERFACE in status["error"], status
    api.wait_applied(real["id"])
    assert l2lab.http_get(l2.vip4(4), 80)[0]["backend"] == "b1"
    tables = l2lab.ns(l2lab.lb, "nft", "list", "tables").stdout
    assert "lbweb-dsr-dsr-real" in tables and "lbweb-dsr-dsr-ghost" not in tables


# -- stateless DNAT -------------------------------------------------------------------------


@pytest.mark.parametrize("family", [4, 6])
def test_stateless_dnat_udp_round_robin_answers_from_the_vip_without_conntrack(api, worker, routed_udp, family):
    lab = routed_udp
    vip, client, address = (
        (routed.vip4(90), routed.CLIENT4, routed.backend4)
        if family == 4
        else (routed.vip6(90), routed.CLIENT6, routed.backend6)
    )
    farm = api.farm(
        name=f"stateless{family}",
        vip=vip,
        protocol="udp",
        ports=str(UDP_PORT),
        mode="stlsdnat",
        scheduler="rr",
        backends=[
            {"address": address("b1")},
            {"address": address("b2")},
            {"address": address("b3"), "port": OTHER_PORT},
        ],
    )
    api.wait_applied(farm["id"])
    answers = l2.udp_ask(lab.client, vip, UDP_PORT, count=30)
    assert collections.Counter(a["backend"] for a, _ in answers) == {b: 10 for b in THREE}
    assert {source for _, source in answers} == {(vip, UDP_PORT)}  # every answer FROM the VIP and its port
    assert {(a["backend"], a["port"]) for a, _ in answers} == {("b1", UDP_PORT), ("b2", UDP_PORT), ("b3", OTHER_PORT)}
    assert {a["client"] for a, _ in answers} == {client}
    big = l2.udp_ask(lab.client, vip, UDP_PORT, count=3, size=3000)  # fragments, reassembled before the rewrite
    assert {(a["size"], source) for a, source in big} == {(3000, (vip, UDP_PORT))}
    farm_ports = re.compile(rf"port=({UDP_PORT}|{OTHER_PORT})\b")
    ours = [line for line in conntrack_lines(lab, family) if f"src={client} " in line and farm_ports.search(line)]
    assert ours == [], ours
    # The LB's own datagrams to a backend (a health check, say) get their answers unchanged.
    assert l2.udp_ask(lab.lb, address("b1"), UDP_PORT)[0][1] == (address("b1"), UDP_PORT)
    # A table of stateless farms alone makes the kernel track no packet of the namespace (no NAT chain, no
    # ct expression), yet still reassembles fragments (above): the LB's own datagram left no entry either.
    assert lab.ns(lab.lb, "nft", "list", "tables").stdout.split() == ["table", "inet", "lbweb"]
    assert [line for line in conntrack_lines(lab, family) if f"dst={address('b1')} " in line] == []
    if family == 4:  # control: the same datagrams through a stateful DNAT farm do leave a conntrack entry
        control = api.farm(
            name="stateful4",
            vip=routed.vip4(91),
            protocol="udp",
            ports=str(UDP_PORT),
            mode="dnat",
            backends=[{"address": address("b1"), "port": OTHER_PORT}],  # b1:514 answers the stateless farm
        )
        api.wait_applied(control["id"])
        assert l2.udp_ask(lab.client, routed.vip4(91), UDP_PORT)[0][1] == (routed.vip4(91), UDP_PORT)
        assert any(routed.vip4(91) in line for line in conntrack_lines(lab, 4))


@pytest.mark.parametrize("family", [4, 6])
def test_stateless_farms_of_portless_backends_write_the_pick_from_a_map_and_share_the_port_match(
    api, worker, routed_udp, family
):
    """Backends without a port of their own: the farm chain's one rule writes the destination from a map of
    their addresses (no backend chain), and the raw hook tests the two farms' ports before its lookup.
    Weights, fragments, answers from the VIP and the LB's own datagrams behave as through backend chains."""
    lab = routed_udp
    vip, address = (routed.vip4, routed.backend4) if family == 4 else (routed.vip6, routed.backend6)

    def farm(name: str, n: int, port: int, backends: list[dict]) -> dict:
        return api.farm(
            name=f"{name}{family}",
            vip=vip(n),
            protocol="udp",
            ports=str(port),
            mode="stlsdnat",
            scheduler="rr",
            backends=backends,
        )

    weighted = farm("portless", 92, UDP_PORT, [{"address": address("b1"), "weight": 2}, {"address": address("b2")}])
    other = farm("other", 93, OTHER_PORT, [{"address": address("b3")}])
    api.wait_applied(weighted["id"])
    api.wait_applied(other["id"])
    answers = l2.udp_ask(lab.client, vip(92), UDP_PORT, count=30)
    assert collections.Counter(a["backend"] for a, _ in answers) == {"b1": 20, "b2": 10}
    assert {source for _, source in answers} == {(vip(92), UDP_PORT)}
    big = l2.udp_ask(lab.client, vip(92), UDP_PORT, count=3, size=3000)  # fragments, reassembled before the rewrite
    assert {(a["size"], source) for a, source in big} == {(3000, (vip(92), UDP_PORT))}
    answer, source = l2.udp_ask(lab.client, vip(93), OTHER_PORT)[0]
    assert (answer["backend"], answer["port"], source) == ("b3", OTHER_PORT, (vip(93), OTHER_PORT))
    assert l2.udp_ask(lab.lb, address("b1"), UDP_PORT)[0][1] == (address("b1"), UDP_PORT)  # the LB's own, unchanged
    table = lab.ns(lab.lb, "nft", "list", "table", "inet", "lbweb").stdout
    assert f"th dport {{ {UDP_PORT}, {OTHER_PORT} }} ip{'' if family == 4 else '6'} daddr" in table, table
    assert "chain be-" not in table, table
    ok, out = kernel_check(lab, worker)
    assert ok, out
