"""System › Remote syslog in the API and on the page: bad input is a field-level error that changes nothing, a value
that could end a string or start a directive in rsyslog's configuration is refused on its field, the roles decide
who writes, every change is audited and asks the worker for rsyslog's new file. The generator's own refusals and
its golden file: tests/compiler/test_syslog_render.py."""

from __future__ import annotations

import pytest
from django.test import Client
from rest_framework.test import APIClient

from farms.models import AuditEvent
from remotelog.models import SyslogServer
from tests.conftest import new_token
from tests.support import certs

API = "/api/v1/system/syslog-servers/"
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
