"""System › Authentication's settings in the API and on the page: secrets are write-only (never shown, never in
the audit trail, only whether one is set), bad input is a field-level error that changes nothing, the roles
decide who reads and who writes, and nobody can lock every login out."""

from __future__ import annotations

import io
import json
import os
import stat

import pytest
from django.test import Client
from rest_framework.test import APIClient

from accounts.ca_files import ca_file
from accounts.models import LdapSettings, OidcSettings, RadiusSettings
from farms.models import AuditEvent
from tests.conftest import new_token
from tests.support import certs

pytestmark = pytest.mark.django_db
API = "/api/v1/system/authentication"
SECRET = "very-secret-bind-password-1"
LDAP = {
    "enabled": True,
    "server_uris": "ldap://dc1.example.com ldap://dc2.example.com:3389",
    "security": "starttls",
    "bind_dn": "cn=lbweb,ou=services,dc=example,dc=com",
    "bind_password": SECRET,
    "user_search_base": "ou=people,dc=example,dc=com",
    "user_search_filter": "(sAMAccountName=%(user)s)",
    "group_search_base": "ou=groups,dc=example,dc=com",
    "group_type": "activeDirectory",
    "admin_group": "cn=lb-admins,ou=groups,dc=example,dc=com",
}


def as_role(role_users, role: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {new_token(role_users[role])}")
    return client


def test_a_secret_is_write_only_and_only_its_change_is_audited(client):
    answer = client.put(f"{API}/ldap/", LDAP, format="json")
    assert answer.status_code == 200, answer.json()
    assert "bind_password" not in answer.json() and answer.json()["bind_password_set"] is True
    assert SECRET not in json.dumps(client.get(f"{API}/ldap/").json())
    assert LdapSettings.load().bind_password == SECRET
    event = AuditEvent.objects.filter(object_type="ldapsettings").latest("id")
    assert event.after["bind_password"].startswith("set (changed ") and SECRET not in json.dumps(event.after)
    # omitted: kept; a new value: changed (the audit trail says when, not what); "": cleared
    assert client.patch(f"{API}/ldap/", {"timeout": 7}, format="json").json()["bind_password_set"] is True
    assert LdapSettings.load().bind_password == SECRET
    client.patch(f"{API}/ldap/", {"bind_password": "another-one-2"}, format="json")
    event = AuditEvent.objects.filter(object_type="ldapsettings").latest("id")
    assert event.before["bind_password"] != event.after["bind_password"]
    assert "another-one-2" not in json.dumps([event.before, event.after])
    client.patch(f"{API}/ldap/", {"enabled": False, "bind_password": ""}, format="json")
    assert client.get(f"{API}/ldap/").json()["bind_password_set"] is False
    for kind, secret, field in (("radius", "radius-secret-3", "secret"), ("oidc", "client-secret-4", "client_secret")):
        answer = client.patch(f"{API}/{kind}/", {field: secret}, format="json").json()
        assert answer[f"{field}_set"] is True and secret not in json.dumps(answer)
    assert "radius-secret-3" not in json.dumps(list(AuditEvent.objects.values("before", "after")))


@pytest.mark.parametrize(
    "kind, field, value, words",
    [
        ("ldap", "server_uris", "http://dc1.example.com", "is not an LDAP URI"),
        ("ldap", "server_uris", "ldap://dc1.example.com/dc=example,dc=com", "give only the scheme"),
        ("ldap", "server_uris", "ldap://bad_host!", "neither an address nor a host name"),
        ("ldap", "server_uris", "ldap://dc1.example.com:70000", "the port is a number"),
        ("ldap", "user_search_base", "people", "is not a DN"),
        ("ldap", "admin_group", "cn=,dc=example", "every attribute needs a value"),
        ("ldap", "user_search_filter", "(uid=%(name)s)", "%(user)s"),
        ("ldap", "user_search_filter", "(uid=%(user)s", "parentheses"),
        ("ldap", "ca_certificate", "not a certificate", "not a certificate in PEM"),
        ("radius", "port", 70000, "1 to 65535"),
        ("radius", "server", "radius server", "neither an address nor a host name"),
        ("radius", "admin_value", "lbweb admin", "no spaces"),
        ("oidc", "issuer", "http://login.example.com", "must be an https URL"),
        ("oidc", "issuer", "http://127.0.0.1:9000/o", "LBWEB_OIDC_ALLOW_HTTP_LOCALHOST"),
        ("oidc", "issuer", "https://login.example.com/?realm=x", "no query"),
        ("oidc", "scopes", "profile email", "must include openid"),
    ],
)
def test_bad_input_is_a_field_error_and_changes_nothing(client, kind, field, value, words):
    before = client.get(f"{API}/{kind}/").json()
    events = AuditEvent.objects.count()
    answer = client.patch(f"{API}/{kind}/", {field: value}, format="json")
    assert answer.status_code == 400, answer.json()
    assert words in " ".join(answer.json()[field]), answer.json()
    assert client.get(f"{API}/{kind}/").json() == before and AuditEvent.objects.count() == events


def test_an_http_issuer_on_this_machine_only_when_explicitly_allowed(client, settings):
    settings.LBWEB_OIDC_ALLOW_HTTP_LOCALHOST = True
    assert client.patch(f"{API}/oidc/", {"issuer": "http://127.0.0.1:9000/o"}, format="json").status_code == 200
    assert client.patch(f"{API}/oidc/", {"issuer": "http://login.example.com/o"}, format="json").status_code == 400


def test_an_enabled_directory_needs_what_a_login_needs(client):
    answer = client.patch(f"{API}/radius/", {"enabled": True}, format="json")
    assert answer.status_code == 400 and set(answer.json()) >= {"server", "secret"}
    answer = client.put(f"{API}/ldap/", {**LDAP, "admin_group": ""}, format="json")
    assert answer.status_code == 400 and "Map at least one group" in answer.json()["admin_group"][0]
    assert not RadiusSettings.load().enabled and not LdapSettings.load().enabled


def test_nobody_can_switch_every_login_off(client):
    answer = client.patch(f"{API}/policy/", {"local_logins": False}, format="json")
    assert (
        answer.status_code == 400 and "Enable LDAP, RADIUS or single sign-on first" in answer.json()["local_logins"][0]
    )
    assert client.put(f"{API}/ldap/", LDAP, format="json").status_code == 200
    assert client.patch(f"{API}/policy/", {"local_logins": False}, format="json").status_code == 200
    answer = client.patch(f"{API}/ldap/", {"enabled": False}, format="json")
    assert answer.status_code == 400 and "switch local logins on first" in answer.json()["enabled"][0]
    assert LdapSettings.load().enabled


def test_roles_read_and_write_as_everywhere(role_users):
    assert as_role(role_users, "viewer").get(f"{API}/ldap/").status_code == 200
    assert as_role(role_users, "operator").patch(f"{API}/ldap/", {"timeout": 9}, format="json").status_code == 403
    assert as_role(role_users, "operator").post(f"{API}/ldap/test/", {}, format="json").status_code == 403
    assert as_role(role_users, "admin").patch(f"{API}/ldap/", {"timeout": 9}, format="json").status_code == 200
    viewer = Client()
    viewer.force_login(role_users["viewer"])
    assert viewer.get("/system/authentication/").status_code == 200
    assert viewer.post("/system/authentication/", {"section": "ldap"}).status_code == 403


def test_the_page_never_shows_a_secret_and_refuses_bad_input_by_field(admin_user, client):
    client.put(f"{API}/ldap/", LDAP, format="json")
    browser = Client()
    browser.force_login(admin_user)
    page = browser.get("/system/authentication/").content.decode()
    assert SECRET not in page and "Set: leave blank to keep it." in page
    form = {f"ldap-{name}": value for name, value in LDAP.items() if name != "bind_password"}
    form.update({"section": "ldap", "action": "save", "ldap-enabled": "on", "ldap-timeout": "5"})
    form["ldap-server_uris"] = "ldap//nope"
    refused = browser.post("/system/authentication/", form)
    assert refused.status_code == 400 and "is not an LDAP URI" in refused.content.decode()
    assert LdapSettings.load().server_uris == LDAP["server_uris"] and LdapSettings.load().bind_password == SECRET
    form["ldap-server_uris"] = "ldaps://dc3.example.com"
    form["ldap-security"] = "ldaps"
    assert browser.post("/system/authentication/", form).status_code == 302
    saved = LdapSettings.load()
    assert saved.server_uris == "ldaps://dc3.example.com" and saved.bind_password == SECRET  # blank: kept


def test_a_test_of_the_page_uses_the_form_unsaved(admin_user):
    browser = Client()
    browser.force_login(admin_user)
    form = {f"radius-{name}": value for name, value in {"server": "127.0.0.1", "port": "9", "secret": "x"}.items()}
    form.update({"section": "radius", "action": "test", "radius-enabled": "on", "radius-timeout": "1",
                 "radius-retries": "1", "radius-nas_identifier": "lbweb", "radius-role_attribute": "Filter-Id",
                 "radius-admin_value": "lbweb-admin"})  # fmt: skip
    page = browser.post("/system/authentication/", form).content.decode()
    assert "Test failed: cannot reach 127.0.0.1:9" in page
    assert not RadiusSettings.load().enabled and not OidcSettings.load().enabled  # nothing saved


def test_a_ca_file_is_readable_by_lbweb_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("LBWEB_VAR_DIR", str(tmp_path / "var"))
    path = ca_file(certs.issue("some CA", ca=True).pem)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert path.stat().st_uid == os.geteuid()


def test_the_console_switches_local_logins_back_on(client, admin_user):
    from django.core.management import call_command

    client.put(f"{API}/ldap/", LDAP, format="json")
    client.patch(f"{API}/policy/", {"local_logins": False}, format="json")
    out = io.StringIO()
    call_command("local_logins", "--enable", stdout=out)
    assert "local logins: on" in out.getvalue() and "directories: LDAP" in out.getvalue()
    assert AuditEvent.objects.filter(object_type="loginpolicy").latest("id").after["local_logins"] is True
