"""Remote syslog end to end: a real rsyslog receiver in a namespace of its own, lbweb's rsyslog configured by the
worker's writer from the database, and each kind of event made by the code that makes it on the appliance.

Over UDP, TCP and TLS at once, every kind arrives (audit, apply, health, cluster, http-access, farm-log) as RFC 5424
with this host's name and the kind's MSGID. Namespaces: tests/support/syslog_lab.py (198.19.54.0/24) and the lab's.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
from pathlib import Path

import pytest
from django.db import transaction

from cluster.models import Cluster
from cluster.services import ingest_journal
from compiler.haproxy.spec import EngineSpec, FarmSpec, ServerSpec, ServiceSpec
from dataplane.syslog import applier
from farms.health_services import HealthTransition, health_record
from farms.models import Backend
from lbweb import syslog_events
from remotelog import services
from remotelog.specs import syslog_spec
from tests.dataplane.test_dataplane import make_farm
from tests.support.l7_lab import HAProxyLab
from tests.support.lab import backend4, vip4
from tests.support.syslog_lab import RCV_ADDRESS, TLS_NAME, TRANSPORTS, SyslogLab

RFC5424 = re.compile(
    r"<(?P<pri>\d{1,3})>1 (?P<time>\S+) (?P<host>\S+) (?P<app>\S+) (?P<procid>\S+) (?P<msgid>\S+) "
    r"(?P<sd>-|\[.*?[^\\]\])(?: (?P<msg>.*))?$"
)
HTTP_VIP = vip4(231)


def parsed(line: str) -> dict:
    match = RFC5424.match(line)
    assert match, f"not RFC 5424: {line!r}"
    return match.groupdict()


@pytest.fixture
def syslog_lab(monkeypatch):
    lab = SyslogLab().build()
    monkeypatch.setenv("LBWEB_SYSLOG_EVENTS_SOCKET", str(lab.events_socket))  # before the worker's environment
    yield lab
    lab.destroy()


@pytest.fixture
def kernel_logs_of_namespaces():
    """The lab's LB is a namespace: the kernel logs netfilter's lines of namespaces only with this (init's) sysctl,
    set for the test and put back."""
    path = Path("/proc/sys/net/netfilter/nf_log_all_netns")
    before = path.read_text().strip()
    path.write_text("1")
    yield
    path.write_text(before)


def configure(lab: SyslogLab) -> None:
    for transport, port in TRANSPORTS.items():
        extra = {"ca_certificate": lab.root_ca.pem, "peer_name": TLS_NAME} if transport == "tls" else {}
        services.syslog_server_create(
            name=f"receiver-{transport}", host=RCV_ADDRESS, port=port, transport=transport, **extra
        )
    spec, files = syslog_spec(lab.syslog_dir, lab.access_socket)
    assert applier.write(spec, files, lab.syslog_dir) == 3  # the worker's writer, rsyslogd -N1 included
    lab.start_forwarder()


def test_each_kind_of_event_arrives_over_udp_tcp_and_tls(
    syslog_lab, kernel_logs_of_namespaces, api, worker, lab, tmp_path, settings
):
    configure(syslog_lab)  # its audit entries are sent before rsyslog runs: lost, as when no server is set

    # audit (the API's write) and apply (the worker's run); farm-log: the farm logs, a connection makes a line
    farm = make_farm(api, "slgfarm", vip4(232), backends=["b1"], log=True)
    assert lab.http_get(vip4(232))
    # health: what healthd records for a backend going down
    backend = Backend.objects.get(farm_id=farm["id"])
    health_record([HealthTransition(backend.id, "down", "tcp connect refused")])
    # cluster: a transition the handler journalled, as the worker's heartbeat ingests it
    settings.LBWEB_CLUSTER_DIR = tmp_path
    Cluster.objects.create(pk=1)
    entry = {
        "node": "lbweb-a",
        "state": "MASTER",
        "from": "BACKUP",
        "at": time.time(),
        "reason": "elected",
        "steps": [],
    }
    (tmp_path / "transitions.jsonl").write_text(json.dumps(entry) + "\n")
    with transaction.atomic():
        assert ingest_journal() == 1
    # http-access: HAProxy's access log of an HTTP farm
    haproxy = HAProxyLab(lab, tmp_path / "haproxy", vips=(HTTP_VIP,))
    haproxy.engine.access_log = str(syslog_lab.access_socket)
    haproxy.start()
    try:
        service = ServiceSpec(10, "all", servers=(ServerSpec(1, backend4("b1"), 80),))
        haproxy.engine.apply(EngineSpec((FarmSpec(7, "slgweb", "http", HTTP_VIP, (80,), services=(service,)),)))
        assert haproxy.get(HTTP_VIP, "/slg-path").status == 200
    finally:
        haproxy.stop()

    host = socket.gethostname()
    expected = {
        "audit": lambda m: "slgfarm" in m["sd"] and 'actor="admin"' in m["sd"],
        "apply": lambda m: 'ok="yes"' in m["sd"],
        "health": lambda m: 'current="down"' in m["sd"] and "slgfarm" in m["sd"],
        "cluster": lambda m: 'state="master"' in m["sd"] and "lbweb-a" in m["sd"],
        "http-access": lambda m: "/slg-path" in (m["msg"] or "") and m["app"] == "haproxy",
        "farm-log": lambda m: f"DST={vip4(232)}" in (m["msg"] or "") and "IN-slgfarm" in m["msg"],
    }
    for transport in TRANSPORTS:
        for msgid, check in expected.items():

            def matches(line: str, msgid=msgid, check=check) -> bool:
                m = RFC5424.match(line)
                return bool(m) and m["msgid"] == msgid and check(m.groupdict())

            line = syslog_lab.wait_for(transport, matches)
            message = parsed(line)
            assert message["host"] == host, line
            assert message["time"].endswith(("Z", "+00:00")) or re.search(r"[+-]\d\d:\d\d$", message["time"]), line

    # A restart (the worker rewrote the file) reads the kernel's buffer again and sends none of it twice.
    farm_lines = [line for line in syslog_lab.received("udp") if " farm-log " in line]
    pid_file = syslog_lab.syslog_dir / "rsyslogd.pid"
    old_pid = pid_file.read_text()
    time.sleep(1.1)  # the new rsyslog's "since" is a second after the last line
    conf = syslog_lab.syslog_dir / "rsyslog.conf"
    os.utime(conf, ns=(time.time_ns(), time.time_ns()))
    deadline = time.monotonic() + 20
    while not pid_file.exists() or pid_file.read_text() == old_pid:
        assert time.monotonic() < deadline, syslog_lab.forwarder_log.read_text()
        time.sleep(0.1)
    syslog_events.send("audit", "after the restart", {"marker": "slg-restart"})
    syslog_lab.wait_for("udp", lambda line: "slg-restart" in line)
    assert [line for line in syslog_lab.received("udp") if " farm-log " in line] == farm_lines
