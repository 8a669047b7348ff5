"""Health checks for real: healthd in the LB namespace probes real servers; the worker moves the rules.

Servers are stopped (TCP reset), blackholed or made to lose one probe with
nftables in *their own* namespaces; traffic comes from the client namespace.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from healthd import prober as prober_protocol
from tests.conftest import OUTPUT
from tests.dataplane.test_dataplane import backend_id, make_farm
from tests.support import SUPPORT
from tests.support.lab import KeepAlive, _request, backend4, run_in_netns, vip4
from tests.support.privileges import CAP_NET_RAW, ensure_system_user, owned_by, prober_socket_dir, proc_status, setpriv
from tests.support.stack import Healthd, Prober, RedisServer

pytestmark = [pytest.mark.dataplane, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def prober(lab, request, monkeypatch):
    """The command prober in the LB namespace, as the supervisor starts it: user lbweb-probe, empty environment."""
    ensure_system_user("lbweb")
    ensure_system_user("lbweb-probe")
    with prober_socket_dir(lab.tag) as directory:
        socket_path = directory / "prober.sock"
        log = OUTPUT / "logs" / f"prober-{request.node.name}.log"
        proc = Prober(lab.lb, {}, log, socket_path, setpriv("lbweb-probe")).start()
        monkeypatch.setenv(prober_protocol.SOCKET_ENV, str(socket_path))  # for probes run in this process
        yield proc
        proc.stop()


@pytest.fixture
def healthd(lab, worker_env, request, settings, redis_server, prober):
    """Start healthd in the LB namespace (as often as a test likes); everything is stopped and restored after."""
    settings.REDIS_URL = redis_server.url  # the API reads healthd's heartbeat from the test Redis
    settings.LBWEB_HEALTHD_STALE_SECONDS = 2
    started: list[Healthd] = []

    def start(env: dict[str, str] | None = None, run_as: list[str] | None = None) -> Healthd:
        env = {**worker_env, prober_protocol.SOCKET_ENV: str(prober.socket), **(env or {})}
        proc = Healthd(lab.lb, env, OUTPUT / "logs" / f"healthd-{request.node.name}.log", run_as).start()
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.stop()
    lab.ensure_servers()


def wait_health(api, backend: int, health: str, timeout: float = 10) -> float:
    """Poll the API until the backend has ``health``; returns the monotonic time it was seen."""
    deadline = time.monotonic() + timeout
    while True:
        current = api.get(f"backends/{backend}/")
        if current["health"] == health:
            return time.monotonic()
        assert time.monotonic() < deadline, f"backend {backend} still {current['health']}: {current['health_reason']}"
        time.sleep(0.02)


def check(api, farm: dict, **fields) -> dict:
    return api.post("health-checks/", {"farm": farm["id"], **fields})


@dataclass
class Attempt:
    started: float
    backend: str | None
    error: str = ""
    ended: float = 0.0


class Traffic:
    """New connections from the client to a VIP, one after another, until stopped."""

    def __init__(self, lab, vip: str):
        self.attempts: list[Attempt] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=run_in_netns, args=(lab.client, lambda: self._run(vip)))
        self._thread.start()

    def _run(self, vip: str) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                answer = _request(socket.create_connection((vip, 80), timeout=1), close=True)
                self.attempts.append(Attempt(started, answer["backend"], ended=time.monotonic()))
            except OSError as exc:
                self.attempts.append(Attempt(started, None, repr(exc), ended=time.monotonic()))
            time.sleep(0.005)

    def stop(self) -> list[Attempt]:
        self._stop.set()
        self._thread.join()
        return self.attempts


@dataclass
class Failure:
    """When a backend failed, when healthd marked it down, when the rule left the kernel, and the client's attempts."""

    failed: float
    marked: float
    applied: float
    attempts: list[Attempt]

    def after_apply(self) -> list[Attempt]:
        return [a for a in self.attempts if a.started > self.applied]


def fail_under_traffic(api, lab, farm: dict, victim: int, vip: str, fail, repair=lambda: None) -> Failure:
    """Open connections to ``vip`` while ``fail()`` breaks backend ``victim``, until one second after the apply."""
    traffic = Traffic(lab, vip)
    try:
        time.sleep(0.3)
        failed = time.monotonic()
        fail()
        marked = wait_health(api, victim, "down")
        api.wait_applied(farm["id"])
        applied = time.monotonic()
        time.sleep(1.0)
    finally:
        attempts = traffic.stop()
        repair()
    to_ms = {"marked down": marked - failed, "rule gone": applied - failed}
    print("backend failed -> " + ", ".join(f"{what} {seconds * 1000:.0f} ms" for what, seconds in to_ms.items()))
    return Failure(failed, marked, applied, attempts)


def test_a_dead_backend_leaves_within_one_interval_traffic_shifts_and_it_returns_after_rise(api, worker, healthd, lab):
    interval, rise, fall = 1.0, 2, 3
    farm = make_farm(api, "hc-tcp", vip4(80))
    check(api, farm, type="tcp", interval=interval, timeout=0.5, rise=rise, fall=fall)
    healthd()
    victim = backend_id(farm, backend4("b2"))
    for b in farm["backends"]:
        wait_health(api, b["id"], "up")
    failure = fail_under_traffic(api, lab, farm, victim, vip4(80), lambda: lab.stop_server("b2"))
    detection = failure.marked - failure.failed
    # one interval, the confirmation probes (side by side), the write; generous for a shared 2-core machine
    assert detection <= interval + (fall - 1) * 0.05 + 0.6, detection
    after = failure.after_apply()
    assert len(after) > 20 and all(a.backend in ("b1", "b3") for a in after), [a for a in after if a.error][:3]
    # every attempt over before the backend was stopped was answered, by each backend (one still in flight to b2
    # when its server stops loses its answer: that is the failure, not before it)
    assert {a.backend for a in failure.attempts if a.ended < failure.failed} == {"b1", "b2", "b3"}
    event = api.get(f"health-events/?backend={victim}")["results"][0]
    assert (event["previous"], event["current"]) == ("up", "down") and "refused" in event["reason"], event
    assert api.get(f"farms/{farm['id']}/")["traffic"] == "balanced"

    restarted = time.monotonic()
    lab.start_server("b2")
    back = wait_health(api, victim, "up")
    assert back - restarted >= (rise - 1) * interval * 0.9, "came back before `rise` successes"
    api.wait_applied(farm["id"])
    assert {a["backend"] for a in lab.http_get(vip4(80), 80, count=6)} == {"b1", "b2", "b3"}
    assert [e["current"] for e in api.get(f"health-events/?backend={victim}")["results"]] == ["up", "down", "up"]


def test_a_silent_backend_leaves_one_timeout_after_its_first_unanswered_probe_whatever_fall_is(
    api, worker, healthd, lab
):
    """No reset, no answer: the confirmations run side by side, so ``fall`` does not multiply the timeout."""
    interval, timeout, fall = 1.0, 0.3, 5  # one confirmation after another would take >= 5 x 0.3 s after the probe
    farm = make_farm(api, "hc-silent", vip4(125))
    check(api, farm, type="tcp", interval=interval, timeout=timeout, rise=2, fall=fall)
    healthd()
    victim = backend_id(farm, backend4("b2"))
    for b in farm["backends"]:
        wait_health(api, b["id"], "up")
    ns = lab.backends["b2"]
    nft_in(lab, ns, "add table inet hole; add chain inet hole input { type filter hook input priority 0; }")
    failure = fail_under_traffic(
        api,
        lab,
        farm,
        victim,
        vip4(125),
        fail=lambda: nft_in(lab, ns, "add rule inet hole input tcp dport 80 counter drop"),
        repair=lambda: lab.ns(ns, "nft", "delete", "table", "inet", "hole", check=False),
    )
    detection = failure.marked - failure.failed
    # at most one interval until the next probe, its timeout, and the write (generous for a loaded machine)
    assert detection <= interval + timeout + 0.35, detection
    after = failure.after_apply()
    assert len(after) > 20 and all(a.backend in ("b1", "b3") for a in after), [a for a in after if a.error][:3]
    event = api.get(f"health-events/?backend={victim}")["results"][0]
    assert event["current"] == "down" and "no answer within" in event["reason"], event


def test_probes_confirm_a_failure_side_by_side_within_one_timeout(prober):
    """probe_round with real commands: a hanging check costs one timeout, not ``fall`` of them."""
    import asyncio

    from healthd.icmp import Pinger
    from healthd.probes import CheckSpec, Target
    from healthd.rounds import probe_round

    def run(command: str, confirmations: int) -> tuple[list, float]:
        target = Target(1, 1, "198.18.1.11", 80, CheckSpec(type="command", timeout=0.4, command=command))

        async def go():
            started = asyncio.get_running_loop().time()
            results = await probe_round(target, Pinger(), confirmations)
            return results, asyncio.get_running_loop().time() - started

        return asyncio.run(go())

    results, took = run("sleep 5", confirmations=2)
    assert [r.ok for r in results] == [False, False, False] and took < 0.4 + 0.3, (results, took)
    assert all("killed" in r.reason for r in results)
    results, took = run("false", confirmations=2)
    assert [r.ok for r in results] == [False, False, False] and took < 0.3, (results, took)
    results, _took = run("true", confirmations=2)
    assert [r.ok for r in results] == [True]  # a healthy answer needs no confirmation


def test_healthd_losing_its_own_network_marks_nothing_down_and_says_so(api, worker, healthd, lab, admin_user):
    from django.test import Client

    browser = Client()
    browser.force_login(admin_user)
    farm = make_farm(api, "hc-ownnet", vip4(126))
    check(api, farm, type="tcp", interval=0.5, timeout=0.3, rise=2, fall=2)
    healthd()
    for b in farm["backends"]:
        wait_health(api, b["id"], "up")
    events = api.get(f"health-events/?farm={farm['id']}")["count"]
    ports = list(lab.backends)  # the LB's bridge ports, one per backend: all down = br0 has no carrier
    try:
        for port in ports:
            lab.ns(lab.lb, "ip", "link", "set", port, "down")
        time.sleep(2.0)  # four intervals: twice what fall needs
        status = api.get("health-status/")
        assert status["state"] == "impaired" and "br0" in status["detail"] and "no carrier" in status["detail"], status
        summary = api.get("metrics/summary/")["healthd"]
        assert summary["state"] == "impaired", summary
        page = browser.get("/").content.decode()
        assert "Health checking impaired" in page and "no carrier" in page, page
        for port in ports:
            lab.ns(lab.lb, "ip", "link", "set", port, "up")
        # the route to the backends goes away: the kernel refuses the probes at once
        lab.ns(lab.lb, "ip", "route", "del", "198.18.1.0/24", "dev", "br0")
        time.sleep(1.5)
        status = api.get("health-status/")
        assert status["state"] == "impaired" and "unreachable" in status["detail"], status
    finally:
        for port in ports:
            lab.ns(lab.lb, "ip", "link", "set", port, "up")
        lab.ns(lab.lb, "ip", "route", "replace", "198.18.1.0/24", "dev", "br0", "proto", "kernel", "scope", "link")
    assert all(api.get(f"backends/{b['id']}/")["health"] == "up" for b in farm["backends"])
    assert api.get(f"health-events/?farm={farm['id']}")["count"] == events  # no transition was recorded
    time.sleep(2.5)  # past LBWEB_HEALTHD_STALE_SECONDS without an error of its own
    assert api.get("health-status/")["state"] == "running"
    assert {a["backend"] for a in lab.http_get(vip4(126), 80, count=6)} == {"b1", "b2", "b3"}


@pytest.fixture
def tls_files(tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        + ["-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=svc.example"]
        + ["-addext", "subjectAltName=DNS:svc.example"],
        check=True,
        capture_output=True,
    )
    return cert, key


PROBE_PY = "import socket, sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), 1)"
PROBE_CMD = f"{sys.executable} -c '{PROBE_PY}' {{address}} {{port}}"
SVC = {"http_host": "svc.example"}
HTTPS = {"type": "https", "port": 8443, **SVC}
UDP = {"protocol": "udp", "ports": "5353"}
CHECKS = [  # farm name, farm fields, check (None: the protocol's default), expected health, words of the reason
    ("tcp-default", {}, None, "up", "open"),
    ("tcp-closed", {}, {"type": "tcp", "port": 9}, "down", "refused"),
    ("http-host", {}, {"type": "http", **SVC, "http_body": '"host": "svc.example"'}, "up", "200"),
    ("http-status", {}, {"type": "http", "http_statuses": "204"}, "down", "status 200"),
    ("http-body", {}, {"type": "http", "http_body": "no such text"}, "down", "lacks"),
    ("https", {}, {**HTTPS, "http_body": "svc.example"}, "up", "200"),
    ("https-verify", {}, {**HTTPS, "tls_verify": True}, "down", "verify failed"),
    ("udp-echo", UDP, {"type": "udp", "udp_send": "hi", "udp_expect": "hi"}, "up", "reply"),
    ("udp-closed", {**UDP, "ports": "5354"}, {"type": "udp", "udp_send": "hi"}, "down", "refused"),
    ("icmp", {}, {"type": "icmp"}, "up", "echo reply"),
    ("command", {}, {"type": "command", "command": PROBE_CMD}, "up", "0"),
    ("command-fails", {}, {"type": "command", "command": "sh -c 'echo broken >&2; exit 3'"}, "down", "exited 3 broken"),
    ("command-hangs", {}, {"type": "command", "command": "sleep 5"}, "down", "killed"),
]


def test_every_check_type_against_real_servers(api, worker, healthd, lab, tls_files):
    cert, key = tls_files
    extra = lab.spawn_server(
        "b1", "", "--tls-port", "8443", "--cert", str(cert), "--key", str(key), "--udp-echo", "5353"
    )
    try:
        farms = {}
        for n, (name, fields, check_fields, _health, _words) in enumerate(CHECKS):
            farm = api.farm(
                name=name, vip=vip4(100 + n), **{"protocol": "tcp", "ports": "80", "mode": "dnat", **fields}
            )
            api.post("backends/", {"farm": farm["id"], "address": backend4("b1")})
            if check_fields:
                # timeouts generous enough that a loaded machine does not turn a verdict into a timeout
                check(api, farm, **{"interval": 1.0, "timeout": 0.9, "rise": 1, "fall": 2, **check_fields})
            farms[name] = api.get(f"farms/{farm['id']}/")
        lost = api.farm(name="icmp-lost", vip=vip4(99), protocol="tcp", ports="80", mode="dnat")
        api.post("backends/", {"farm": lost["id"], "address": "198.18.1.99"})  # nobody there: no echo reply
        check(api, lost, type="icmp", interval=0.5, timeout=0.3, fall=2)
        healthd()
        for name, _fields, _check, health, words in CHECKS:
            backend = farms[name]["backends"][0]["id"]
            wait_health(api, backend, health)
            reason = api.get(f"backends/{backend}/")["health_reason"]
            assert words in reason, (name, reason)
        wait_health(api, api.get(f"farms/{lost['id']}/")["backends"][0]["id"], "down")
        assert farms["tcp-default"]["health_check"]["configured"] is False
        assert farms["tcp-default"]["health_check"]["type"] == "tcp"
        # a farm whose only backend is down rejects at once, and says so
        refused = api.wait_applied(farms["http-status"]["id"])
        assert refused["traffic"] == "rejected"
        started = time.monotonic()
        with pytest.raises(ConnectionRefusedError):
            lab.connect(vip4(100 + 3), 80)
        assert time.monotonic() - started < 0.5
        assert lab.http_get(vip4(100 + 2), 80)[0]["backend"] == "b1"  # a healthy one still balances
    finally:
        extra.kill()
        extra.wait()


def test_with_every_backend_down_the_fallback_serves(api, worker, healthd, lab):
    farm = make_farm(api, "hc-fallback", vip4(120), backends=("b1", "b2"))
    api.patch(f"farms/{farm['id']}/", {"when_all_down": "fallback", "fallback_address": backend4("b3")})
    check(api, farm, type="http", http_statuses="418", interval=0.5, timeout=0.3, fall=2)  # never healthy
    healthd()
    for b in farm["backends"]:
        wait_health(api, b["id"], "down")
    farm = api.wait_applied(farm["id"])
    assert farm["traffic"] == "fallback"
    assert {a["backend"] for a in lab.http_get(vip4(120), 80, count=4)} == {"b3"}


def nft_in(lab, ns: str, script: str) -> None:
    lab.ns(ns, "nft", script)


def test_one_lost_probe_does_not_take_a_backend_down(api, worker, healthd, lab):
    farm = make_farm(api, "hc-lossy", vip4(121), backends=("b3",))
    check(api, farm, type="tcp", interval=0.5, timeout=0.3, rise=2, fall=2)
    healthd()
    victim = farm["backends"][0]["id"]
    wait_health(api, victim, "up")
    ns = lab.backends["b3"]
    # drop exactly one SYN (60 bytes): the quota matches until the packets seen reach 100 bytes
    nft_in(lab, ns, "add table inet lossy; add chain inet lossy input { type filter hook input priority 0; }")
    nft_in(lab, ns, "add rule inet lossy input tcp dport 80 tcp flags syn quota until 100 bytes counter drop")
    try:
        time.sleep(2.5)  # five intervals
        listing = lab.ns(ns, "nft", "list", "chain", "inet", "lossy", "input").stdout
    finally:
        lab.ns(ns, "nft", "delete", "table", "inet", "lossy", check=False)
    assert "counter packets 1 " in listing, listing  # one probe was lost ...
    assert api.get(f"backends/{victim}/")["health"] == "up"  # ... and the backend never left
    assert [e["current"] for e in api.get(f"health-events/?backend={victim}")["results"]] == ["up"]


def test_healthd_killed_shows_stopped_marks_nothing_down_and_restarts_from_the_recorded_health(
    api, worker, healthd, lab
):
    farm = make_farm(api, "hc-crash", vip4(122), backends=("b1", "b2"))
    check(api, farm, type="tcp", interval=0.5, timeout=0.3, rise=2, fall=2)
    daemon = healthd()
    up, down = (backend_id(farm, backend4(b)) for b in ("b1", "b2"))
    wait_health(api, up, "up")
    lab.stop_server("b2")
    wait_health(api, down, "down")
    api.wait_applied(farm["id"])
    status = api.get("health-status/")
    assert status["state"] == "running" and status["backends_checked"] >= 2, status
    daemon.kill()
    time.sleep(2.5)  # past LBWEB_HEALTHD_STALE_SECONDS
    status = api.get("health-status/")
    assert status["state"] == "stopped" and "stopped" in status["detail"], status
    assert api.get(f"backends/{up}/")["health"] == "up" and api.get(f"backends/{down}/")["health"] == "down"
    assert {a["backend"] for a in lab.http_get(vip4(122), 80, count=4)} == {"b1"}
    events = api.get(f"health-events/?farm={farm['id']}")["count"]
    healthd()
    time.sleep(1.5)  # three intervals: a restart from "unknown" would have re-recorded both
    assert api.get("health-status/")["state"] == "running"
    assert api.get(f"health-events/?farm={farm['id']}")["count"] == events
    assert api.get(f"backends/{down}/")["health"] == "down"


def conntrack_entries(lab, mark: int, address: str) -> int:
    result = lab.ns(lab.lb, "conntrack", "-L", "--mark", str(mark), "--reply-src", address, check=False)
    return len(result.stdout.splitlines())


def test_cut_connections_deletes_a_dead_backends_conntrack_entries_only_where_asked(api, worker, healthd, lab):
    cut = make_farm(api, "hc-cut", vip4(123), backends=("b3", "b1"))
    keep = make_farm(api, "hc-keep", vip4(124), backends=("b3", "b2"))
    for farm, on in ((cut, True), (keep, False)):
        check(api, farm, type="tcp", interval=0.5, timeout=0.3, fall=2, cut_connections=on)
    healthd()
    kept = {name: KeepAlive(lab, vip4(n)) for name, n in (("cut", 123), ("keep", 124))}
    ns = lab.backends["b3"]
    try:
        assert {name: k.get()["backend"] for name, k in kept.items()} == {"cut": "b3", "keep": "b3"}
        assert conntrack_entries(lab, cut["id"], backend4("b3")) == 1
        assert conntrack_entries(lab, keep["id"], backend4("b3")) == 1
        # b3's host stops answering (no reset): its established connections would hang
        nft_in(lab, ns, "add table inet hole; add chain inet hole input { type filter hook input priority 0; }")
        nft_in(lab, ns, "add rule inet hole input tcp dport 80 drop")
        wait_health(api, backend_id(cut, backend4("b3")), "down")
        api.wait_applied(cut["id"])
        deadline = time.monotonic() + 5
        while conntrack_entries(lab, cut["id"], backend4("b3")) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert conntrack_entries(lab, cut["id"], backend4("b3")) == 0
        assert conntrack_entries(lab, keep["id"], backend4("b3")) == 1  # cut_connections is off there
        started = time.monotonic()
        with pytest.raises(OSError):  # the next segment finds no connection and is reset by b1: no hang
            kept["cut"].get()
        assert time.monotonic() - started < 1
    finally:
        lab.ns(ns, "nft", "delete", "table", "inet", "hole", check=False)
        for k in kept.values():
            k.close()


IDENTITY_CMD = f"{sys.executable} {SUPPORT / 'probe_identity.py'} {{address}} {{port}}"
AS_LBWEB = [  # farm name, check, expected health, words of the reason: every probe type healthd has
    ("lbweb-tcp", {"type": "tcp"}, "up", "open"),
    ("lbweb-tcp-closed", {"type": "tcp", "port": 9}, "down", "refused"),
    ("lbweb-http", {"type": "http", **SVC, "http_body": '"host": "svc.example"'}, "up", "200"),
    ("lbweb-https", {**HTTPS, "http_body": "svc.example"}, "up", "200"),
    ("lbweb-udp", {"type": "udp", "port": 5353, "udp_send": "hi", "udp_expect": "hi"}, "up", "reply"),
    ("lbweb-icmp", {"type": "icmp"}, "up", "echo reply"),
    ("lbweb-command", {"type": "command", "command": IDENTITY_CMD}, "up", "exited 0"),
    ("lbweb-command-hangs", {"type": "command", "command": "sh -c 'sleep 30 & sleep 31'"}, "down", "killed"),
]


@pytest.fixture
def lbweb_state(transactional_db, tmp_path_factory):
    """What healthd reads, made lbweb's as on the appliance: a state directory with a Redis run by lbweb, and
    the test database (its directory and files handed to lbweb for the test, then given back)."""
    from django.db import connection

    ensure_system_user("lbweb")
    state = Path(tempfile.mkdtemp(prefix=f"lbweb-state-{os.getpid()}-"))
    entry = pwd.getpwnam("lbweb")
    os.chown(state, entry.pw_uid, entry.pw_gid)  # 0700, lbweb's, like /var/lib/lbweb
    redis = RedisServer(state, run_as=setpriv("lbweb")).start()
    database = Path(connection.settings_dict["NAME"])
    files = [database.parent, *(database.with_name(database.name + end) for end in ("", "-wal", "-shm"))]
    try:
        with owned_by("lbweb", *files):
            yield state, redis
    finally:
        redis.stop()
        shutil.rmtree(state, ignore_errors=True)


def test_healthd_as_lbweb_with_only_cap_net_raw_and_commands_as_lbweb_probe(
    api, healthd, prober, lab, tls_files, lbweb_state, settings
):
    """The appliance's privileges: healthd is lbweb with CAP_NET_RAW alone, command checks are lbweb-probe's.

    Every probe type works so; a command sees neither lbweb's user nor its environment (healthd is given
    lbweb's secrets here, the identity script fails on any variable); a prober that stops is healthd's
    own trouble: "impaired", and the backend keeps its health.
    """
    state, redis = lbweb_state
    settings.REDIS_URL = redis.url  # the API reads the heartbeat from lbweb's own Redis
    cert, key = tls_files
    extra = lab.spawn_server(
        "b1", "", "--tls-port", "8443", "--cert", str(cert), "--key", str(key), "--udp-echo", "5353"
    )
    try:
        farms = {}
        for n, (name, check_fields, _health, _words) in enumerate(AS_LBWEB):
            farm = api.farm(name=name, vip=vip4(140 + n), protocol="tcp", ports="80", mode="dnat")
            api.post("backends/", {"farm": farm["id"], "address": backend4("b1")})
            check(api, farm, **{"interval": 1.0, "timeout": 0.9, "rise": 1, "fall": 2, **check_fields})
            farms[name] = api.get(f"farms/{farm['id']}/")["backends"][0]["id"]
        secrets = {"LBWEB_ADMIN_PASSWORD": "admin-secret-healthd", "SECRET_KEY": "secret-key-healthd-test"}
        env = {"REDIS_URL": redis.url, "LBWEB_VAR_DIR": str(state), **secrets}
        daemon = healthd(env=env, run_as=setpriv("lbweb", ("net_raw",)))
        status = proc_status(daemon.proc.pid)
        assert b"healthd" in Path(f"/proc/{daemon.proc.pid}/cmdline").read_bytes()
        assert status["Uid"].split() == [str(pwd.getpwnam("lbweb").pw_uid)] * 4, status["Uid"]
        net_raw = f"{1 << CAP_NET_RAW:016x}"
        assert (status["CapEff"], status["CapPrm"], status["CapBnd"]) == (net_raw,) * 3, status
        assert status["NoNewPrivs"] == "1"
        for name, _check, health, words in AS_LBWEB:
            wait_health(api, farms[name], health, timeout=20)
            reason = api.get(f"backends/{farms[name]}/")["health_reason"]
            assert words in reason, (name, reason)
        assert api.get("health-status/")["state"] == "running"
        # the prober stops: command checks cannot run, which is healthd's trouble, not the backend's
        events = api.get("health-events/")["count"]
        prober.stop()
        time.sleep(2.5)  # two intervals and more: fall is 2
        status = api.get("health-status/")
        assert status["state"] == "impaired" and "prober is not running" in status["detail"], status
        assert api.get(f"backends/{farms['lbweb-command']}/")["health"] == "up"
        assert api.get("health-events/")["count"] == events
        prober.start()
        time.sleep(3)  # past LBWEB_HEALTHD_STALE_SECONDS without an error of its own
        assert api.get("health-status/")["state"] == "running"
        assert api.get(f"backends/{farms['lbweb-command']}/")["health"] == "up"
    finally:
        extra.kill()
        extra.wait()
