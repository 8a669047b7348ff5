"""HAProxy in the namespace lab: the real engine, run in the LB namespace, driven through dataplane.l7.engine.

The VIPs HAProxy binds are put on the LB namespace's loopback (HAProxy binds addresses the host holds; on the
appliance the operator's or keepalived's interfaces hold them). Everything lives in the lab's namespaces and a
temporary directory; ``stop`` ends the master (and so its workers) by its pid.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import subprocess
import time
from pathlib import Path

from dataplane.l7.engine import BASE_CONFIG, Engine
from tests.support.lab import Lab, run_in_netns


class HAProxyLab:
    def __init__(self, lab: Lab, workdir: Path, vips: tuple[str, ...] = ("198.18.100.1", "2001:2:0:100::1")):
        self.lab = lab
        self.workdir = workdir
        self.conf_dir = workdir / "conf"
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        (workdir / "sock").mkdir(exist_ok=True)
        self.socket = str(workdir / "sock" / "master.sock")  # the layout of LBWEB_HAPROXY_DIR (lbweb/settings.py)
        self.engine = Engine(self.conf_dir, self.socket)
        self.vips = vips
        self.proc: subprocess.Popen | None = None
        self.log = workdir / "haproxy.log"

    def start(self) -> HAProxyLab:
        self.lab.ensure_servers()
        for vip in self.vips:
            plen = "128" if ":" in vip else "32"
            self.lab.ns(self.lab.lb, "ip", "addr", "replace", f"{vip}/{plen}", "dev", "lo")
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", self.lab.lb, "haproxy", "-W", "-S", f"{self.socket},mode,600"]
            + ["-f", str(BASE_CONFIG), "-f", str(self.conf_dir)],
            stdout=self.log.open("w"),
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 10
        while not self.engine.cli.alive():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"HAProxy did not start: {self.log.read_text()[-2000:]}")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        for vip in self.vips:
            plen = "128" if ":" in vip else "32"
            self.lab.ns(self.lab.lb, "ip", "addr", "del", f"{vip}/{plen}", "dev", "lo", check=False)

    # -- clients in the client namespace -------------------------------------------------

    def get(self, address: str, path: str = "/", port: int = 80, headers: dict | None = None, **kw) -> Response:
        return run_in_netns(self.lab.client, lambda: request(address, port, path, headers or {}, **kw))


class Response:
    def __init__(self, status: int, headers: http.client.HTTPMessage, body: bytes, tls: dict | None = None):
        self.status, self.headers, self.body, self.tls = status, headers, body, tls or {}

    def json(self) -> dict:
        return json.loads(self.body)

    @property
    def backend(self) -> str:
        return self.json()["backend"]


def request(
    address: str,
    port: int,
    path: str,
    headers: dict,
    *,
    tls: ssl.SSLContext | None = None,
    sni: str | None = None,
    timeout: float = 5,
) -> Response:
    """One request on a new connection (``Connection: close``); TLS with ``sni`` when a context is given."""
    sock = socket.create_connection((address, port), timeout=timeout)
    info = None
    if tls is not None:
        sock = tls.wrap_socket(sock, server_hostname=sni)
        info = {"alpn": sock.selected_alpn_protocol(), "cert": sock.getpeercert(), "version": sock.version()}
    conn = http.client.HTTPConnection(address, port, timeout=timeout)
    conn.sock = sock
    conn.request("GET", path, headers={"Connection": "close", **headers})
    answer = conn.getresponse()
    response = Response(answer.status, answer.headers, answer.read(), info)
    conn.close()
    return response
