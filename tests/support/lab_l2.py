"""The layer-2 lab for direct server return: client, LB and three backends on ONE Ethernet segment.

The segment is a bridge inside a dedicated "switch" namespace; every host has a veth into it.
Only 198.18.0.0/15 and 2001:2::/48 are used, only inside namespaces this module creates, and
:meth:`L2Lab.destroy` removes them all (also after a failure).

                         [switch: bridge br0]
        client eth0 ----------+  +----------- eth0 LB  198.18.2.1   2001:2:0:2::1
        198.18.2.2            |  |
        2001:2:0:2::2         |  +-- b1 eth0 198.18.2.11 2001:2:0:2::11  lo: every VIP
                              +----- b2 eth0 198.18.2.12 2001:2:0:2::12  lo: every VIP
                                 +-- b3 eth0 198.18.2.13 2001:2:0:2::13  lo: every VIP

    VIPs 198.18.102.1-9 and 2001:2:0:102::1-9: the client routes them via the LB's address on the
    segment (so it sends to the LB's MAC); the backends hold them on loopback and, with
    arp_ignore=1 / arp_announce=2 (IPv4) and the address on lo only (IPv6), never claim them on the wire.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterable

from tests.support.lab import HERE, Lab, run_in_netns, sh, wait_listening

BACKENDS = {"b1": 11, "b2": 12, "b3": 13}
CLIENT4, CLIENT6 = "198.18.2.2", "2001:2:0:2::2"
LB4, LB6 = "198.18.2.1", "2001:2:0:2::1"
INTERFACE = "eth0"  # every host's interface on the segment, the LB's too: DSR farms name it
VIP_COUNT = 9
UDP_PORTS = (514, 5514)


def vip4(n: int = 1) -> str:
    return f"198.18.102.{n}"


def vip6(n: int = 1) -> str:
    return f"2001:2:0:102::{n}"


def backend4(name: str) -> str:
    return f"198.18.2.{BACKENDS[name]}"


def backend6(name: str) -> str:
    return f"2001:2:0:2::{BACKENDS[name]}"


def start_udp_servers(backends: dict[str, str], ports: Iterable[int] = UDP_PORTS) -> list[subprocess.Popen]:
    """One UDP echo server per backend namespace (``{name: netns}``), returned once every one listens."""
    port_list = ",".join(str(p) for p in ports)
    procs = []
    for name, ns in backends.items():
        cmd = ["ip", "netns", "exec", ns, sys.executable, str(HERE / "lab_udp_server.py"), name, port_list]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
    for proc in procs:
        if proc.stdout.readline().strip() != "ready":
            stop_processes(procs)
            raise RuntimeError("a UDP echo server did not start")
    return procs


def stop_processes(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def udp_ask(
    ns: str, address: str, port: int, count: int = 1, timeout: float = 2.0, size: int = 0
) -> list[tuple[dict, tuple]]:
    """``count`` datagrams from namespace ``ns``, each from a new socket (a new source port).

    ``size`` pads each datagram (beyond the 1500-byte MTU it leaves in fragments).
    Returns every answer with the address and port it came FROM, as the client's kernel saw them.
    """
    family = socket.AF_INET6 if ":" in address else socket.AF_INET

    def ask() -> list[tuple[dict, tuple]]:
        answers = []
        for i in range(count):
            with socket.socket(family, socket.SOCK_DGRAM) as sock:
                sock.settimeout(timeout)
                sock.sendto(f"query {i}".encode().ljust(size, b"."), (address, port))
                try:
                    data, source = sock.recvfrom(4096)
                except TimeoutError:
                    raise AssertionError(f"no answer to datagram {i} sent to {address}:{port}") from None
                answers.append((json.loads(data), source[:2]))
        return answers

    return run_in_netns(ns, ask)


def link_mac(lab: Lab, ns: str, dev: str = INTERFACE) -> str:
    return json.loads(lab.ns(ns, "ip", "-j", "link", "show", dev).stdout)[0]["address"]


class L2Lab(Lab):
    """Builds and tears down the one-segment lab; client helpers (connect, http_get) come from :class:`Lab`."""

    def __init__(self, tag: str | None = None):
        super().__init__(tag or f"lbl{os.getpid() % 100000}")
        self.switch = f"{self.tag}-sw"

    @property
    def namespaces(self) -> list[str]:
        return [self.switch, self.client, self.lb, *self.backends.values()]

    def _build(self) -> None:
        for ns in self.namespaces:
            sh("ip", "netns", "add", ns)
            self.ns(ns, "ip", "link", "set", "lo", "up")
            # Link-local addresses skip duplicate detection too: an IPv6 datagram sent while they are
            # still tentative waits a second for neighbour discovery (TCP hides it behind a SYN resend).
            self.ns(ns, "sysctl", "-qw", "net.ipv6.conf.default.accept_dad=0")
        self.ns(self.switch, "ip", "link", "add", "br0", "type", "bridge")
        self.ns(self.switch, "ip", "link", "set", "br0", "up")
        hosts = {"client": (self.client, CLIENT4, CLIENT6), "lb": (self.lb, LB4, LB6)}
        hosts.update({name: (ns, backend4(name), backend6(name)) for name, ns in self.backends.items()})
        for port, (ns, v4, v6) in hosts.items():
            sh("ip", "link", "add", INTERFACE, "netns", ns, "type", "veth", "peer", "name", port, "netns", self.switch)
            self.ns(self.switch, "ip", "link", "set", port, "master", "br0")
            self.ns(self.switch, "ip", "link", "set", port, "up")
            self._addr(ns, INTERFACE, f"{v4}/24", f"{v6}/64")
        for key in ("net.ipv4.neigh.eth0.retrans_time_ms=200", "net.ipv6.neigh.eth0.retrans_time_ms=200"):
            self.ns(self.client, "sysctl", "-qw", key)  # an unanswered ARP/ND probe fails in 0.6 s
        self.ns(self.client, "ip", "route", "add", f"{vip4(0)}/24", "via", LB4)
        self.ns(self.client, "ip", "-6", "route", "add", f"{vip6(0)}/64", "via", LB6)
        for ns in self.backends.values():
            for key in ("arp_ignore=1", "arp_announce=2"):
                self.ns(ns, "sysctl", "-qw", f"net.ipv4.conf.all.{key}")
            for n in range(1, VIP_COUNT + 1):
                self.ns(ns, "ip", "addr", "add", f"{vip4(n)}/32", "dev", "lo")
                self.ns(ns, "ip", "-6", "addr", "add", f"{vip6(n)}/128", "dev", "lo")
        for name, ns in self.backends.items():
            self.servers.append(self._start_server(ns, name))
        self.servers += start_udp_servers(self.backends)
        for name in self.backends:
            self._wait_server(name)

    def _wait_server(self, name: str, timeout: float = 10) -> None:
        wait_listening(self.client, backend4(name), 80, timeout)

    def mac(self, host: str) -> str:
        """The MAC of ``host`` ('client', 'lb', 'b1', ...) on the segment."""
        ns = {"client": self.client, "lb": self.lb, **self.backends}[host]
        return link_mac(self, ns)

    def neighbour_state(self, ns: str, address: str) -> str:
        """What ``ns`` knows of ``address`` on the segment after asking for it: e.g. REACHABLE or FAILED."""
        family = socket.AF_INET6 if ":" in address else socket.AF_INET

        def provoke() -> None:
            with socket.socket(family, socket.SOCK_DGRAM) as sock, contextlib.suppress(OSError):
                sock.sendto(b"", (address, 9))

        self.ns(ns, "ip", "neigh", "flush", "to", address, "dev", INTERFACE, check=False)
        state = ""
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            run_in_netns(ns, provoke)
            time.sleep(0.1)
            entries = json.loads(self.ns(ns, "ip", "-j", "neigh", "show", "to", address, "dev", INTERFACE).stdout)
            state = " ".join(entries[0].get("state", [])) if entries else ""
            if state and state not in ("INCOMPLETE", "NONE"):
                return state
        return state


class ClientWatch:
    """nft counters on the client's own interface: what it sent to a VIP, and who the answers came from.

    ``to_vip`` counts frames leaving the client for the VIP (egress hook); ``from_lb`` and
    ``from_backends`` count frames arriving from the VIP by their source MAC (ingress hook).
    The table lives in the client namespace only and is removed by :meth:`remove`.
    """

    TABLE = "lbtest-watch"

    def __init__(self, lab: L2Lab, vip: str):
        self.lab = lab
        l3 = "ip6" if ":" in vip else "ip"
        backend_macs = ", ".join(lab.mac(name) for name in BACKENDS)
        rules = f"""
table netdev {self.TABLE} {{
    counter to_vip {{}}
    counter from_lb {{}}
    counter from_backends {{}}
    chain sent {{
        type filter hook egress device "{INTERFACE}" priority 0;
        {l3} daddr {vip} counter name "to_vip"
    }}
    chain received {{
        type filter hook ingress device "{INTERFACE}" priority 0;
        {l3} saddr {vip} ether saddr {lab.mac("lb")} counter name "from_lb"
        {l3} saddr {vip} ether saddr {{ {backend_macs} }} counter name "from_backends"
    }}
}}
"""
        sh("ip", "netns", "exec", lab.client, "nft", "-f", "-", input=rules)

    def counters(self) -> dict[str, int]:
        listing = json.loads(
            self.lab.ns(self.lab.client, "nft", "-j", "list", "counters", "table", "netdev", self.TABLE).stdout
        )
        return {i["counter"]["name"]: i["counter"]["packets"] for i in listing["nftables"] if "counter" in i}

    def remove(self) -> None:
        self.lab.ns(self.lab.client, "nft", "delete", "table", "netdev", self.TABLE, check=False)
