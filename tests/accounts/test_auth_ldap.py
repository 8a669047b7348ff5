"""LDAP logins against Debian's slapd, started by the test on loopback ports of its own (tests/support/auth_servers.py):
plain LDAP with StartTLS and LDAPS, each checked against a CA the test made; the Test's words for each way a login
fails; the role from the groups; local accounts kept apart; the lockout.
"""

from __future__ import annotations

import logging

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from accounts import services
from accounts.checks.ldap import check_ldap
from accounts.models import DirectoryAccount, LdapSettings
from farms.roles import role_of
from tests.support.auth_servers import (
    READER_DN,
    ROLE_USERS,
    UNMAPPED_USER,
    USER_PASSWORD,
    Slapd,
    free_port,
    ldap_settings,
)

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def slapd(tmp_path_factory):
    server = Slapd(tmp_path_factory.mktemp("slapd")).start()
    yield server
    server.stop()


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("LBWEB_VAR_DIR", str(tmp_path / "var"))  # the CA file goes to a state directory of the test's
    return tmp_path / "var"


def configured(slapd, **kwargs) -> LdapSettings:
    return services.ldap_update(**ldap_settings(slapd, **kwargs))


def login(username: str, password: str, address: str = "198.18.0.70") -> Client:
    browser = Client(REMOTE_ADDR=address)
    browser.post("/accounts/login/", {"username": username, "password": password})
    return browser


def logged_in_as(browser: Client) -> str | None:
    answer = browser.get("/")
    return None if answer.status_code != 200 else answer.wsgi_request.user.get_username()


@pytest.mark.parametrize("security", ["starttls", "ldaps"])
def test_test_passes_and_gives_each_users_role(slapd, state_dir, security):
    row = configured(slapd, security=security)
    assert check_ldap(row).ok, check_ldap(row).as_dict()
    for role, uid in ROLE_USERS.items():
        result = check_ldap(row, uid, USER_PASSWORD)
        assert result.ok and result.role == role, result.as_dict()
        assert [step.name for step in result.steps] == ["reach", "tls", "bind", "user", "password", "groups"]


@pytest.mark.parametrize("security", ["starttls", "ldaps"])
def test_test_says_why_a_login_fails(slapd, state_dir, security):
    def reason(username="", password="", **kwargs) -> tuple[str, str]:
        result = check_ldap(configured(slapd, security=security, **kwargs), username, password)
        assert not result.ok
        return result.steps[-1].name, result.reason

    uri = slapd.ldaps_uri if security == "ldaps" else slapd.uri
    closed = uri.rsplit(":", 1)[0] + f":{free_port()}"
    step, words = reason(server_uris=closed)
    assert step == "reach" and words.startswith("cannot reach") and "refused" in words.lower()
    step, words = reason(ca=slapd.tls.stranger.pem)
    assert step == "tls" and words.startswith("TLS failure"), words
    if security == "ldaps":
        assert "certificate verify failed" in words or "self-signed" in words or "unable to get local issuer" in words
    step, words = reason(bind_password="not-the-password")
    assert (step, words) == ("bind", f"bad bind: the server refused {READER_DN} with this password")
    assert "not-the-password" not in words
    step, words = reason("mallory", USER_PASSWORD)
    assert step == "user" and words.startswith("user not found") and "(uid=mallory)" in words
    step, words = reason("alice", "wrong-password")
    assert (step, words) == ("password", f"bad password for {slapd.user_dn('alice')}")
    step, words = reason(UNMAPPED_USER, USER_PASSWORD)
    assert step == "groups" and words.startswith("in no mapped group") and "cn=others" in words


@pytest.mark.parametrize("security", ["starttls", "ldaps"])
def test_each_role_logs_in_and_gets_its_role(slapd, state_dir, security):
    configured(slapd, security=security)
    for role, uid in ROLE_USERS.items():
        browser = login(uid, USER_PASSWORD)
        assert logged_in_as(browser) == uid
        user = get_user_model().objects.get(username=uid)
        assert role_of(user) == role and not user.has_usable_password()
        assert DirectoryAccount.objects.get(user=user).source == "ldap"
    assert logged_in_as(login("alice", "wrong-password")) is None
    assert logged_in_as(login(UNMAPPED_USER, USER_PASSWORD)) is None
    assert not get_user_model().objects.filter(username=UNMAPPED_USER).exists()  # refused before an account is made


def test_a_role_follows_the_directory_at_each_login(slapd, state_dir):
    configured(slapd, admin_group=slapd.group_dn("operator"), operator_group="", viewer_group="")
    assert logged_in_as(login("oscar", USER_PASSWORD)) == "oscar"
    assert role_of(get_user_model().objects.get(username="oscar")) == "admin"
    configured(slapd)  # the operators' group is the operators' again
    assert logged_in_as(login("oscar", USER_PASSWORD)) == "oscar"
    assert role_of(get_user_model().objects.get(username="oscar")) == "operator"


def test_a_local_account_of_the_same_name_is_never_taken_over(slapd, state_dir, django_user_model):
    configured(slapd)
    django_user_model.objects.create_user("alice", "", "local-password-1")
    assert logged_in_as(login("alice", USER_PASSWORD)) is None  # the directory is not asked about a local name
    assert logged_in_as(login("alice", "local-password-1")) == "alice"
    assert not DirectoryAccount.objects.exists()


def test_local_logins_switched_off_leave_only_the_directory(slapd, state_dir, admin_user):
    configured(slapd)
    services.login_policy_update(local_logins=False)
    assert logged_in_as(login("admin", "admin-password")) is None
    assert logged_in_as(login("victor", USER_PASSWORD)) == "victor"


def test_the_lockout_applies_to_ldap_logins(slapd, state_dir, settings):
    configured(slapd)
    for n in range(settings.AXES_FAILURE_LIMIT):
        login("alice", f"guess-{n}", address="198.18.0.71")
    locked = Client(REMOTE_ADDR="198.18.0.71")
    page = locked.post("/accounts/login/", {"username": "alice", "password": USER_PASSWORD})
    assert page.status_code == 429 and "Too many failed logins" in page.content.decode()
    assert logged_in_as(login("alice", USER_PASSWORD, address="198.18.0.72")) == "alice"  # another address


def test_no_password_reaches_a_log_or_the_lockout_records(slapd, state_dir, caplog):
    from axes.models import AccessAttempt, AccessFailureLog

    caplog.set_level(logging.DEBUG)
    row = configured(slapd, security="ldaps")
    check_ldap(row, "alice", "wrong-password-5")
    check_ldap(row, "alice", USER_PASSWORD)
    login("alice", "wrong-password-5")
    login("alice", USER_PASSWORD)
    configured(slapd, bind_password="wrong-bind-6")
    login("oscar", USER_PASSWORD)
    kept = caplog.text + repr(list(AccessAttempt.objects.values())) + repr(list(AccessFailureLog.objects.values()))
    assert "Binding as" in caplog.text or "LDAP" in caplog.text  # the logs were captured
    for secret in (USER_PASSWORD, "wrong-password-5", slapd.reader_password, "wrong-bind-6"):
        assert secret not in kept
