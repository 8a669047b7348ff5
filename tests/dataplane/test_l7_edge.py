"""Issue 43, parts 3 and 4, on the real HAProxy in namespaces of this module's own (tag ``lbhe<pid>``): a backend
that starts failing mid-run (the share of client errors before and after, and the time until HAProxy has it out,
with no active check), slow start, healthd taking HAProxy's passive verdict with its reason, the PROXY protocol v2
read by nginx (Debian's, ``proxy_protocol``), and a listener that takes the PROXY protocol from trusted load
balancers only. The figures go to ``test-output/l7_edge_figures.json``.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from compiler.haproxy.spec import EngineSpec, FarmSpec, ServerSpec, ServiceSpec
from tests.conftest import OUTPUT
from tests.support.l7_lab import HAProxyLab
from tests.support.lab import HERE, Lab, backend4, run_in_netns, wait_listening

VIP = "198.18.100.1"
FLAKY_PORT = 8090
NGINX_PORT = 8091
FIGURES: dict[str, dict] = {}


def start_flaky(lab: Lab, name: str) -> subprocess.Popen:
    proc = subprocess.Popen(
        ["ip", "netns", "exec", lab.backends[name], sys.executable, str(HERE / "lab_flaky_server.py"), name]
        + [backend4(name), str(FLAKY_PORT)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    lab.servers.append(proc)  # Lab.destroy stops it
    wait_listening(lab.lb, backend4(name), FLAKY_PORT)
    return proc


@pytest.fixture(scope="module")
def edge_lab(tmp_path_factory):
    lab = Lab(tag=f"lbhe{os.getpid() % 10000}").build()
    lab.flaky = {name: start_flaky(lab, name) for name in lab.backends}
    haproxy = HAProxyLab(lab, tmp_path_factory.mktemp("edge-haproxy")).start()
    yield haproxy
    haproxy.stop()
    lab.destroy()
    if FIGURES:
        OUTPUT.mkdir(exist_ok=True)
        (OUTPUT / "l7_edge_figures.json").write_text(json.dumps(FIGURES, indent=2) + "\n")


def fail(lab: Lab, name: str, failing: bool = True) -> None:
    """Backend ``name`` starts (or stops) answering 503, told straight from the LB's namespace."""

    def call() -> None:
        conn = http.client.HTTPConnection(backend4(name), FLAKY_PORT, timeout=3)
        conn.request("PUT" if failing else "DELETE", "/lbweb-fail")
        assert conn.getresponse().status == 200
        conn.close()

    run_in_netns(lab.lb, call)


def flaky_servers(**options) -> tuple[ServerSpec, ...]:
    return tuple(ServerSpec(i, backend4(f"b{i}"), FLAKY_PORT, **options) for i in (1, 2, 3))


def one_farm(servers, **options) -> EngineSpec:
    return EngineSpec((FarmSpec(1, "edge", "http", VIP, (80,), services=(ServiceSpec(10, "app", servers=servers),),
                                **options),))  # fmt: skip


class Client(threading.Thread):
    """Requests one after the other from the client namespace, each on a new connection: (time, status) of each,
    status 0 for a request that got no answer."""

    def __init__(self, lab: Lab, port: int = 80):
        super().__init__(daemon=True)
        self.lab, self.port = lab, port
        self.results: list[tuple[float, int]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        from tests.support.lab import enter_netns

        enter_netns(self.lab.client)
        while not self.stop.is_set():
            try:
                conn = http.client.HTTPConnection(VIP, self.port, timeout=3)
                conn.request("GET", "/", headers={"Connection": "close"})
                answer = conn.getresponse()
                answer.read()
                status = answer.status
                conn.close()
            except OSError:
                status = 0
            self.results.append((time.monotonic(), status))


def _share(results: list[tuple[float, int]]) -> dict:
    errors = sum(1 for _, status in results if status != 200)
    return {"requests": len(results), "errors": errors, "error_share": round(errors / max(len(results), 1), 4)}


def crash(lab: Lab, name: str, crashed: bool = True) -> None:
    """Backend ``name``'s server dies (its host refuses connections: TCP reset), or starts again."""
    if crashed:
        proc = lab.flaky.pop(name)
        proc.kill()
        proc.wait(timeout=5)
        lab.servers.remove(proc)
    else:
        lab.flaky[name] = start_flaky(lab, name)


def failing_mid_run(haproxy: HAProxyLab, spec: EngineSpec, before: float = 1.5, after: float = 3.0, how=fail) -> dict:
    """b1 starts failing after ``before`` seconds of traffic (``how``: answering 503, or its server dies): the
    client's errors before and after, and how long until HAProxy has b1 out (its status, polled every 5 ms), with
    no active check running."""
    from collector import haproxy_stats

    haproxy.engine.apply(spec)
    client = Client(haproxy.lab)
    client.start()
    try:
        time.sleep(before)
        rows_before = haproxy_stats.index(haproxy.engine.cli.stats())
        started = time.monotonic()
        how(haproxy.lab, "b1")
        out_at, reason = None, ""
        while time.monotonic() < started + after:
            if out_at is None:
                row = haproxy.engine.cli.servers().get(("s10", "b1"), {})
                if row.get("status", "").startswith("DOWN"):
                    out_at, reason = time.monotonic(), row.get("last_chk", "")
            time.sleep(0.005)
    finally:
        client.stop.set()
        client.join(timeout=10)
        retries = haproxy.engine.cli.servers().get(("s10", "b1"), {}).get("wretr")
        rows_after, seconds = haproxy_stats.index(haproxy.engine.cli.stats()), time.monotonic() - started
        how(haproxy.lab, "b1", False)
    entries, _errors = haproxy_stats.farm_entries(rows_after, rows_before, seconds, {"s10": 1})
    results = client.results
    return {
        "before": _share([r for r in results if r[0] < started]),
        "after": _share([r for r in results if r[0] >= started]),
        "seconds_until_out": round(out_at - started, 3) if out_at else None,
        "errors_until_out": sum(1 for t, s in results if started <= t < (out_at or 1e18) and s != 200),
        "reason": reason,
        "retries_from_b1": int(retries) if retries else 0,
        "collector_retries_per_second": entries[1]["retries"],
        "collector_redispatches_per_second": entries[1]["redispatches"],
    }


def test_a_backend_that_starts_failing_is_taken_out_and_its_errors_retried(edge_lab):
    plain = failing_mid_run(edge_lab, one_farm(flaky_servers()))
    passive = failing_mid_run(edge_lab, one_farm(flaky_servers(passive_errors=3)))
    retried = failing_mid_run(
        edge_lab,
        one_farm(flaky_servers(passive_errors=3), retry_on=("conn-failure", "empty-response", "503"), redispatch=True),
    )
    crashed = failing_mid_run(
        edge_lab,
        one_farm(flaky_servers(passive_errors=3), retry_on=("conn-failure", "empty-response"), redispatch=True),
        how=crash,
    )
    FIGURES["failing_backend"] = {
        "503, no passive health": plain, "503, passive_errors 3": passive,
        "503, passive_errors 3, retry-on 503": retried,
        "server dies, passive_errors 3, retry-on conn-failure empty-response": crashed,
    }  # fmt: skip
    print(json.dumps(FIGURES["failing_backend"], indent=2))
    for run in (plain, passive, retried, crashed):
        assert run["before"]["errors"] == 0 and run["before"]["requests"] > 20
    # Without passive health b1 stays in rotation: a third of the requests fail for as long as it fails.
    assert plain["seconds_until_out"] is None and 0.25 < plain["after"]["error_share"] < 0.42
    # Passive health: out after 3 failed requests, in well under a second, no check involved; then no error.
    assert passive["seconds_until_out"] is not None and passive["seconds_until_out"] < 1.0
    assert "Detected 3 consecutive errors" in passive["reason"]
    assert passive["after"]["errors"] == 3
    # With retries of 503 (an idempotent GET) on another backend, the client sees none of b1's failures. HAProxy
    # (2.6) does not count a response it retries against the server's passive health: b1 stays in rotation, and
    # each request it gets costs one retry.
    assert retried["after"]["errors"] == 0 and retried["seconds_until_out"] is None
    assert retried["retries_from_b1"] > 0.25 * retried["after"]["requests"]
    assert retried["collector_retries_per_second"] > 5 and retried["collector_redispatches_per_second"] > 5
    assert plain["collector_retries_per_second"] == 0
    # A server that dies: each refused connection is retried elsewhere and counted, so b1 is out after 3 of them.
    # A request it had in hand when it died is retried as an empty response (a GET); at most that one is lost, if
    # HAProxy reads the reset as something else.
    assert crashed["after"]["errors"] <= 1 and crashed["seconds_until_out"] is not None
    assert crashed["seconds_until_out"] < 1.0


def test_a_post_is_not_retried_after_a_response(edge_lab):
    """retry-on 503 sends again only idempotent requests: a POST that got a 503 is not sent twice."""
    edge_lab.engine.apply(one_farm(flaky_servers()[:1], retry_on=("503",), redispatch=True))
    fail(edge_lab.lab, "b1")
    try:

        def post() -> tuple[int, int]:
            conn = http.client.HTTPConnection(VIP, 80, timeout=3)
            conn.request("POST", "/", body=b"x=1", headers={"Connection": "close"})
            answer = conn.getresponse()
            return answer.status, json.loads(answer.read())["posts"]

        first = run_in_netns(edge_lab.lab.client, post)
        assert first[0] == 503 and run_in_netns(edge_lab.lab.client, post) == (503, first[1] + 1)
        stats = edge_lab.engine.cli.servers()[("s10", "b1")]
        assert stats["wretr"] == "0"
    finally:
        fail(edge_lab.lab, "b1", False)


def test_slowstart_ramps_a_returning_backend_up_to_its_weight(edge_lab):
    spec = one_farm(flaky_servers(weight=10, slowstart=3))
    edge_lab.engine.apply(spec)
    edge_lab.engine.cli.set_state("s10", "b1", "maint")
    edge_lab.engine.cli.set_state("s10", "b1", "ready")  # healthd saw it come back, or the operator enabled it
    weights = []
    for _ in range(8):
        weights.append(int(edge_lab.engine.cli.servers()[("s10", "b1")]["weight"]))
        time.sleep(0.5)
    FIGURES["slowstart_3s_weights_every_0.5s"] = weights
    assert weights[0] < 5 and weights == sorted(weights) and weights[-1] == 10


# -- healthd takes HAProxy's passive verdict, with its reason --------------------------------------------------


@pytest.mark.django_db
def test_healthd_records_haproxys_passive_verdict_with_its_reason(edge_lab, admin_user):
    from farms import services
    from farms.health_services import health_record
    from farms.models import Backend
    from healthd.daemon import HealthDaemon, ProbeLoop
    from healthd.state import BackendHealth
    from healthd.targets import load_targets, passive_backends
    from l7 import services as l7
    from l7.specs import snapshot

    farm = services.farm_create(name="edge", vip=VIP, ports="80", mode="http", actor=admin_user)
    rows = [services.backend_create(farm=farm, address=backend4(n), port=FLAKY_PORT) for n in ("b1", "b2")]
    for row in rows:
        l7.backend_options_update(backend=row, passive_errors=3, slowstart=2)
    edge_lab.engine.apply(snapshot()[1])
    name = (f"f{farm.pk}-default", f"b{rows[0].pk}")
    fail(edge_lab.lab, "b1")
    try:
        for _ in range(12):
            edge_lab.get(VIP)
        assert edge_lab.engine.cli.servers()[name]["check_status"] == "HANA"
        daemon = HealthDaemon(haproxy_socket=edge_lab.socket)
        try:
            daemon.passive_ids = passive_backends()
            _generation, targets, recorded = load_targets()
            for backend_id, target in targets.items():
                state = BackendHealth(recorded[backend_id], target.check.rise, target.check.fall)
                daemon.loops[backend_id] = ProbeLoop(target, state, task=None)
            daemon.passive_verdicts(daemon.passive.downs())
            assert health_record(daemon._drain()) == [rows[0].pk]
        finally:
            daemon.pinger.close()
            daemon.own_network.close()
            daemon._db.shutdown()
            daemon._net.shutdown()
        backend = Backend.objects.get(pk=rows[0].pk)
        assert backend.health == "down"
        assert backend.health_reason.startswith("HAProxy passive health: Detected 3 consecutive errors")
        assert daemon.loops[rows[0].pk].state.health == "down"  # healthd's own check brings it back (rise)
        edge_lab.engine.apply(snapshot()[1])  # the apply healthd's transition asked for
        assert edge_lab.engine.cli.servers()[name]["status"] == "MAINT"
    finally:
        fail(edge_lab.lab, "b1", False)


# -- the PROXY protocol -----------------------------------------------------------------------------------------

NGINX = """\
daemon off;
master_process off;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 64; }}
http {{
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    log_format proxied '$proxy_protocol_addr $remote_addr "$request"';
    access_log {dir}/access.log proxied;
    server {{
        listen {address}:{port} proxy_protocol;
        location / {{
            default_type text/plain;
            return 200 "client $proxy_protocol_addr via $remote_addr\\n";
        }}
    }}
}}
"""


@pytest.fixture(scope="module")
def nginx(edge_lab, tmp_path_factory):
    """nginx on b3, reading the PROXY protocol (and nothing else) on its port, logging the client it names."""
    directory = tmp_path_factory.mktemp("edge-nginx")
    (directory / "nginx.conf").write_text(NGINX.format(dir=directory, address=backend4("b3"), port=NGINX_PORT))
    proc = subprocess.Popen(
        ["ip", "netns", "exec", edge_lab.lab.backends["b3"], "nginx", "-p", str(directory), "-c"]
        + [str(directory / "nginx.conf")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    edge_lab.lab.servers.append(proc)
    wait_listening(edge_lab.lab.lb, backend4("b3"), NGINX_PORT)
    yield directory
    proc.terminate()
    proc.wait(timeout=10)
    edge_lab.lab.servers.remove(proc)


def _body(answer) -> str:
    return answer.body.decode().strip()


def test_send_proxy_v2_gives_the_backend_the_clients_address(edge_lab, nginx):
    server = ServerSpec(3, backend4("b3"), NGINX_PORT, send_proxy=True)
    edge_lab.engine.apply(one_farm((server,)))
    answer = edge_lab.get(VIP, "/hello")
    assert answer.status == 200 and _body(answer) == "client 198.18.0.2 via 198.18.1.1"
    assert '198.18.0.2 198.18.1.1 "GET /hello HTTP/1.1"' in (nginx / "access.log").read_text()


def _front_and_back(trusted: tuple[str, ...]) -> EngineSpec:
    """Farm 2 (port 81) takes the PROXY protocol from ``trusted`` and hands the client on to nginx by PROXY v2;
    farm 1 (port 80) is the load balancer in front of it: it sends PROXY v2 to farm 2 from the VIP itself."""
    front = FarmSpec(1, "front", "http", VIP, (80,), forwarded_headers=False, services=(
        ServiceSpec(10, "app", servers=(ServerSpec(1, VIP, 81, send_proxy=True),)),))  # fmt: skip
    back = FarmSpec(2, "behind", "http", VIP, (81,), accept_proxy=True, proxy_trusted=trusted, services=(
        ServiceSpec(20, "app", servers=(ServerSpec(3, backend4("b3"), NGINX_PORT, send_proxy=True),)),))  # fmt: skip
    return EngineSpec((front, back))


def test_accept_proxy_from_a_trusted_load_balancer_only(edge_lab, nginx):
    edge_lab.engine.apply(_front_and_back((f"{VIP}/32",)))
    # Through the load balancer in front: the farm, and nginx behind it, see the client, not the front LB.
    answer = edge_lab.get(VIP, "/chain", port=80)
    assert answer.status == 200 and _body(answer) == "client 198.18.0.2 via 198.18.1.1"
    # Straight from the client, which is no trusted LB: refused before a byte is read.
    with pytest.raises((ConnectionError, http.client.RemoteDisconnected, socket.timeout)):
        edge_lab.get(VIP, "/direct", port=81)
    # The client trusted, but without a PROXY header: HAProxy closes the connection, nothing reaches nginx.
    edge_lab.engine.apply(_front_and_back(("198.18.0.0/24",)))
    with pytest.raises((ConnectionError, http.client.RemoteDisconnected, socket.timeout)):
        edge_lab.get(VIP, "/no-header", port=81)
    log = (nginx / "access.log").read_text()
    assert "/chain" in log and "/direct" not in log and "/no-header" not in log
