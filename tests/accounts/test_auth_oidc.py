"""OpenID Connect single sign-on against a real provider run by the test (django-oauth-toolkit in a throwaway Django
project, gunicorn over HTTPS with the test's CA: tests/support/auth_servers.py): the Test's words for each way it fails,
a login per role, a user with no mapped group refused with the reason, the lockout obeyed."""

from __future__ import annotations

import logging
import re

import pytest
import requests
from django.contrib.auth import get_user_model

from accounts import services
from accounts.checks.oidc import check_oidc
from accounts.models import DirectoryAccount
from farms.roles import role_of
from tests.support.auth_flows import sso_login
from tests.support.auth_servers import ROLE_USERS, UNMAPPED_USER, USER_PASSWORD, OidcProvider, free_port, oidc_settings

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def provider(tmp_path_factory, live_server):
    server = OidcProvider(tmp_path_factory.mktemp("oidc"), f"{live_server.url}/oidc/callback/").start()
    yield server
    server.stop()


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("LBWEB_VAR_DIR", str(tmp_path / "var"))
    return tmp_path / "var"


def configured(provider, **overrides):
    return services.oidc_update(**oidc_settings(provider, **overrides))


def test_test_passes(provider, state_dir, live_server):
    result = check_oidc(configured(provider), redirect_uri=provider.redirect_uri)
    assert result.ok, result.as_dict()
    assert [step.name for step in result.steps] == ["discovery", "keys", "client", "roles"]


def test_test_says_why_it_fails(provider, state_dir):
    def reason(**overrides) -> tuple[str, str]:
        result = check_oidc(configured(provider, **overrides), redirect_uri=provider.redirect_uri)
        assert not result.ok
        return result.steps[-1].name, result.reason

    step, words = reason(issuer=f"https://127.0.0.1:{free_port()}/o")
    assert step == "discovery" and words.startswith("cannot reach"), words
    step, words = reason(ca_certificate=provider.tls.stranger.pem)
    assert step == "discovery" and words.startswith("TLS failure") and "certificate verify failed" in words
    step, words = reason(issuer=provider.issuer + "/")
    assert step == "discovery" and "calls itself" in words
    step, words = reason(client_secret="not-the-secret")
    assert step == "client" and "invalid_client" in words and "not-the-secret" not in words


def test_each_role_logs_in_and_gets_its_role(provider, state_dir, live_server):
    configured(provider)
    for role, uid in ROLE_USERS.items():
        session, answer = sso_login(live_server.url, uid, USER_PASSWORD, str(provider.tls.ca_file))
        assert answer.status_code == 200 and answer.url == f"{live_server.url}/", (answer.url, answer.text[:300])
        assert f'{uid} <span class="role">({role})</span>' in answer.text
        user = get_user_model().objects.get(username=uid)
        assert role_of(user) == role and not user.has_usable_password()
        assert DirectoryAccount.objects.get(user=user).source == "oidc"


def test_a_user_in_no_mapped_group_is_refused_with_the_reason(provider, state_dir, live_server):
    configured(provider)
    _, answer = sso_login(live_server.url, UNMAPPED_USER, USER_PASSWORD, str(provider.tls.ca_file))
    assert answer.url.startswith(f"{live_server.url}/accounts/login/")
    assert "Single sign-on refused: in no mapped group: its groups claim holds [&#x27;staff&#x27;]" in answer.text
    assert not get_user_model().objects.filter(username=UNMAPPED_USER).exists()


def test_a_local_account_of_the_same_name_is_not_taken_over(provider, state_dir, live_server, django_user_model):
    configured(provider)
    django_user_model.objects.create_user("victor", "", "local-password-1")
    _, answer = sso_login(live_server.url, "victor", USER_PASSWORD, str(provider.tls.ca_file))
    assert "an account of that name exists that this provider did not make" in answer.text
    assert not DirectoryAccount.objects.exists()


def test_no_secret_reaches_a_log(provider, state_dir, live_server, caplog):
    caplog.set_level(logging.DEBUG)
    configured(provider)
    sso_login(live_server.url, "alice", USER_PASSWORD, str(provider.tls.ca_file))
    check_oidc(configured(provider, client_secret="wrong-secret-9"), redirect_uri=provider.redirect_uri)
    sso_login(live_server.url, "oscar", USER_PASSWORD, str(provider.tls.ca_file))
    assert "OIDC" in caplog.text or "oidc" in caplog.text
    for secret in (provider.client_secret, "wrong-secret-9", USER_PASSWORD):
        assert secret not in caplog.text


def test_the_lockout_applies_to_single_sign_on(provider, state_dir, live_server, settings):
    configured(provider)
    browser = requests.Session()
    for n in range(settings.AXES_FAILURE_LIMIT):
        form = browser.get(f"{live_server.url}/accounts/login/", timeout=30)
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text).group(1)
        browser.post(
            f"{live_server.url}/accounts/login/",
            data={"csrfmiddlewaretoken": token, "username": "alice", "password": f"guess-{n}"},
            timeout=30,
        )
    _, answer = sso_login(live_server.url, "alice", USER_PASSWORD, str(provider.tls.ca_file))
    assert "Single sign-on refused: too many failed logins for this name from this address" in answer.text
    assert not get_user_model().objects.filter(username="alice").exists()
