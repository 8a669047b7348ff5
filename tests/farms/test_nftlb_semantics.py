"""nftlb documents imported through the API behave as under nftlb, proven with real packets in the lab.

Each test imports an nftlb document (``POST /api/v1/nftlb/import/``), lets the real worker apply it, and
moves traffic: a per-client connection limit with several clients, a session kept past its persistence
TTL, weighted round robin, an established connection cut when its source is denied, a farm's mark seen
by a policy-routing rule, protocol ``all`` meaning TCP, UDP and SCTP only, stateless TCP answering both
ways, and DSR persistence (in the one-segment lab of :mod:`tests.support.lab_l2`).
"""

from __future__ import annotations

import collections
import json
import socket
import subprocess
import time

import pytest

from tests.dataplane.test_dsr_stateless import l2lab, l2worker  # noqa: F401 (fixtures: the one-segment DSR lab)
from tests.dataplane.test_l4_features import wait_for
from tests.support import lab_l2 as l2
from tests.support.lab import CLIENT4, LB_BACKSIDE4, backend4, run_in_netns, vip4

pytestmark = [pytest.mark.dataplane, pytest.mark.django_db(transaction=True)]
EXTRA_CLIENTS = ("198.18.0.3", "198.18.0.4")
THREE = ("b1", "b2", "b3")


def backend_doc(name: str, **attributes) -> dict:
    return {"name": name, "ip-addr": backend4(name), "state": "up", **attributes}


def nftlb_import(api, document: dict) -> dict:
    result = api.post("nftlb/import/", document, expect=200)
    for name in result["farms_created"] + result["farms_updated"]:
        farm = api.get(f"farms/?name={name}")["results"][0]
        api.wait_applied(farm["id"])
    return result


def farm_doc(name: str, vip: str, backends: list[dict], **attributes) -> dict:
    doc = {"name": name, "family": "ipv4", "virtual-addr": vip, "virtual-ports": "80", "mode": "dnat",
           "protocol": "tcp", "scheduler": "weight", "backends": backends}  # fmt: skip
    return {"farms": [{**doc, **attributes}]}


class Held:
    """An HTTP keep-alive connection from one client address (the lab client holds several addresses)."""

    def __init__(self, lab, source: str, vip: str, timeout: float = 2):
        self.lab = lab
        self.sock = run_in_netns(
            lab.client, lambda: socket.create_connection((vip, 80), timeout=timeout, source_address=(source, 0))
        )

    def get(self) -> dict:
        def ask() -> dict:
            self.sock.sendall(b"GET / HTTP/1.1\r\nHost: lab\r\nConnection: keep-alive\r\n\r\n")
            data = b""
            while b"\r\n\r\n" not in data:
                data += self.sock.recv(4096)
            head, _, body = data.partition(b"\r\n\r\n")
            length = int(next(x for x in head.split(b"\r\n") if x.lower().startswith(b"content-length")).split(b":")[1])
            while len(body) < length:
                body += self.sock.recv(4096)
            return json.loads(body)

        return ask()

    def close(self) -> None:
        self.sock.close()


def try_hold(lab, source: str, vip: str) -> Held | None:
    try:
        held = Held(lab, source, vip, timeout=1)
        held.get()
        return held
    except OSError:
        return None


@pytest.fixture
def clients(lab):
    """Two more client addresses on the client's interface (removed afterwards)."""
    for address in EXTRA_CLIENTS:
        lab.ns(lab.client, "ip", "addr", "add", f"{address}/24", "dev", "eth0")
    yield (CLIENT4, *EXTRA_CLIENTS)
    for address in EXTRA_CLIENTS:
        lab.ns(lab.client, "ip", "addr", "del", f"{address}/24", "dev", "eth0", check=False)


def test_est_connlimit_counts_per_client_address_as_nftlb(api, worker, lab, clients):
    doc = farm_doc("perclient", vip4(230), [backend_doc("b1"), backend_doc("b2")], **{"est-connlimit": "2"})
    nftlb_import(api, doc)
    held = []
    try:
        for source in clients:  # 3 clients x 2 connections: 6 in all, over a limit of 2 (per client)
            for _ in range(2):
                connection = try_hold(lab, source, vip4(230))
                assert connection is not None, f"{source} refused below its own limit"
                held.append(connection)
        for source in clients:  # the third of each client is refused
            extra = try_hold(lab, source, vip4(230))
            assert extra is None, f"{source} got a third connection"
        held.pop().close()  # one of the last client's connections ends: that client may open one again
        wait_for(lambda: (c := try_hold(lab, clients[-1], vip4(230))) and held.append(c) or c, what="a slot freed")
    finally:
        for connection in held:
            connection.close()


def test_persistence_ttl_counts_from_the_client_s_last_packet(api, worker, lab):
    doc = farm_doc(
        "stickyttl",
        vip4(231),
        [backend_doc(b) for b in ("b1", "b2", "b3")],
        persistence="srcip",
        **{"persist-ttl": "3"},
    )
    nftlb_import(api, doc)
    held = Held(lab, CLIENT4, vip4(231))
    try:
        bound = held.get()["backend"]
        for _ in range(6):  # 6 s of traffic on one connection: twice the TTL
            time.sleep(1)
            assert held.get()["backend"] == bound
    finally:
        held.close()
    sets = lab.ns(lab.lb, "nft", "-j", "list", "sets", "table", "inet", "lbweb").stdout
    learnt = [s["set"] for s in json.loads(sets)["nftables"] if "set" in s and s["set"]["name"].startswith("persist-")]
    assert sum(len(s.get("elem", [])) for s in learnt) == 1, learnt  # refreshed, not expired at 3 s
    answers = lab.http_get(vip4(231), 80, count=6)  # new connections, after the first connection's TTL
    assert {a["backend"] for a in answers} == {bound}


def test_round_robin_is_weighted_as_nftlb(api, worker, lab):
    doc = farm_doc("wrr", vip4(232), [backend_doc("b1", weight="2"), backend_doc("b2", weight="1")], scheduler="rr")
    nftlb_import(api, doc)
    sequence = [a["backend"] for a in lab.http_get(vip4(232), 80, count=12)]
    assert collections.Counter(sequence) == {"b1": 8, "b2": 4}, sequence
    turns = ["".join(sequence[i : i + 3]) for i in range(0, 12, 3)]
    assert len(set(turns)) == 1 and sorted(turns[0].replace("b", "")) == ["1", "1", "2"], sequence


def test_denying_a_source_cuts_its_established_connection(api, worker, lab):
    policy = {"name": "deny-late", "type": "blacklist", "family": "ipv4", "elements": [{"data": "198.18.9.9"}]}
    doc = farm_doc("cut", vip4(233), [backend_doc("b1")], policies=[{"name": "deny-late"}])
    nftlb_import(api, {**doc, "policies": [policy]})
    held = Held(lab, CLIENT4, vip4(233), timeout=1)
    try:
        assert held.get()["backend"] == "b1"
        denied = {**policy, "elements": [{"data": "198.18.9.9"}, {"data": CLIENT4}]}
        nftlb_import(api, {**doc, "policies": [denied]})
        with pytest.raises(OSError):  # the established connection's packets are dropped now (nftlb: every packet)
            held.get()
    finally:
        held.close()
    assert not lab.try_connect(vip4(233), 80, timeout=0.5)


def test_a_farm_s_mark_is_seen_by_a_policy_routing_rule(api, worker, lab):
    """The main table cannot reach backend b1 nor the client (blackholes); only table 100, chosen by
    ``ip rule fwmark 0x100``, can: the connection works only if every packet, both ways, carries the mark."""
    doc = farm_doc("marked", vip4(234), [backend_doc("b1", mark="0x0")], mark="0x100")
    nftlb_import(api, doc)
    assert lab.http_get(vip4(234), 80)[0]["backend"] == "b1"
    steps = [
        ("ip", "route", "add", backend4("b1"), "dev", "br0", "table", "100"),
        ("ip", "route", "add", CLIENT4, "dev", "cli0", "table", "100"),
        ("ip", "rule", "add", "fwmark", "0x100", "lookup", "100", "priority", "100"),
        ("ip", "route", "add", "blackhole", f"{backend4('b1')}/32"),
        ("ip", "route", "add", "blackhole", f"{CLIENT4}/32"),
    ]
    try:
        for step in steps:
            lab.ns(lab.lb, *step)
        assert lab.http_get(vip4(234), 80, count=3)[0]["backend"] == "b1"
        lab.ns(lab.lb, "ip", "rule", "del", "fwmark", "0x100", "lookup", "100", "priority", "100")
        assert not lab.try_connect(vip4(234), 80, timeout=0.5)  # without the rule, the blackholes win
    finally:
        lab.ns(lab.lb, "ip", "rule", "del", "fwmark", "0x100", "lookup", "100", "priority", "100", check=False)
        lab.ns(lab.lb, "ip", "route", "flush", "table", "100", check=False)
        for address in (backend4("b1"), CLIENT4):
            lab.ns(lab.lb, "ip", "route", "del", "blackhole", f"{address}/32", check=False)


def test_protocol_all_is_tcp_udp_and_sctp_only(api, worker, lab):
    doc = farm_doc("every", vip4(235), [backend_doc("b1")], protocol="all", **{"virtual-ports": ""})
    nftlb_import(api, doc)
    assert lab.http_get(vip4(235), 80)[0]["backend"] == "b1"
    assert lab.udp_query(vip4(235), 53)[0] is not None
    ping = ["ip", "netns", "exec", lab.client, "ping", "-c", "1", "-W", "1", vip4(235)]
    assert subprocess.run(ping, capture_output=True).returncode != 0  # ICMP echo is not balanced (before: it was)


def test_stateless_tcp_answers_both_ways_without_conntrack(api, worker, lab):
    two = [backend_doc("b1"), backend_doc("b2")]
    hashed = {"scheduler": "hash", "sched-param": "srcip srcport"}
    doc = farm_doc("stateless-tcp", vip4(236), two, mode="stlsdnat", **hashed)
    nftlb_import(api, doc)
    answers = lab.http_get(vip4(236), 80, count=8)  # each a new connection: SYN, SYN-ACK from the VIP, data both ways
    assert {a["client"] for a in answers} == {CLIENT4} and {a["backend"] for a in answers} <= {"b1", "b2"}
    tracked = lab.ns(lab.lb, "conntrack", "-L", "-d", vip4(236), check=False).stdout
    assert vip4(236) not in tracked  # no conntrack entry: rewritten statelessly, as nftlb does


def test_dsr_persistence_and_static_sessions_in_the_farm_s_netdev_table(api, l2worker, l2lab):  # noqa: F811
    """nftlb keeps DSR persistence in netdev maps: a client goes back to its backend although the farm
    hashes the client's port too (which alone spreads its connections), and a static session wins."""
    backends = [{"name": name, "ip-addr": l2.backend4(name)} for name in THREE]
    farm = {"name": "dsr-sticky", "family": "ipv4", "virtual-addr": l2.vip4(9), "virtual-ports": "80", "mode": "dsr",
            "protocol": "tcp", "scheduler": "hash", "sched-param": "srcip srcport", "iface": l2.INTERFACE,
            "persistence": "srcip", "persist-ttl": "60", "backends": backends}  # fmt: skip
    nftlb_import(api, {"farms": [farm]})
    first = {a["backend"] for a in l2lab.http_get(l2.vip4(9), 80, count=20)}
    assert len(first) == 1, first  # 20 connections, 20 source ports: one backend
    (bound,) = first
    other = next(name for name in THREE if name != bound)
    farm["sessions"] = [{"client": l2.CLIENT4, "backend": other}]
    nftlb_import(api, {"farms": [farm]})
    assert {a["backend"] for a in l2lab.http_get(l2.vip4(9), 80, count=10)} == {other}


def test_a_backend_s_own_source_address(api, worker, lab):
    """nftlb's backend source-addr: connections to that backend leave from it, the others masquerade."""
    own = "198.18.1.50"
    lab.ns(lab.lb, "ip", "addr", "add", f"{own}/24", "dev", "br0")
    try:
        backends = [backend_doc("b1", **{"source-addr": own}), backend_doc("b2")]
        nftlb_import(api, farm_doc("own-source", vip4(237), backends, mode="snat", scheduler="rr"))
        seen = {(a["backend"], a["client"]) for a in lab.http_get(vip4(237), 80, count=6)}
        assert seen == {("b1", own), ("b2", LB_BACKSIDE4)}, seen
    finally:
        lab.ns(lab.lb, "ip", "addr", "del", f"{own}/24", "dev", "br0", check=False)
