"""A browser's single sign-on, as plain HTTP (requests): lbweb's SSO start, the provider's login form, the way back
to lbweb's callback. Used by the OIDC tests and the login matrix."""

from __future__ import annotations

import re

import requests

CSRF = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


def sso_login(base_url: str, username: str, password: str, ca_file: str) -> tuple[requests.Session, requests.Response]:
    """Start at lbweb's SSO button, sign in at the provider, follow the redirects back; the session and last answer."""
    session = requests.Session()  # verify= on each call: REQUESTS_CA_BUNDLE would win over session.verify
    page = session.get(f"{base_url}/oidc/authenticate/", timeout=30, verify=ca_file)  # -> the provider's login
    token = CSRF.search(page.text)
    assert token and "Provider login" in page.text, (page.url, page.text[:500])
    next_url = re.search(r'name="next" value="([^"]*)"', page.text).group(1).replace("&amp;", "&")
    answer = session.post(
        page.url.split("?")[0],
        data={"csrfmiddlewaretoken": token.group(1), "username": username, "password": password, "next": next_url},
        headers={"Referer": page.url},
        timeout=30,
        verify=ca_file,
    )
    return session, answer
