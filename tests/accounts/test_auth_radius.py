"""RADIUS logins against Debian's freeradius, started by the test on a loopback port of its own with a users file
and a client secret the test wrote (tests/support/auth_servers.py): the Test's words for each way a login fails, the
role from Filter-Id, the lockout."""

from __future__ import annotations

import logging

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from accounts import services
from accounts.checks.radius import check_radius
from accounts.models import DirectoryAccount
from farms.roles import role_of
from tests.support.auth_servers import (
    ROLE_USERS,
    UNMAPPED_USER,
    USER_PASSWORD,
    FreeRadius,
    free_udp_port,
    radius_settings,
)

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def radius(tmp_path_factory):
    server = FreeRadius(tmp_path_factory.mktemp("radius")).start()
    yield server
    server.stop()


def configured(radius, **overrides):
    return services.radius_update(**radius_settings(radius, **overrides))


def login(username: str, password: str, address: str = "198.18.0.80") -> Client:
    browser = Client(REMOTE_ADDR=address)
    browser.post("/accounts/login/", {"username": username, "password": password})
    return browser


def logged_in_as(browser: Client) -> str | None:
    answer = browser.get("/")
    return None if answer.status_code != 200 else answer.wsgi_request.user.get_username()


def test_test_passes_and_gives_each_users_role(radius):
    row = configured(radius)
    assert check_radius(row).ok, check_radius(row).as_dict()
    for role, uid in ROLE_USERS.items():
        result = check_radius(row, uid, USER_PASSWORD)
        assert result.ok and result.role == role, result.as_dict()


def test_test_says_why_a_login_fails(radius):
    def reason(username="", password="", **overrides) -> tuple[str, str]:
        result = check_radius(configured(radius, **overrides), username, password)
        assert not result.ok
        return result.steps[-1].name, result.reason

    step, words = reason(port=free_udp_port())
    assert step == "reach" and words.startswith("cannot reach") and "nothing listens" in words
    step, words = reason(secret="not-the-secret")
    assert step == "reach" and "the shared secret differs" in words and "not-the-secret" not in words
    step, words = reason(require_message_authenticator=True)
    assert step == "reach" and "without a Message-Authenticator" in words
    step, words = reason("alice", "wrong-password")
    assert step == "password" and words.startswith("bad password or unknown user") and "Access-Reject" in words
    step, words = reason(UNMAPPED_USER, USER_PASSWORD)
    assert step == "role" and words.startswith("in no mapped group") and "staff" in words


def test_each_role_logs_in_and_gets_its_role(radius):
    configured(radius)
    for role, uid in ROLE_USERS.items():
        assert logged_in_as(login(uid, USER_PASSWORD)) == uid
        user = get_user_model().objects.get(username=uid)
        assert role_of(user) == role and not user.has_usable_password()
        assert DirectoryAccount.objects.get(user=user).source == "radius"
    assert logged_in_as(login("alice", "wrong-password")) is None
    assert logged_in_as(login(UNMAPPED_USER, USER_PASSWORD)) is None
    assert not get_user_model().objects.filter(username=UNMAPPED_USER).exists()


def test_a_local_account_logs_in_without_asking_the_server(radius, admin_user):
    configured(radius, server="127.0.0.1", port=free_udp_port())
    assert logged_in_as(login("admin", "admin-password")) == "admin"


def test_the_lockout_applies_to_radius_logins(radius, settings):
    configured(radius)
    for n in range(settings.AXES_FAILURE_LIMIT):
        login("oscar", f"guess-{n}", address="198.18.0.81")
    page = Client(REMOTE_ADDR="198.18.0.81").post("/accounts/login/", {"username": "oscar", "password": USER_PASSWORD})
    assert page.status_code == 429
    assert logged_in_as(login("oscar", USER_PASSWORD, address="198.18.0.82")) == "oscar"


def test_no_secret_reaches_a_log(radius, caplog):
    caplog.set_level(logging.DEBUG)
    row = configured(radius)
    check_radius(row, "alice", "wrong-password-7")
    login("alice", "wrong-password-7")
    login("alice", USER_PASSWORD)
    check_radius(configured(radius, secret="wrong-secret-8"), "alice", USER_PASSWORD)
    assert "RADIUS" in caplog.text
    for secret in (USER_PASSWORD, "wrong-password-7", radius.secret, "wrong-secret-8"):
        assert secret not in caplog.text


def test_the_login_page_tells_a_right_password_without_a_role(radius):
    configured(radius)
    page = Client().post("/accounts/login/", {"username": UNMAPPED_USER, "password": USER_PASSWORD})
    assert "accepted the password, but the account is in no group mapped to an lbweb role" in page.content.decode()
    page = Client().post("/accounts/login/", {"username": "alice", "password": "wrong-password"})
    assert "Wrong user name or password." in page.content.decode()
