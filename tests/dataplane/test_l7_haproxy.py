"""The real HAProxy (Debian's) in the namespace lab, configured by dataplane.l7.engine: routing by host and path, cookie
persistence, redirects, headers, TLS with SNI and ALPN checked by a real client, backends over TLS, drain with no
failed request, capacity changed live (no reload), and 100 hitless reloads under load."""

from __future__ import annotations

import dataclasses
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections import Counter

import pytest

from compiler.haproxy.spec import (
    CertificateSpec,
    EngineSpec,
    FarmSpec,
    HeaderRule,
    RedirectRule,
    ServerSpec,
    ServiceSpec,
)
from tests.support import certs
from tests.support.l7_lab import HAProxyLab, request
from tests.support.lab import backend4, run_in_netns

VIP = "198.18.100.1"
VIP6 = "2001:2:0:100::1"


def servers(*names: str, port: int = 80, **kw) -> tuple[ServerSpec, ...]:
    return tuple(ServerSpec(int(n[1:]), backend4(n), port, **kw) for n in names)


@pytest.fixture(scope="module")
def pki():
    root = certs.issue("lbweb l7 test root", ca=True)
    return {
        "root": root,
        "www": certs.issue("www.example.com", root, names=("www.example.com", "example.com")),
        "api": certs.issue("api.example.org", root, names=("api.example.org",)),
    }


@pytest.fixture(scope="module")
def haproxy(lab, tmp_path_factory):
    engine_lab = HAProxyLab(lab, tmp_path_factory.mktemp("haproxy")).start()
    yield engine_lab
    engine_lab.stop()


def routing_farm(**changes) -> FarmSpec:
    farm = FarmSpec(
        id=1,
        name="web",
        mode="http",
        vip=VIP,
        ports=(80,),
        services=(
            ServiceSpec(10, "a", hosts=("a.example.com",), servers=servers("b1")),
            ServiceSpec(11, "api", path_prefix="/api", servers=servers("b2")),
            ServiceSpec(12, "wild", hosts=("*.example.net",), servers=servers("b3")),
            ServiceSpec(13, "sticky", persistence="cookie", persistence_ttl=600, servers=servers("b1", "b2", "b3")),
        ),
        redirects=(RedirectRule("/old", "http://a.example.com/new", 301),),
        headers=(HeaderRule("request", "X-Lbweb", "yes 100%"), HeaderRule("response", "X-Drop-Me")),
    )
    return dataclasses.replace(farm, **changes)


def apply(haproxy: HAProxyLab, *farms: FarmSpec):
    return haproxy.engine.apply(EngineSpec(farms))


def test_host_and_path_routing(haproxy):
    six = FarmSpec(9, "six", "http", VIP6, (80,), services=(ServiceSpec(19, "a", servers=servers("b3")),))
    apply(haproxy, routing_farm(), six)
    assert haproxy.get(VIP, headers={"Host": "a.example.com"}).backend == "b1"
    assert haproxy.get(VIP, headers={"Host": "A.Example.com:80"}).backend == "b1"  # case and port ignored
    assert haproxy.get(VIP, "/api/v2/x", headers={"Host": "other"}).backend == "b2"
    assert haproxy.get(VIP, headers={"Host": "deep.sub.example.net"}).backend == "b3"
    # Not a subdomain: falls through to the last (catch-all) service.
    assert haproxy.get(VIP, headers={"Host": "evilexample.net"}).json()["path"] == "/"
    assert haproxy.get(VIP6, headers={"Host": "a.example.com"}).backend == "b3"


def test_cookie_persistence_across_requests(haproxy):
    apply(haproxy, routing_farm())
    first = haproxy.get(VIP, "/page", headers={"Host": "x"})
    cookie = first.headers["Set-Cookie"]
    assert cookie.startswith("LBWEBSRV=") and "HttpOnly" in cookie
    value = cookie.split(";")[0]
    seen = {haproxy.get(VIP, "/page", headers={"Host": "x", "Cookie": value}).backend for _ in range(12)}
    assert seen == {first.backend}
    spread = {haproxy.get(VIP, "/page", headers={"Host": "x"}).backend for _ in range(12)}
    assert len(spread) == 3  # without the cookie, round robin over the three


def test_redirect_and_headers(haproxy):
    apply(haproxy, routing_farm())
    moved = haproxy.get(VIP, "/old/thing", headers={"Host": "x"})
    assert moved.status == 301 and moved.headers["Location"] == "http://a.example.com/new"
    answer = haproxy.get(VIP, "/", headers={"Host": "a.example.com", "X-Forwarded-For": "6.6.6.6"})
    seen = answer.json()["headers"]
    assert seen["x-lbweb"] == "yes 100%"
    assert seen["x-forwarded-for"].split(",")[-1].strip() == "198.18.0.2"  # the client, appended by HAProxy
    assert seen["x-forwarded-proto"] == "http" and seen["x-forwarded-host"] == "a.example.com"
    assert answer.json()["client"] == "198.18.1.1"  # the backend sees the LB: a proxy, not NAT


def test_error_page_when_no_backend_serves(haproxy):
    farm = routing_farm(
        services=(ServiceSpec(10, "down", servers=servers("b1", state="disabled")),),
        error_pages=((503, "<h1>lbweb says: back soon</h1>"),),
    )
    apply(haproxy, farm)
    answer = haproxy.get(VIP, "/", headers={"Host": "x"})
    assert answer.status == 503 and b"back soon" in answer.body


def https_farm(pki, **changes) -> FarmSpec:
    farm = FarmSpec(
        id=2,
        name="secure",
        mode="https",
        vip=VIP,
        ports=(443,),
        redirect_ports=(80,),
        hsts_max_age=600,
        certificates=(
            CertificateSpec(1, "www", pki["www"].pem + pki["www"].key_pem, ("www.example.com", "example.com")),
            CertificateSpec(2, "api", pki["api"].pem + pki["api"].key_pem, ("api.example.org",)),
        ),
        services=(
            ServiceSpec(20, "api", hosts=("api.example.org",), servers=servers("b2")),
            ServiceSpec(21, "www", servers=servers("b1")),
        ),
    )
    return dataclasses.replace(farm, **changes)


def client_context(pki, alpn=("http/1.1",)) -> ssl.SSLContext:
    context = ssl.create_default_context(cadata=pki["root"].pem)
    context.set_alpn_protocols(list(alpn))
    return context


def test_tls_certificate_chosen_by_sni_and_verified(haproxy, pki):
    apply(haproxy, https_farm(pki))
    context = client_context(pki)
    for sni, backend in (("www.example.com", "b1"), ("api.example.org", "b2"), ("example.com", "b1")):
        answer = haproxy.get(VIP, "/", port=443, headers={"Host": sni}, tls=context, sni=sni)
        assert answer.status == 200 and answer.backend == backend
        names = {value for kind, value in answer.tls["cert"]["subjectAltName"]}
        assert sni in names  # the client verified the chain and the name (ssl raises otherwise)
        assert answer.headers["Strict-Transport-Security"] == "max-age=600; includeSubDomains"
        assert answer.json()["headers"]["x-forwarded-proto"] == "https"
    # An unknown name gets the default (first) certificate, which the client refuses for that name.
    with pytest.raises(ssl.SSLCertVerificationError):
        haproxy.get(VIP, "/", port=443, tls=context, sni="unknown.example.com")


def test_http2_by_alpn(haproxy, pki):
    apply(haproxy, https_farm(pki))

    def negotiate(alpn):
        raw = socket.create_connection((VIP, 443), timeout=5)
        with client_context(pki, alpn).wrap_socket(raw, server_hostname="www.example.com") as tls:
            return tls.selected_alpn_protocol()

    assert run_in_netns(haproxy.lab.client, lambda: negotiate(["h2", "http/1.1"])) == "h2"
    assert run_in_netns(haproxy.lab.client, lambda: negotiate(["http/1.1"])) == "http/1.1"
    apply(haproxy, https_farm(pki, http2=False))
    assert run_in_netns(haproxy.lab.client, lambda: negotiate(["h2", "http/1.1"])) == "http/1.1"


def test_plain_http_redirected_to_https(haproxy, pki):
    apply(haproxy, https_farm(pki))
    answer = haproxy.get(VIP, "/a?b=1", port=80, headers={"Host": "www.example.com"})
    assert answer.status == 301 and answer.headers["Location"] == "https://www.example.com/a?b=1"


def test_backends_over_tls(haproxy, pki, tmp_path):
    lab = haproxy.lab
    leaf = certs.issue("b3.backend", pki["root"], names=("b3.backend",))
    (tmp_path / "c.pem").write_text(leaf.pem)
    (tmp_path / "k.pem").write_text(leaf.key_pem)
    proc = lab.spawn_server(
        "b3", "", "--tls-port", "8443", "--cert", str(tmp_path / "c.pem"), "--key", str(tmp_path / "k.pem")
    )
    try:
        farm = routing_farm(services=(ServiceSpec(30, "tls", servers=servers("b3", port=8443, tls=True)),))
        apply(haproxy, farm)
        deadline = time.monotonic() + 10
        while (answer := haproxy.get(VIP, "/", headers={"Host": "x"})).status != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert answer.status == 200 and answer.backend == "b3" and answer.json()["port"] == 8443
    finally:
        proc.kill()
        proc.wait(timeout=5)


class Load:
    """Clients opening one connection per request without pause, in the client namespace, counting failures."""

    def __init__(self, haproxy: HAProxyLab, threads: int = 4, path: str = "/", host: str = "x"):
        self.haproxy, self.path, self.host = haproxy, path, host
        self.stop = threading.Event()
        self.ok = 0
        self.errors: list[str] = []
        self.backends: Counter = Counter()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run) for _ in range(threads)]

    def _run(self) -> None:
        def loop():
            while not self.stop.is_set():
                try:
                    answer = request(VIP, 80, self.path, {"Host": self.host})
                    with self.lock:
                        if answer.status == 200:
                            self.ok += 1
                            self.backends[answer.backend] += 1
                        else:
                            self.errors.append(f"status {answer.status}")
                except Exception as exc:  # every failure counts
                    with self.lock:
                        self.errors.append(repr(exc))

        run_in_netns(self.haproxy.lab.client, loop)

    def __enter__(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for t in self.threads:
            t.join()


def test_hundred_hitless_reloads_under_load(haproxy):
    farm = routing_farm(services=(ServiceSpec(40, "all", servers=servers("b1", "b2", "b3")),))
    apply(haproxy, farm)
    first_master = haproxy.engine.cli.processes().master_pid
    with Load(haproxy) as load:
        for i in range(100):
            # A structural change each time (a header value), so the engine reloads.
            outcome = apply(haproxy, dataclasses.replace(farm, headers=(HeaderRule("request", "X-Gen", str(i)),)))
            assert outcome.reloaded
    processes = haproxy.engine.cli.processes()
    assert processes.master_pid == first_master and processes.failed == 0
    assert load.errors == [] and load.ok > 200, (load.ok, load.errors[:5])
    assert haproxy.get(VIP, headers={"Host": "x"}).json()["headers"]["x-gen"] == "99"


def test_drain_without_failed_requests_and_without_reload(haproxy):
    farm = routing_farm(services=(ServiceSpec(50, "all", servers=servers("b1", "b2", "b3")),))
    apply(haproxy, farm)
    worker = haproxy.engine.cli.processes().current_worker
    drained = dataclasses.replace(
        farm, services=(ServiceSpec(50, "all", servers=(*servers("b1", state="drain"), *servers("b2", "b3"))),)
    )
    with Load(haproxy) as load:
        time.sleep(0.5)
        outcome = apply(haproxy, drained)
        time.sleep(0.3)  # requests already sent to b1 finish
        before = dict(load.backends)
        time.sleep(1.0)
        after = dict(load.backends)
    assert not outcome.reloaded and outcome.runtime_commands == ["s50/b1 weight 0 state drain maxconn 0"]
    assert haproxy.engine.cli.processes().current_worker == worker
    assert load.errors == []
    assert after.get("b1", 0) == before.get("b1", 0)  # no new request reached the drained backend
    assert after["b2"] > before["b2"] and after["b3"] > before["b3"]
    row = haproxy.engine.cli.servers()[("s50", "b1")]
    assert row["status"] == "DRAIN"


def test_capacity_changed_live_queues_beyond_it(haproxy):
    """A backend declares 2 sessions: 8 concurrent slow requests all succeed, at most 2 reach it at once, the
    rest wait in HAProxy's queue; then the capacity becomes 4 with no reload."""
    service = ServiceSpec(60, "cap", queue_timeout=10, servers=servers("b1", capacity=2))
    farm = routing_farm(services=(service,))
    apply(haproxy, farm)
    worker = haproxy.engine.cli.processes().current_worker

    def burst(n: int) -> list[int]:
        results: list[int] = []
        threads = [
            threading.Thread(
                target=lambda: results.append(
                    run_in_netns(haproxy.lab.client, lambda: request(VIP, 80, "/sleep/300", {"Host": "x"})).status
                )
            )
            for _ in range(n)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return results

    assert burst(8) == [200] * 8
    row = haproxy.engine.cli.servers()[("s60", "b1")]
    assert row["slim"] == "2" and int(row["smax"]) == 2
    backend = next(r for r in haproxy.engine.cli.stats() if r["pxname"] == "s60" and r["svname"] == "BACKEND")
    assert int(backend["qmax"]) >= 4  # the others waited at the LB, not at the service
    outcome = apply(haproxy, routing_farm(services=(dataclasses.replace(service, servers=servers("b1", capacity=4)),)))
    assert not outcome.reloaded and haproxy.engine.cli.processes().current_worker == worker
    assert haproxy.engine.cli.servers()[("s60", "b1")]["slim"] == "4"
    assert burst(8) == [200] * 8
    assert int(haproxy.engine.cli.servers()[("s60", "b1")]["smax"]) == 4


def test_statistics_for_the_collector(haproxy):
    """collector/haproxy_stats.py on HAProxy's own rows: requests/s, responses by class, sessions against capacity."""
    from collector import haproxy_stats as stats

    service = ServiceSpec(70, "stats", queue_timeout=10, servers=servers("b1", capacity=3) + servers("b2"))
    apply(haproxy, routing_farm(services=(service,)))
    before, started = stats.index(haproxy.engine.cli.stats()), time.monotonic()
    for _ in range(10):
        assert haproxy.get(VIP, "/", headers={"Host": "x"}).status == 200
    assert haproxy.get(VIP, "/old/a", headers={"Host": "x"}).status == 301
    now = stats.index(haproxy.engine.cli.stats())
    seconds = time.monotonic() - started
    entries, errors = stats.farm_entries(now, before, seconds, {"s70": 1})
    assert errors == {}
    entry = entries[1]
    assert entry["requests"] == round(11 / seconds, 1)
    assert entry["responses_2xx"] == round(10 / seconds, 1) and entry["responses_3xx"] == round(1 / seconds, 1)
    assert entry["responses_5xx"] == 0 and entry["queue"] == 0
    b1, b2 = entry["backends"]["1"], entry["backends"]["2"]
    assert b1["capacity"] == 3 and b2["capacity"] is None and b1["sessions"] == 0 and b1["enabled"]
    assert b1["new_conns"] + b2["new_conns"] > 0
    assert stats.farm_entries(now, {}, 0, {"s70": 1})[0][1]["requests"] is None  # first reading: no rate


def test_source_and_header_persistence_and_hash_schedulers(haproxy):
    by_source = ServiceSpec(81, "src", persistence="source", persistence_ttl=60, servers=servers("b1", "b2", "b3"))
    apply(haproxy, routing_farm(services=(by_source,)))
    assert len({haproxy.get(VIP, "/", headers={"Host": "x"}).backend for _ in range(9)}) == 1  # one client
    by_header = ServiceSpec(82, "hdr", persistence="header", persistence_header="X-Session", persistence_ttl=60,
                            servers=servers("b1", "b2", "b3"))  # fmt: skip
    apply(haproxy, routing_farm(services=(by_header,)))
    for session in ("alice", "bob", "carol"):
        seen = {haproxy.get(VIP, "/", headers={"Host": "x", "X-Session": session}).backend for _ in range(5)}
        assert len(seen) == 1, (session, seen)
    by_uri = ServiceSpec(83, "uri", scheduler="uri", servers=servers("b1", "b2", "b3"))
    apply(haproxy, routing_farm(services=(by_uri,)))
    for path in ("/a", "/b/c", "/d?e=1"):
        assert len({haproxy.get(VIP, path, headers={"Host": "x"}).backend for _ in range(4)}) == 1
    assert len({haproxy.get(VIP, f"/p{i}", headers={"Host": "x"}).backend for i in range(30)}) > 1


def test_http2_request_and_websocket_upgrade(haproxy, pki, tmp_path):
    """curl speaks HTTP/2 to the farm (h2 by ALPN, HTTP/1.1 to the backend); a WebSocket upgrade is tunnelled
    (HAProxy checks the handshake: the backend's Sec-WebSocket-Accept must match the key)."""
    lab = haproxy.lab
    apply(haproxy, https_farm(pki))
    (tmp_path / "ca.pem").write_text(pki["root"].pem)
    out = lab.ns(lab.client, "curl", "-s", "--http2", "--cacert", str(tmp_path / "ca.pem"), "-o", "/dev/null",
                 "-w", "%{http_version} %{http_code}", "--resolve", f"www.example.com:443:{VIP}",
                 "https://www.example.com/").stdout  # fmt: skip
    assert out == "2 200"
    # A WebSocket-style upgrade: the backend answers 101 and echoes; HAProxy keeps the tunnel open.
    script = (
        "import socket\n"
        "s=socket.socket(socket.AF_INET6); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        "s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0); s.bind(('::', 9001)); s.listen(5)\n"
        "while True:\n"
        "    c,_=s.accept(); h=b''\n"
        "    while b'\\r\\n\\r\\n' not in h: h+=c.recv(4096)\n"
        "    c.sendall(b'HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: websocket\\r\\n'\n"
        "              b'Connection: Upgrade\\r\\n'\n"
        "              b'Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\\r\\n\\r\\n')\n"
        "    while (d:=c.recv(4096)): c.sendall(d[::-1])\n"
        "    c.close()\n"
    )
    server = subprocess.Popen(["ip", "netns", "exec", lab.backends["b3"], sys.executable, "-c", script])
    try:
        apply(haproxy, routing_farm(services=(ServiceSpec(84, "ws", servers=servers("b3", port=9001)),)))
        time.sleep(0.3)

        def upgrade():
            sock = socket.create_connection((VIP, 80), timeout=5)
            key = b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
            sock.sendall(b"GET /chat HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" + key)
            head = b""
            while b"\r\n\r\n" not in head:
                head += sock.recv(4096)
            answers = []
            for word in (b"hello", b"lbweb"):
                sock.sendall(word)
                answers.append(sock.recv(4096))
            sock.close()
            return head.split(b"\r\n")[0], answers

        status, answers = run_in_netns(lab.client, upgrade)
        assert status == b"HTTP/1.1 101 Switching Protocols" and answers == [b"olleh", b"bewbl"]
    finally:
        server.kill()
        server.wait(timeout=5)
