"""Issue 7's known SNAT trap, with real packets: clients that share source ports, connection close.

The backend closes first, so it holds each connection's tuple (SNAT address:port -> backend:80) in
TIME_WAIT for 60 s. NAT keeps the client's source port whenever conntrack knows no other connection
on the tuple, and conntrack forgets a tuple as soon as its client reuses the port (a SYN on a
TIME_WAIT entry reopens it). Before the fix, round robin sent that reopened connection to another
backend, and the next client with the same port number met the first backend's TIME_WAIT with its
own, unrelated sequence number and timestamp: the backend answered with an ACK of the old
connection, the client reset and retransmitted its SYN (10 ms, or 1 s when the retry met the same
fate). Every client OS picks its ports from the same range, so this happens all the time.
"""

from __future__ import annotations

import collections
import json
import random
import socket
import time

import pytest

from tests.dataplane.test_dataplane import THREE, kernel_check, make_farm
from tests.support.lab import KeepAlive, run_in_netns, vip4

pytestmark = [pytest.mark.dataplane, pytest.mark.django_db(transaction=True)]

CLIENTS = [f"198.18.0.{n}" for n in range(61, 64)]  # three client machines, as many as the farm has backends
PORTS = range(46100, 46140)  # the source ports all of them use, over and over
SECONDS = 12  # passes over every client and port, for about this long
SLOW = 0.3  # a connect slower than this most likely waited for a SYN retransmission


def client_counters(lab) -> dict[str, int]:
    lines = lab.ns(lab.client, "cat", "/proc/net/netstat").stdout.splitlines()
    counters: dict[str, int] = {}
    for names, values in zip(lines, lines[1:], strict=False):
        if names.startswith("TcpExt:") and values.startswith("TcpExt:"):
            counters.update(zip(names.split()[1:], map(int, values.split()[1:]), strict=True))
    return counters


def reuse_entries(lab, farm) -> int:
    """Client address . port pairs the farm's ``reuse-`` sets hold."""
    total = 0
    for backend in farm["backends"]:
        name = f"reuse-{farm['name']}-{backend['id']}"
        out = lab.ns(lab.lb, "nft", "-j", "list", "set", "inet", "lbweb", name).stdout
        total += sum(len(i["set"].get("elem", [])) for i in json.loads(out)["nftables"] if "set" in i)
    return total


def churn(vip: str) -> dict:
    """Connection-close requests from every client and port in turn (reading to the server's FIN,
    so the backend closes first), pass after pass; returns what happened."""
    seen: dict[tuple[str, int], set[str]] = collections.defaultdict(set)
    tuples: collections.Counter = collections.Counter()
    slow, remapped, answers, passes = [], 0, 0, 0
    order = random.Random(7)  # clients take turns in a shuffled order: not in step with round robin
    deadline = time.monotonic() + SECONDS
    while time.monotonic() < deadline:
        passes += 1
        for port in PORTS:
            for client in order.sample(CLIENTS, len(CLIENTS)):
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    sock.settimeout(5)
                    sock.bind((client, port))
                    started = time.monotonic()
                    sock.connect((vip, 80))
                    took = time.monotonic() - started
                    if took > SLOW:
                        slow.append((client, port, round(took, 2)))
                    sock.sendall(b"GET / HTTP/1.1\r\nHost: lab\r\nConnection: close\r\n\r\n")
                    data = b""
                    while chunk := sock.recv(4096):
                        data += chunk
                answer = json.loads(data.split(b"\r\n\r\n", 1)[1])
                seen[(client, port)].add(answer["backend"])
                tuples[(answer["backend"], answer["client_port"])] += 1
                remapped += answer["client_port"] != port
                answers += 1
    return {"seen": seen, "tuples": tuples, "slow": slow, "remapped": remapped, "answers": answers, "passes": passes}


def test_snat_clients_sharing_ports_with_connection_close_never_wait(api, worker, lab):
    for address in CLIENTS:
        lab.ns(lab.client, "ip", "addr", "add", f"{address}/24", "dev", "eth0")
    try:
        farm = make_farm(api, "shared-ports", vip4(250), mode="snat")
        before = client_counters(lab)
        result = run_in_netns(lab.client, lambda: churn(vip4(250)))
        after = client_counters(lab)
        # an apply of the farm keeps an established connection and what the farm learnt of client ports
        kept = KeepAlive(lab, vip4(250))
        try:
            bound = kept.get()["backend"]
            learnt = reuse_entries(lab, farm)
            api.patch(f"farms/{farm['id']}/", {"scheduler": "weight"})
            api.wait_applied(farm["id"])
            chain = lab.ns(lab.lb, "nft", "list", "chain", "inet", "lbweb", "farm-shared-ports").stdout
            assert "numgen random" in chain
            assert kept.get()["backend"] == bound
            assert reuse_entries(lab, farm) >= learnt > 0
        finally:
            kept.close()
    finally:
        for address in CLIENTS:
            lab.ns(lab.client, "ip", "addr", "del", f"{address}/24", "dev", "eth0", check=False)
    syn_retransmits = after["TCPSynRetrans"] - before["TCPSynRetrans"]
    # the trap was set: several passes, each backend tuple used again within its TIME_WAIT
    assert result["passes"] >= 3, result["passes"]
    assert max(result["tuples"].values()) >= 3
    backends = collections.Counter(b for found in result["seen"].values() for b in found)
    assert set(backends) == set(THREE)
    # and no connection met a backend's TIME_WAIT: no SYN retransmitted (the kernel's count; a slow
    # connect alone can be this shared machine's scheduling, so it is only reported)
    assert syn_retransmits == 0, (
        f"{syn_retransmits} SYN retransmitted, {len(result['slow'])} slow connects "
        f"(first: {result['slow'][:5]}) out of {result['answers']} connections"
    )
    # a client port reused within conntrack's TIME_WAIT went back to the backend it went to, and a
    # port number another client held at the scheduler's pick went to a backend where it was free:
    # NAT kept every port, so each backend tuple only ever carried one client's connections
    assert all(len(found) == 1 for found in result["seen"].values())
    assert result["remapped"] == 0, f"{result['remapped']} of {result['answers']} connections changed port"
    ok, report = kernel_check(lab, worker)
    assert ok, report
