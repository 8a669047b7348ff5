"""The OpenID Connect Test: the issuer's discovery document, its signing keys, and whether the provider accepts
lbweb's client ID and secret (a code exchange with a code that cannot be valid: the provider answers
``invalid_client`` for wrong credentials, ``invalid_grant`` for a good client with a bad code)."""

from __future__ import annotations

import secrets

import requests

from ..models import OidcSettings
from ..oidc_provider import ProviderError, describe, discover, verify_for
from . import CheckResult


def check_oidc(row: OidcSettings, username: str = "", password: str = "", redirect_uri: str = "") -> CheckResult:
    result = CheckResult()
    try:
        provider = discover(row, fresh=True)
    except ProviderError as error:
        return result.failed("discovery", str(error))
    result.passed("discovery", f"{row.issuer} is a provider (discovery document found, issuer matches)")
    try:
        keys = requests.get(provider.jwks_uri, verify=verify_for(row), timeout=10)
        keys.raise_for_status()
        count = len(keys.json().get("keys", []))
    except requests.RequestException as error:
        return result.failed("keys", describe(error, provider.jwks_uri))
    except (ValueError, AttributeError):
        return result.failed("keys", f"{provider.jwks_uri} is not a key set (JWKS)")
    if not count:
        return result.failed("keys", f"{provider.jwks_uri} holds no key: no ID token could be verified")
    result.passed("keys", f"{count} signing key(s) published")
    form = {
        "grant_type": "authorization_code",
        "code": secrets.token_urlsafe(24),
        "redirect_uri": redirect_uri or "https://lbweb.invalid/oidc/callback/",
        "client_id": row.client_id,
        "client_secret": row.client_secret,
    }
    try:
        answer = requests.post(provider.token_endpoint, data=form, verify=verify_for(row), timeout=10)
    except requests.RequestException as error:
        return result.failed("client", describe(error, provider.token_endpoint))
    try:
        error_code = answer.json().get("error", "")
    except (ValueError, AttributeError):
        error_code = ""
    if error_code == "invalid_client" or answer.status_code == 401:
        return result.failed("client", "the provider refused the client ID or the client secret (invalid_client)")
    if error_code != "invalid_grant":
        return result.failed("client", f"unexpected answer of the token endpoint: {answer.status_code} {error_code}")
    result.passed("client", "the provider accepts the client ID and secret")
    result.passed("roles", f"a user's role comes from the {row.role_claim} claim at their login; a refused login "
                  "says why on the login page")  # fmt: skip
    return result
