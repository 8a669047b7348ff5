"""The second factor (django-otp TOTP and recovery codes) of local accounts, through Django's test client: a
password alone logs nobody in who owes a code, the policy makes a role enrol, the lockout counts wrong codes like
wrong passwords, the admin site's login and the API's token login cannot skip it, and tokens stay as they are."""

from __future__ import annotations

import base64

import pytest
from django.test import Client
from django_otp.plugins.otp_totp.models import TOTPDevice
from knox.models import AuthToken
from rest_framework.test import APIClient

from accounts import services
from farms.models import AuditEvent
from tests.conftest import ROLE_PASSWORD
from tests.support.totp import code

pytestmark = pytest.mark.django_db


def forget_throttle(user) -> None:
    """django-otp slows a device down after each wrong code (1 s, 2 s, 4 s…: its own guard against guessing from
    many addresses); a test about axes' count, or that follows a typo with the right code, waits it out this way."""
    for device in TOTPDevice.objects.filter(user=user):
        device.throttle_reset()


def enrolled(user) -> bytes:
    """Enrol ``user`` as the page does (an unconfirmed device, confirmed with a code); its secret."""
    device = services.totp_unconfirmed(user)
    assert services.totp_confirm(user=user, token=code(device.bin_key)) is not None
    return device.bin_key


def password_step(username: str, password: str = ROLE_PASSWORD, address: str = "198.18.0.90") -> Client:
    browser = Client(REMOTE_ADDR=address)
    answer = browser.post("/accounts/login/", {"username": username, "password": password})
    assert answer.status_code == 302 and answer["Location"] == "/accounts/login/code/", answer
    return browser


def user_of(browser: Client) -> str | None:
    answer = browser.get("/")
    return answer.wsgi_request.user.get_username() if answer.status_code == 200 else None


def test_a_password_alone_does_not_log_in_an_enrolled_account(role_users):
    key = enrolled(role_users["viewer"])
    browser = password_step("viewer-user")
    assert user_of(browser) is None  # pending: nobody is logged in yet
    wrong = browser.post(
        "/accounts/login/code/", {"otp_token": "000000" if code(key, steps_ahead=1) != "000000" else "111111"}
    )
    assert wrong.status_code == 400 and "Wrong code" in wrong.content.decode()
    forget_throttle(role_users["viewer"])
    assert browser.post("/accounts/login/code/", {"otp_token": code(key, steps_ahead=1)}).status_code == 302
    assert user_of(browser) == "viewer-user"


def test_the_policy_makes_admins_enrol_at_their_next_login(role_users):
    services.login_policy_update(second_factor_role="admin")
    viewer = Client(REMOTE_ADDR="198.18.0.91")
    viewer.post("/accounts/login/", {"username": "viewer-user", "password": ROLE_PASSWORD})
    assert user_of(viewer) == "viewer-user"  # below the policy's role, not enrolled: the password is enough
    browser = password_step("admin-user")
    page = browser.get("/accounts/login/code/").content.decode()
    assert "Set up a second factor" in page
    secret = page.split('data-secret="')[1].split('"')[0]
    codes_page = browser.post("/accounts/login/code/", {"otp_token": code(secret)})
    assert codes_page.status_code == 200 and "shown <strong>only now</strong>" in codes_page.content.decode()
    assert user_of(browser) == "admin-user"
    assert TOTPDevice.objects.get(user=role_users["admin"]).confirmed
    assert AuditEvent.objects.filter(object_type="second factor", action="enrol", object_name="admin-user").exists()
    assert secret not in str(list(AuditEvent.objects.values("before", "after")))


def test_a_recovery_code_logs_in_once(role_users):
    enrolled(role_users["operator"])
    codes = services.recovery_codes_renew(user=role_users["operator"])
    browser = password_step("operator-user")
    assert browser.post("/accounts/login/code/", {"otp_token": codes[0]}).status_code == 302
    assert user_of(browser) == "operator-user"
    again = password_step("operator-user", address="198.18.0.92")
    assert again.post("/accounts/login/code/", {"otp_token": codes[0]}).status_code == 400


def test_wrong_codes_lock_the_login_like_wrong_passwords(role_users, settings):
    key = enrolled(role_users["admin"])
    browser = password_step("admin-user", address="198.18.0.93")
    for n in range(settings.AXES_FAILURE_LIMIT - 1):
        assert browser.post("/accounts/login/code/", {"otp_token": f"99999{n}"}).status_code == 400
    locked = browser.post("/accounts/login/code/", {"otp_token": "999990"})
    assert locked.status_code == 429 and "Too many failed logins" in locked.content.decode()
    assert user_of(browser) is None
    # the pair is locked for the password step too, even with the right password, and then with the right code
    retry = Client(REMOTE_ADDR="198.18.0.93")
    assert retry.post("/accounts/login/", {"username": "admin-user", "password": ROLE_PASSWORD}).status_code == 429
    forget_throttle(role_users["admin"])
    other = password_step("admin-user", address="198.18.0.94")  # another address is not locked
    assert other.post("/accounts/login/code/", {"otp_token": code(key, steps_ahead=1)}).status_code == 302


def test_the_admin_sites_password_login_still_owes_the_code(role_users):
    key = enrolled(role_users["admin"])
    role_users["admin"].is_staff = True
    role_users["admin"].save()
    browser = Client()
    browser.post("/admin/login/?next=/", {"username": "admin-user", "password": ROLE_PASSWORD})
    page = browser.get("/policies/")
    assert page.status_code == 302 and page["Location"].startswith("/accounts/login/code/")
    assert browser.get("/api/v1/farms/").status_code == 403
    assert browser.get("/accounts/second-factor/").status_code == 302  # no new secret without the old one's code
    assert browser.post("/accounts/login/code/", {"otp_token": code(key, steps_ahead=1)}).status_code == 302
    assert browser.get("/policies/").status_code == 200 and browser.get("/api/v1/farms/").status_code == 200


def test_the_token_login_asks_the_code_and_tokens_stay_as_they_are(role_users):
    key = enrolled(role_users["operator"])
    old_token = AuthToken.objects.create(user=role_users["operator"])[1]
    basic = "Basic " + base64.b64encode(b"operator-user:" + ROLE_PASSWORD.encode()).decode()
    client = APIClient(REMOTE_ADDR="198.18.0.95")
    refused = client.post("/api/v1/auth/login/", HTTP_AUTHORIZATION=basic)
    assert refused.status_code == 401 and "otp_token" in refused.json()["detail"]
    wrong = client.post("/api/v1/auth/login/", {"otp_token": "000000"}, HTTP_AUTHORIZATION=basic)
    assert wrong.status_code == 401
    forget_throttle(role_users["operator"])
    given = client.post("/api/v1/auth/login/", {"otp_token": code(key, steps_ahead=1)}, HTTP_AUTHORIZATION=basic)
    assert given.status_code == 200 and given.json()["token"]
    token_client = APIClient()
    token_client.credentials(HTTP_AUTHORIZATION=f"Token {old_token}")
    assert token_client.get("/api/v1/farms/").status_code == 200


def test_removing_it_is_refused_to_a_role_that_must_use_one(role_users):
    key = enrolled(role_users["admin"])
    services.login_policy_update(second_factor_role="operator")
    browser = password_step("admin-user")
    browser.post("/accounts/login/code/", {"otp_token": code(key, steps_ahead=1)})
    page = browser.post("/accounts/second-factor/", {"action": "remove", "otp_token": code(key, steps_ahead=1)})
    assert page.status_code in (400, 200)
    assert TOTPDevice.objects.filter(user=role_users["admin"], confirmed=True).exists()
