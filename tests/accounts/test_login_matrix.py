"""The login matrix: every source of logins (local, LDAP with StartTLS, LDAPS, RADIUS, OpenID Connect) for each
role, without and with a second factor, through lbweb's real login pages over HTTP (the test's live server) and
real servers the test starts (tests/support/auth_servers.py). With a second factor the policy requires one of everyone:
the first login enrols (from the page's secret, as an app would), the next one gives a code computed from it.

The table is written to test-output/login-matrix.md.
"""

from __future__ import annotations

import re

import pytest
import requests
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from accounts import services
from farms.roles import role_of
from tests.conftest import OUTPUT
from tests.support.auth_flows import sso_login
from tests.support.auth_servers import (
    ROLE_USERS,
    USER_PASSWORD,
    FreeRadius,
    OidcProvider,
    Slapd,
    ldap_settings,
    oidc_settings,
    radius_settings,
)
from tests.support.totp import code

pytestmark = pytest.mark.django_db(transaction=True)
SOURCES = ("local", "ldap", "ldaps", "radius", "oidc")
ROLES = ("admin", "operator", "viewer")
CSRF = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')
RESULTS: dict[tuple[str, str, bool], str] = {}


@pytest.fixture(scope="module")
def servers(tmp_path_factory, live_server):
    started = {
        "slapd": Slapd(tmp_path_factory.mktemp("slapd")).start(),
        "radius": FreeRadius(tmp_path_factory.mktemp("radius")).start(),
        "oidc": OidcProvider(tmp_path_factory.mktemp("oidc"), f"{live_server.url}/oidc/callback/").start(),
    }
    yield started
    for server in started.values():
        server.stop()
    write_table()


def write_table() -> None:
    lines = ["| source | role | password only | with a second factor |", "|---|---|---|---|"]
    for source in SOURCES:
        for role in ROLES:
            lines.append(
                f"| {source} | {role} | {RESULTS.get((source, role, False), 'not run')} | "
                f"{RESULTS.get((source, role, True), 'not run')} |"
            )
    (OUTPUT / "login-matrix.md").write_text("\n".join(lines) + "\n")


def configure(source: str, servers, role: str, django_user_model) -> tuple[str, str]:
    """Enable only ``source``; the user of ``role`` there and its password."""
    if source == "local":
        user = django_user_model.objects.create_user(f"{role}-local", "", "local-password-1")
        user.groups.add(Group.objects.get_or_create(name=role)[0])
        return user.username, "local-password-1"
    if source in ("ldap", "ldaps"):
        security = "ldaps" if source == "ldaps" else "starttls"
        services.ldap_update(**ldap_settings(servers["slapd"], security=security))
    elif source == "radius":
        services.radius_update(**radius_settings(servers["radius"]))
    else:
        services.oidc_update(**oidc_settings(servers["oidc"]))
    return ROLE_USERS[role], USER_PASSWORD


def first_factor(base: str, source: str, username: str, password: str, ca_file: str):
    """The password (or the provider's login); the session and the page it ends on."""
    if source == "oidc":
        return sso_login(base, username, password, ca_file)
    session = requests.Session()
    form = session.get(f"{base}/accounts/login/", timeout=30)
    answer = session.post(
        f"{base}/accounts/login/",
        data={"csrfmiddlewaretoken": CSRF.search(form.text).group(1), "username": username, "password": password},
        timeout=30,
    )
    return session, answer


def give_code(session: requests.Session, page: requests.Response, token: str) -> requests.Response:
    return session.post(
        page.url, data={"csrfmiddlewaretoken": CSRF.search(page.text).group(1), "otp_token": token}, timeout=30
    )


@pytest.mark.parametrize("second_factor", [False, True], ids=["password", "second-factor"])
@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("source", SOURCES)
def test_login(servers, live_server, django_user_model, source, role, second_factor):
    base, ca_file = live_server.url, str(servers["oidc"].tls.ca_file)
    username, password = configure(source, servers, role, django_user_model)
    if second_factor:
        services.login_policy_update(second_factor_role="viewer")  # everyone
    session, page = first_factor(base, source, username, password, ca_file)
    if second_factor:
        assert page.url == f"{base}/accounts/login/code/" and "Set up a second factor" in page.text, page.url
        assert session.get(f"{base}/", timeout=30).url.startswith(f"{base}/accounts/login/")  # not logged in yet
        secret = re.search(r'data-secret="([A-Z2-7]+)"', page.text).group(1)
        codes = give_code(session, page, code(secret))
        assert "shown <strong>only now</strong>" in codes.text
        session.post(f"{base}/accounts/logout/", data={"csrfmiddlewaretoken": CSRF.search(codes.text).group(1)})
        session, page = first_factor(base, source, username, password, ca_file)
        assert page.url == f"{base}/accounts/login/code/" and "Enter the code" in page.text
        page = give_code(session, page, code(secret, steps_ahead=1))
    assert page.url == f"{base}/", (page.url, page.text[:400])
    assert f'{username} <span class="role">({role})</span>' in page.text
    assert role_of(get_user_model().objects.get(username=username)) == role
    RESULTS[(source, role, second_factor)] = f"logged in as {role}" + (", enrolled, then code" if second_factor else "")
