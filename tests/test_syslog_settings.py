"""System › Remote syslog in the API and on the page, and the rsyslog generator behind it: bad input is a
field-level error that changes nothing, no typed value can reach rsyslog's configuration as a directive (the model
refuses it, and the generator refuses it again past the model), the roles decide who writes, every change is
audited and asks the worker for rsyslog's new file. Golden file checked by ``rsyslogd -N1``."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from django.test import Client
from rest_framework.test import APIClient

from compiler.syslog import render
from compiler.syslog.spec import AUDIT, FARM_LOG, KINDS, ServerSpec, SyslogSpec
from farms.models import AuditEvent
from remotelog.models import SyslogServer
from tests import certs
from tests.conftest import new_token

API = "/api/v1/system/syslog-servers/"
GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("LBWEB_UPDATE_GOLDEN") == "1"
SPEC = SyslogSpec(
    servers=(
        ServerSpec(1, "198.18.10.1", 514, "udp"),
        ServerSpec(2, "logs.example.org", 514, "tcp", kinds=(AUDIT, FARM_LOG)),
        ServerSpec(3, "2001:2::10", 6514, "tls", ca_file="/var/lib/lbweb/syslog/ca-3.pem", peer_name="*.example.org"),
        ServerSpec(4, "198.18.10.4", 6514, "tls", ca_file="/var/lib/lbweb/syslog/ca-4.pem"),
    ),
    events_socket="/var/lib/lbweb/syslog/events.sock",
    access_socket="/run/lbweb-haproxy/log/access.sock",
    work_dir="/var/lib/lbweb/syslog/work",
)
# What an operator might type to break out of a quoted value or add a line in rsyslog's RainerScript.
HOSTILE = [
    'log.example.org" action(type="omfile" file="/tmp/x")',
    "log.example.org\naction(type=omfile)",
    "log.example.org # comment",
    "$IncludeConfig /etc/shadow",
    "log.example.org}",
    "log example org",
    "`id`",
    "log.example.org\\",
]


def golden(name: str, produced: str) -> None:
    path = GOLDEN / name
    if UPDATE or not path.exists():
        path.write_text(produced)
    assert produced == path.read_text(), f"{path} differs: run with LBWEB_UPDATE_GOLDEN=1 after checking the change"


def test_golden_configuration_rsyslog_accepts(tmp_path):
    text = render.rsyslog_conf(SPEC)
    golden("syslog-rsyslog.conf", text)
    # rsyslogd -N1 opens the CA files it is given and needs the work directory: the same file, moved to tmp_path.
    ca = certs.issue("syslog test CA", ca=True).pem
    for n in (3, 4):
        (tmp_path / f"ca-{n}.pem").write_text(ca)
    (tmp_path / "work").mkdir()
    moved = text.replace("/var/lib/lbweb/syslog", str(tmp_path)).replace("/run/lbweb-haproxy/log", str(tmp_path))
    (tmp_path / "rsyslog.conf").write_text(moved)
    result = subprocess.run(["rsyslogd", "-N1", "-f", str(tmp_path / "rsyslog.conf")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_deterministic_and_every_kind_reaches_the_forwarding_rules():
    assert render.rsyslog_conf(SPEC) == render.rsyslog_conf(SPEC)
    text = render.rsyslog_conf(SPEC)
    for kind in KINDS:
        assert f'$.msgid == "{kind}"' in text
    no_kernel = SyslogSpec((ServerSpec(1, "198.18.10.1", 514, "udp", kinds=(AUDIT,)),), "/a/e.sock", "/a/l.sock", "/a")
    assert "imkmsg" not in render.rsyslog_conf(no_kernel)  # nobody takes farm-log: the kernel's log is not read


@pytest.mark.parametrize("value", HOSTILE)
def test_the_generator_refuses_what_validation_would_have(value):
    """Past the model (a row written by hand in the database): rendering stops, nothing is written."""
    for server in (
        ServerSpec(1, value, 514, "udp"),
        ServerSpec(1, "198.18.10.1", 6514, "tls", "ca", "/a/ca.pem", value),
    ):
        spec = SyslogSpec((server,), "/a/e.sock", "/a/l.sock", "/a")
        with pytest.raises(render.UnsafeValue):
            render.rsyslog_conf(spec)
    with pytest.raises(render.UnsafeValue):
        render.rsyslog_conf(SyslogSpec((), f"/a/{value}", "/a/l.sock", "/a"))


@pytest.fixture
def api(admin_user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {new_token(admin_user)}")
    return client


def as_role(role_users, role: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {new_token(role_users[role])}")
    return client


@pytest.mark.django_db
@pytest.mark.parametrize("value", HOSTILE)
def test_a_hostile_host_or_certificate_name_is_a_field_error_and_changes_nothing(api, value):
    answer = api.post(API, {"name": "x", "host": value, "port": 514, "transport": "udp"}, format="json")
    assert answer.status_code == 400 and "host" in answer.json(), answer.json()
    ca = certs.issue("syslog test CA", ca=True).pem
    body = {"name": "x", "host": "198.18.10.1", "port": 6514, "transport": "tls", "ca_certificate": ca}
    answer = api.post(API, {**body, "peer_name": value}, format="json")
    assert answer.status_code == 400 and "peer_name" in answer.json(), answer.json()
    assert not SyslogServer.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("values", "field", "words"),
    [
        ({"port": 0}, "port", "1 to 65535"),
        ({"port": 70000}, "port", "1 to 65535"),
        ({"host": "224.0.0.1"}, "host", "not multicast"),
        ({"host": "[2001:2::1]"}, "host", "without brackets"),
        ({"transport": "tls"}, "ca_certificate", "TLS needs the CA"),
        ({"transport": "tls", "ca_certificate": "not a certificate"}, "ca_certificate", "not a certificate in PEM"),
        ({"ca_certificate": "x"}, "ca_certificate", "Only for TLS"),
        ({"transport": "sctp"}, "transport", "not a valid choice"),
    ],
)
def test_bad_input_is_a_field_error_and_changes_nothing(api, values, field, words):
    saved = api.post(API, {"name": "siem", "host": "198.18.10.1", "port": 514}, format="json")
    assert saved.status_code == 201, saved.json()
    answer = api.patch(f"{API}{saved.json()['id']}/", values, format="json")
    assert answer.status_code == 400 and words in " ".join(answer.json()[field]), answer.json()
    row = SyslogServer.objects.get()
    assert (row.host, row.port, row.transport, row.ca_certificate) == ("198.18.10.1", 514, "udp", "")


@pytest.mark.django_db
def test_a_change_is_audited_and_asks_the_worker_for_rsyslogs_file(
    api, django_capture_on_commit_callbacks, monkeypatch
):
    sent = []
    monkeypatch.setattr("lbweb.enqueue.send", lambda task, **kw: sent.append(task))
    with django_capture_on_commit_callbacks(execute=True):
        answer = api.post(
            API, {"name": "siem", "host": "logs.example.org", "port": 514, "transport": "tcp"}, format="json"
        )
    assert answer.status_code == 201, answer.json()
    assert answer.json()["audit"] is True and answer.json()["farm_log"] is True  # every kind unless unticked
    assert sent == ["syslog.tasks.apply_syslog"]
    event = AuditEvent.objects.filter(object_type="syslogserver").latest("id")
    assert event.action == "create" and event.after["host"] == "logs.example.org" and event.actor_name == "admin"
    with django_capture_on_commit_callbacks(execute=True):
        assert api.delete(f"{API}{answer.json()['id']}/").status_code == 204
    assert sent == ["syslog.tasks.apply_syslog"] * 2 and not SyslogServer.objects.exists()


@pytest.mark.django_db
def test_roles_read_and_write_as_everywhere(role_users):
    body = {"name": "siem", "host": "198.18.10.1", "port": 514}
    assert as_role(role_users, "operator").post(API, body, format="json").status_code == 403
    assert as_role(role_users, "admin").post(API, body, format="json").status_code == 201
    assert as_role(role_users, "viewer").get(API).json()["results"][0]["host"] == "198.18.10.1"
    viewer = Client()
    viewer.force_login(role_users["viewer"])
    assert viewer.get("/system/syslog/").status_code == 200
    assert viewer.post("/system/syslog/add/", {"name": "x"}).status_code == 403


@pytest.mark.django_db
def test_the_page_lists_adds_and_refuses_by_field(admin_user):
    browser = Client()
    browser.force_login(admin_user)
    form = {"name": "siem", "enabled": "on", "host": "logs.example.org", "port": "6514", "transport": "tls"}
    form.update({"audit": "on", "health": "on"})
    refused = browser.post("/system/syslog/add/", form)
    assert "TLS needs the CA" in refused.content.decode() and not SyslogServer.objects.exists()
    form["ca_certificate"] = certs.issue("syslog test CA", ca=True).pem
    assert browser.post("/system/syslog/add/", form).status_code == 302
    assert SyslogServer.objects.get().kinds == ("audit", "health")
    page = browser.get("/system/syslog/").content.decode()
    assert "logs.example.org:6514" in page and "audit, health" in page and "any name the CA signed" in page


def test_a_file_rsyslog_refuses_is_never_used(tmp_path):
    """The worker's check: rsyslogd -N1's words, and the file in place stays as it was."""
    from dataplane.syslog import applier

    (tmp_path / "rsyslog.conf").write_text("# the running one\n")
    with pytest.raises(applier.ConfigRefused, match="error"):
        applier.check('action(type="omfwd" target="198.18.10.1" nosuchparameter="1")\n', tmp_path)
    assert (tmp_path / "rsyslog.conf").read_text() == "# the running one\n"
    assert [p.name for p in tmp_path.iterdir()] == ["rsyslog.conf"]  # the checked copy is gone too


def test_haproxy_sends_each_http_farms_access_log_to_rsyslog_in_rfc5424():
    """The worker's HAProxy configuration names rsyslog's socket in every frontend; HAProxy's own check takes it."""
    from compiler.haproxy.config import render as haproxy_render
    from dataplane.l7 import engine
    from tests.l7_specs import full

    socket_path = "/run/lbweb-haproxy/log/access.sock"
    config = haproxy_render(full(), "/run/lbweb-haproxy/conf", socket_path).config
    frontends = config.count("\nfrontend ")
    assert frontends and config.count(f"    log {socket_path} format rfc5424 local0 info\n") == frontends
    assert f"log {socket_path}" not in haproxy_render(full(), "/run/lbweb-haproxy/conf").config  # none: as before
    engine.check(full(), access_log=socket_path)
    with pytest.raises(ValueError):
        haproxy_render(full(), "/run/lbweb-haproxy/conf", "/run/x.sock\n    option nolinger")
