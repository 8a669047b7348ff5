"""API tokens (django-rest-knox) and login lockout (django-axes), through Django's test clients.

The same behaviour over real HTTPS, gunicorn and a TTL that runs out: test_https.py.
"""

from __future__ import annotations

import base64
import datetime
import io

import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone
from knox.models import AuthToken
from rest_framework.test import APIClient

from tests.conftest import ROLE_PASSWORD, new_token

pytestmark = pytest.mark.django_db
LOGIN = "/api/v1/auth/login/"


def basic(username: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()


def token_login(username: str, password: str, address: str = "198.18.0.50"):
    return APIClient().post(LOGIN, HTTP_AUTHORIZATION=basic(username, password), REMOTE_ADDR=address)


def with_token(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client


def test_token_login_gives_a_token_stored_only_as_a_digest(role_users, settings):
    answer = token_login("viewer-user", ROLE_PASSWORD)
    assert answer.status_code == 200, answer.content
    token = answer.json()["token"]
    stored = AuthToken.objects.get(user=role_users["viewer"])
    assert token not in (stored.digest, stored.token_key) and len(stored.digest) == 128
    assert stored.expiry - timezone.now() == pytest.approx(settings.LBWEB_TOKEN_TTL, abs=datetime.timedelta(seconds=30))
    assert with_token(token).get("/api/v1/farms/").status_code == 200
    assert with_token(token).post("/api/v1/policies/", {"name": "p", "elements": "198.18.5.1"}).status_code == 403
    assert token_login("viewer-user", "wrong").status_code == 401


def test_expired_token_is_refused(admin_user):
    token = new_token(admin_user, expiry=datetime.timedelta(hours=1))
    assert with_token(token).get("/api/v1/farms/").status_code == 200
    AuthToken.objects.update(expiry=timezone.now() - datetime.timedelta(seconds=1))
    assert with_token(token).get("/api/v1/farms/").status_code == 401


def test_tokens_are_listed_and_revoked_one_by_one_by_their_owner(admin_user, role_users):
    first, second = new_token(admin_user), new_token(admin_user)
    others = new_token(role_users["viewer"])
    listed = with_token(first).get("/api/v1/auth/tokens/").json()
    assert len(listed) == 2 and sum(t["current"] for t in listed) == 1
    assert all(set(t) == {"token_key", "created", "expiry", "current"} for t in listed)
    second_key = next(t["token_key"] for t in listed if not t["current"])
    other_key = AuthToken.objects.get(user=role_users["viewer"]).token_key
    assert with_token(first).delete(f"/api/v1/auth/tokens/{other_key}/").status_code == 404  # not yours
    assert with_token(others).get("/api/v1/farms/").status_code == 200
    assert with_token(first).delete(f"/api/v1/auth/tokens/{second_key}/").status_code == 204
    assert with_token(second).get("/api/v1/farms/").status_code == 401
    assert with_token(first).get("/api/v1/farms/").status_code == 200
    assert with_token(first).post("/api/v1/auth/logout/").status_code == 204
    assert with_token(first).get("/api/v1/farms/").status_code == 401


def test_logoutall_revokes_every_token_of_the_caller_only(admin_user, role_users):
    mine = [new_token(admin_user) for _ in range(3)]
    others = new_token(role_users["viewer"])
    assert with_token(mine[0]).post("/api/v1/auth/logoutall/").status_code == 204
    assert all(with_token(t).get("/api/v1/farms/").status_code == 401 for t in mine)
    assert with_token(others).get("/api/v1/farms/").status_code == 200


def test_create_token_command_prints_a_token_once(admin_user):
    out = io.StringIO()
    call_command("create_token", "admin", "--ttl-hours", "2", stdout=out, stderr=io.StringIO())
    token = out.getvalue().strip()
    assert with_token(token).get("/api/v1/farms/").status_code == 200
    expiry = AuthToken.objects.get().expiry
    assert expiry - timezone.now() == pytest.approx(datetime.timedelta(hours=2), abs=datetime.timedelta(seconds=30))


def test_thirty_wrong_passwords_lock_the_token_login_even_for_the_right_one(role_users, settings):
    answers = [token_login("admin-user", f"guess-{n}").status_code for n in range(30)]
    assert answers[: settings.AXES_FAILURE_LIMIT - 1] == [401] * (settings.AXES_FAILURE_LIMIT - 1)
    assert set(answers[settings.AXES_FAILURE_LIMIT :]) == {429}
    locked = token_login("admin-user", ROLE_PASSWORD)
    assert locked.status_code == 429 and "token" not in locked.json()
    assert "Too many failed logins for 'admin-user'" in locked.json()["detail"]
    assert int(locked["Retry-After"]) == settings.AXES_COOLOFF_TIME.total_seconds()
    assert not AuthToken.objects.exists()
    # the lock is for that name from that address: the real admin elsewhere still gets in
    assert token_login("admin-user", ROLE_PASSWORD, address="198.18.0.51").status_code == 200


def test_thirty_wrong_passwords_lock_the_ui_login_even_for_the_right_one(role_users, settings):
    browser = Client(REMOTE_ADDR="198.18.0.60")
    for n in range(30):
        browser.post("/accounts/login/", {"username": "operator-user", "password": f"guess-{n}"})
    page = browser.post("/accounts/login/", {"username": "operator-user", "password": ROLE_PASSWORD})
    assert page.status_code == 429
    assert "Too many failed logins" in page.content.decode() and "0:15:00" in page.content.decode()
    assert browser.get("/").status_code == 302  # not logged in
    # the API's token login shares the lock (same name, same address)
    assert token_login("operator-user", ROLE_PASSWORD, address="198.18.0.60").status_code == 429


def test_a_success_before_the_limit_clears_the_failures(role_users, settings):
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        assert token_login("viewer-user", "wrong").status_code == 401
    assert token_login("viewer-user", ROLE_PASSWORD).status_code == 200
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        assert token_login("viewer-user", "wrong").status_code == 401
    assert token_login("viewer-user", ROLE_PASSWORD).status_code == 200
