"""The namespace lab: a client, a load balancer and three backends.

Only 198.18.0.0/15 and 2001:2::/48 are used, only inside namespaces this
module creates, and :meth:`Lab.destroy` removes them all (also after a
failure). Nothing is ever applied to the host's own network namespace.

    client 198.18.0.2 ---- 198.18.0.1 [LB] br0 198.18.1.1 ---- b1 198.18.1.11
           2001:2::2         2001:2::1         2001:2:0:1::1  |-- b2 198.18.1.12
                                                              `-- b3 198.18.1.13
    VIPs: 198.18.100.0/24 and 2001:2:0:100::/64 (routed to the LB, held by no one)
"""

from __future__ import annotations

import contextlib
import ctypes
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CLONE_NEWNET = 0x40000000
BACKENDS = {"b1": 11, "b2": 12, "b3": 13}
CLIENT4, CLIENT6 = "198.18.0.2", "2001:2::2"
LB_BACKSIDE4, LB_BACKSIDE6 = "198.18.1.1", "2001:2:0:1::1"
BACKEND_PORTS = (80, 8080, 21)
UDP_PORTS = (53,)  # 514 and 5514 belong to lab_udp_server.py (DSR and stateless tests)


def vip4(n: int = 1) -> str:
    return f"198.18.100.{n}"


def vip6(n: int = 1) -> str:
    return f"2001:2:0:100::{n}"


def backend4(name: str) -> str:
    return f"198.18.1.{BACKENDS[name]}"


def backend6(name: str) -> str:
    return f"2001:2:0:1::{BACKENDS[name]}"


def sh(*args: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(args, check=check, capture_output=True, text=True, input=input)


_libc = ctypes.CDLL(None, use_errno=True)


def enter_netns(ns: str) -> None:
    """Move the calling thread into network namespace ``ns`` (sockets it makes from then on live there)."""
    fd = os.open(f"/run/netns/{ns}", os.O_RDONLY)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {ns} failed")
    finally:
        os.close(fd)


@contextlib.contextmanager
def inside_netns(ns: str):
    """The calling thread in namespace ``ns`` for the block (what it starts runs there too), then back."""
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        enter_netns(ns)
        yield
    finally:
        try:
            if _libc.setns(home, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns back failed")
        finally:
            os.close(home)


def wait_listening(ns: str, address: str, port: int, timeout: float = 10) -> None:
    """Until a TCP connection from namespace ``ns`` to ``address``:``port`` succeeds (a server has started)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            run_in_netns(ns, lambda: socket.create_connection((address, port), timeout=1).close())
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def run_in_netns(ns: str, func: Callable[[], Any]) -> Any:
    """Run ``func`` in a fresh thread that has entered namespace ``ns``; sockets it makes stay there."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            enter_netns(ns)
            box["value"] = func()
        except BaseException as exc:  # handed back to the caller
            box["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def udp_question(source: tuple[str, int], dest: tuple[str, int], payload: bytes = b"x", tries: int = 3) -> bytes:
    """The answer to one datagram sent from ``source`` (one flow per source port); a datagram lost under load is
    sent again from the same port, the same flow, so the same backend answers. Call it inside the namespace."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(source)
        sock.settimeout(2)
        for attempt in range(tries):
            sock.sendto(payload, dest)
            try:
                return sock.recvfrom(2048)[0]
            except TimeoutError:
                if attempt == tries - 1:
                    raise
    raise AssertionError("unreachable")


class Lab:
    """Builds and tears down the namespaces; runs servers and clients in them."""

    def __init__(self, tag: str | None = None, backend_server: Callable[[str, str], subprocess.Popen] | None = None):
        """``backend_server(netns, name)`` replaces the Python HTTP and UDP servers on each backend
        (the benchmarks start nginx); it must serve HTTP on port 80."""
        self.tag = tag or f"lbt{os.getpid() % 100000}"
        self.backend_server = backend_server
        self.client = f"{self.tag}-client"
        self.lb = f"{self.tag}-lb"
        self.backends = {name: f"{self.tag}-{name}" for name in BACKENDS}
        self.servers: list[subprocess.Popen] = []
        self.http_servers: dict[str, subprocess.Popen] = {}  # backend name -> its HTTP server

    @property
    def namespaces(self) -> list[str]:
        return [self.client, self.lb, *self.backends.values()]

    def ns(self, ns: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return sh("ip", "netns", "exec", ns, *args, check=check)

    def build(self) -> Lab:
        try:
            self._build()
        except BaseException:
            self.destroy()
            raise
        return self

    def _build(self) -> None:
        for ns in self.namespaces:
            sh("ip", "netns", "add", ns)
            self.ns(ns, "ip", "link", "set", "lo", "up")
        # client <-> LB
        sh("ip", "link", "add", "eth0", "netns", self.client, "type", "veth", "peer", "name", "cli0", "netns", self.lb)
        self._addr(self.client, "eth0", f"{CLIENT4}/24", f"{CLIENT6}/64")
        self._addr(self.lb, "cli0", "198.18.0.1/24", "2001:2::1/64")
        self.ns(self.client, "ip", "route", "add", "default", "via", "198.18.0.1")
        self.ns(self.client, "ip", "-6", "route", "add", "default", "via", "2001:2::1")
        # LB bridge <-> backends
        self.ns(self.lb, "ip", "link", "add", "br0", "type", "bridge")
        self._addr(self.lb, "br0", f"{LB_BACKSIDE4}/24", f"{LB_BACKSIDE6}/64")
        for name, ns in self.backends.items():
            sh("ip", "link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", name, "netns", self.lb)
            self.ns(self.lb, "ip", "link", "set", name, "master", "br0")
            self.ns(self.lb, "ip", "link", "set", name, "up")
            self._addr(ns, "eth0", f"{backend4(name)}/24", f"{backend6(name)}/64")
            self.ns(ns, "ip", "route", "add", "default", "via", LB_BACKSIDE4)
            self.ns(ns, "ip", "-6", "route", "add", "default", "via", LB_BACKSIDE6)
        for key in ("net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"):
            self.ns(self.lb, "sysctl", "-qw", key)
        for name, ns in self.backends.items():
            self.servers.append(self._start_server(ns, name))
        for name in self.backends:
            self._wait_server(name)

    def _addr(self, ns: str, dev: str, v4: str, v6: str) -> None:
        self.ns(ns, "ip", "addr", "add", v4, "dev", dev)
        self.ns(ns, "ip", "-6", "addr", "add", v6, "dev", dev, "nodad")
        self.ns(ns, "ip", "link", "set", dev, "up")

    def _start_server(self, ns: str, name: str) -> subprocess.Popen:
        if self.backend_server:
            return self.backend_server(ns, name)
        udp = ",".join(str(p) for p in UDP_PORTS)
        self.servers.append(self._spawn(ns, "lab_echo_server.py", name, udp))
        self.http_servers[name] = self._spawn(ns, "lab_server.py", name, ",".join(str(p) for p in BACKEND_PORTS))
        return self.http_servers[name]

    def _spawn(self, ns: str, script: str, *args: str) -> subprocess.Popen:
        return subprocess.Popen(
            ["ip", "netns", "exec", ns, sys.executable, str(HERE / script), *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def spawn_server(self, name: str, *args: str) -> subprocess.Popen:
        """Run tests/support/lab_server.py in backend ``name``'s namespace (the caller stops it)."""
        return self._spawn(self.backends[name], "lab_server.py", name, *args)

    def start_server(self, name: str, wait: bool = True) -> None:
        """Start backend ``name``'s HTTP server (on BACKEND_PORTS)."""
        self.http_servers[name] = self.spawn_server(name, ",".join(str(p) for p in BACKEND_PORTS))
        self.servers.append(self.http_servers[name])
        if wait:
            self._wait_server(name)

    def stop_server(self, name: str) -> None:
        """Kill backend ``name``'s HTTP server: its host stays up and refuses connections (TCP reset)."""
        proc = self.http_servers.pop(name)
        proc.kill()
        proc.wait(timeout=5)
        self.servers.remove(proc)

    def ensure_servers(self) -> None:
        """Restart any backend server a test stopped (and did not restart), or that died: a warning names
        the one that died, since no test should have killed it."""
        for name in self.backends:
            if name not in self.http_servers:
                self.start_server(name)
            elif self.http_servers[name].poll() is not None:
                code = self.http_servers[name].returncode
                warnings.warn(f"backend {name}'s HTTP server had exited ({code})", stacklevel=2)
                self.servers.remove(self.http_servers[name])
                self.start_server(name)

    def _wait_server(self, name: str, timeout: float = 10) -> None:
        wait_listening(self.lb, backend4(name), 80, timeout)

    def destroy(self) -> None:
        for proc in self.servers:
            proc.terminate()
        for proc in self.servers:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.servers.clear()
        for ns in self.namespaces:
            sh("ip", "netns", "pids", ns, check=False)
            pids = sh("ip", "netns", "pids", ns, check=False).stdout.split()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), 9)
            sh("ip", "netns", "del", ns, check=False)

    # -- traffic from the client --------------------------------------------------------

    def connect(self, address: str, port: int, timeout: float = 3) -> socket.socket:
        """A TCP connection opened from the client namespace."""
        return run_in_netns(self.client, lambda: socket.create_connection((address, port), timeout=timeout))

    def http_get(self, address: str, port: int = 80, count: int = 1, timeout: float = 3) -> list[dict]:
        """``count`` requests from the client, each on a new connection; returns the backends' answers."""

        def many() -> list[dict]:
            answers = []
            for _ in range(count):
                answers.append(_request(socket.create_connection((address, port), timeout=timeout), close=True))
            return answers

        return run_in_netns(self.client, many)

    def download(self, address: str, size: int, count: int = 1, port: int = 80, timeout: float = 5) -> int:
        """``count`` downloads of ``size`` bytes from the client, each on a new connection; body bytes received."""

        def many() -> int:
            received = 0
            for _ in range(count):
                conn = http.client.HTTPConnection(address, port, timeout=timeout)
                conn.request("GET", f"/bytes/{size}", headers={"Connection": "close"})
                received += len(conn.getresponse().read())
                conn.close()
            return received

        return run_in_netns(self.client, many)

    def lbweb_counter(self, name: str) -> dict[str, int]:
        """One named counter of lbweb's table in the LB's kernel: ``packets`` and ``bytes``."""
        out = self.ns(self.lb, "nft", "-j", "list", "counter", "inet", "lbweb", name).stdout
        return next(i["counter"] for i in json.loads(out)["nftables"] if "counter" in i)

    def link_counters(self, ns: str, dev: str) -> dict[str, int]:
        """An interface's cumulative counters (bytes, packets each way) as the kernel of ``ns`` sees them."""
        names = ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets")
        out = self.ns(ns, "sh", "-c", " ".join(f"cat /sys/class/net/{dev}/statistics/{n};" for n in names)).stdout
        return dict(zip(names, map(int, out.split()), strict=True))

    def udp_query(self, address: str, port: int, count: int = 1, timeout: float = 2, from_ns: str | None = None):
        """``count`` datagrams from the client, each from a new socket (new source port); returns
        (answer, the address:port the answer came from) pairs, or None for a datagram left unanswered."""

        def many() -> list:
            family = socket.AF_INET6 if ":" in address else socket.AF_INET
            results = []
            for _ in range(count):
                with socket.socket(family, socket.SOCK_DGRAM) as sock:
                    sock.settimeout(timeout)
                    sock.sendto(b"ping", (address, port))
                    try:
                        data, peer = sock.recvfrom(2048)
                        results.append((json.loads(data), (peer[0], peer[1])))
                    except TimeoutError:
                        results.append(None)
            return results

        return run_in_netns(from_ns or self.client, many)

    def try_connect(self, address: str, port: int, timeout: float = 1) -> bool:
        try:
            self.connect(address, port, timeout=timeout).close()
            return True
        except OSError:
            return False


class KeepAlive:
    """One HTTP/1.1 keep-alive connection from the client; every request reuses it."""

    def __init__(self, lab: Lab, address: str, port: int = 80):
        self.sock = lab.connect(address, port)

    def get(self) -> dict:
        return _request(self.sock, close=False)

    def close(self) -> None:
        self.sock.close()


def _request(sock: socket.socket, close: bool) -> dict:
    conn = http.client.HTTPConnection("lab")
    conn.sock = sock
    conn.request("GET", "/", headers={"Connection": "close" if close else "keep-alive"})
    response = conn.getresponse()
    body = json.loads(response.read())
    if close:
        sock.close()
    return body


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def send_raw_tcp(lab: Lab, dst: str, dport: int, flags: int, count: int = 1, sport: int = 40000) -> None:
    """Hand-made IPv4 TCP segments from the client (e.g. SYN|FIN, which conntrack calls invalid)."""
    import ipaddress
    import struct

    def send() -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP) as sock:
            for i in range(count):
                header = struct.pack("!HHIIBBHHH", sport + i, dport, 1000, 0, 5 << 4, flags, 8192, 0, 0)
                pseudo = ipaddress.ip_address(CLIENT4).packed + ipaddress.ip_address(dst).packed
                pseudo += struct.pack("!BBH", 0, socket.IPPROTO_TCP, len(header))
                csum = _checksum(pseudo + header)
                sock.sendto(header[:16] + struct.pack("!H", csum) + header[18:], (dst, 0))

    run_in_netns(lab.client, send)
