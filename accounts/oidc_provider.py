"""The OpenID Connect provider of the settings, found from its issuer (OpenID Connect Discovery 1.0).

The document at ``ISSUER/.well-known/openid-configuration`` names the endpoints; it must name the issuer exactly as
configured (the spec's rule: otherwise another provider could answer for it). Kept for five minutes per issuer and
CA, so a login costs no extra round trip while a changed provider is seen soon.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import requests

from .ca_files import ca_file
from .models import OidcSettings

CACHE_SECONDS = 300
_cache: dict[tuple[str, str], tuple[float, Provider]] = {}


class ProviderError(Exception):
    """The provider cannot be used: the words say why (unreachable, TLS, not a provider, another issuer)."""


@dataclass(frozen=True)
class Provider:
    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    userinfo_endpoint: str
    jwks_uri: str


def verify_for(row: OidcSettings) -> str | bool:
    """What requests checks the provider's certificate with: the settings' CA, else the system's."""
    return str(ca_file(row.ca_certificate)) if row.ca_certificate.strip() else True


def describe(error: requests.RequestException, url: str) -> str:
    if isinstance(error, requests.exceptions.SSLError):
        return f"TLS failure with {url}: {error.__context__ or error}"
    if isinstance(error, requests.exceptions.ConnectionError):
        return f"cannot reach {url}: {error.__context__ or error}"
    if isinstance(error, requests.exceptions.Timeout):
        return f"no answer from {url} in time"
    return f"{url}: {error}"


def discover(row: OidcSettings, *, fresh: bool = False) -> Provider:
    key = (row.issuer, row.ca_certificate)
    cached = _cache.get(key)
    if cached and not fresh and time.monotonic() - cached[0] < CACHE_SECONDS:
        return cached[1]
    url = row.issuer.rstrip("/") + "/.well-known/openid-configuration"
    try:
        answer = requests.get(url, verify=verify_for(row), timeout=10)
        answer.raise_for_status()
        document = answer.json()
    except requests.RequestException as error:
        raise ProviderError(describe(error, url)) from None
    except ValueError:
        raise ProviderError(f"{url} is not a provider's discovery document (not JSON)") from None
    if not isinstance(document, dict) or document.get("issuer") != row.issuer:
        named = document.get("issuer") if isinstance(document, dict) else None
        raise ProviderError(f"the provider at {url} calls itself {named!r}, not {row.issuer!r}")
    missing = [
        name
        for name in ("authorization_endpoint", "token_endpoint", "userinfo_endpoint", "jwks_uri")
        if not isinstance(document.get(name), str)
    ]
    if missing:
        raise ProviderError(f"the provider's discovery document lacks {', '.join(missing)}")
    provider = Provider(
        issuer=row.issuer,
        authorization_endpoint=document["authorization_endpoint"],
        token_endpoint=document["token_endpoint"],
        userinfo_endpoint=document["userinfo_endpoint"],
        jwks_uri=document["jwks_uri"],
    )
    _cache[key] = (time.monotonic(), provider)
    return provider
