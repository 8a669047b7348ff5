"""OpenID Connect single sign-on: mozilla-django-oidc's authorization-code flow, configured from the database."""

from __future__ import annotations

import requests
from axes.handlers.proxy import AxesProxyHandler
from django.contrib.auth import get_user_model
from django.core.exceptions import SuspiciousOperation
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.utils import import_from_settings

from ..choices import SourceChoices
from ..directory import directory_login, may_try, refused, strongest
from ..models import DirectoryAccount, OidcSettings
from ..oidc_provider import ProviderError, discover, verify_for


def claim_values(value) -> list[str]:
    """A claim as a list of strings: a string, or a list of them (groups, roles)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list | tuple):
        return [item for item in value if isinstance(item, str)]
    return []


class OidcBackend(OIDCAuthenticationBackend):
    """mozilla-django-oidc with lbweb's rules: off unless enabled, the endpoints from the issuer's discovery
    document, the ID token's issuer and audience checked, the role from the role claim (no mapped value: no
    login), a name of a local account never taken over, and django-axes' lockout of that name from that address
    obeyed."""

    def __init__(self, *args, **kwargs):
        # The parent reads its settings here; lbweb reads them at the provider's callback only (Django makes a
        # backend for every login, password logins included).
        self.UserModel = get_user_model()
        self.row: OidcSettings | None = None

    def get_settings(self, attr, *args):
        row = self.row
        if row is not None:
            values = {
                "OIDC_RP_CLIENT_ID": row.client_id,
                "OIDC_RP_CLIENT_SECRET": row.client_secret,
                "OIDC_RP_SCOPES": row.scopes,
                "OIDC_VERIFY_SSL": verify_for(row),
                "OIDC_CREATE_USER": True,
            }
            if attr in values:
                return values[attr]
        return import_from_settings(attr, *args)

    def authenticate(self, request, **kwargs):
        if request is None or "code" not in request.GET or "state" not in request.GET:
            return None
        row = OidcSettings.load()
        if not row.enabled:
            return None
        self.row = row
        try:
            provider = discover(row)
        except ProviderError as error:
            refused(request, "OIDC", "?", str(error))
            return None
        self.OIDC_OP_TOKEN_ENDPOINT = provider.token_endpoint
        self.OIDC_OP_USER_ENDPOINT = provider.userinfo_endpoint
        self.OIDC_OP_JWKS_ENDPOINT = provider.jwks_uri
        self.OIDC_RP_CLIENT_ID = row.client_id
        self.OIDC_RP_CLIENT_SECRET = row.client_secret
        self.OIDC_RP_SIGN_ALGO = import_from_settings("OIDC_RP_SIGN_ALGO", "RS256")
        self.OIDC_RP_IDP_SIGN_KEY = None
        try:
            return super().authenticate(request, **kwargs)
        except requests.HTTPError as error:
            status = error.response.status_code if error.response is not None else "?"
            body = error.response.text[:200] if error.response is not None else ""
            refused(request, "OIDC", "?", f"the provider refused the code exchange ({status}): {body}")
        except requests.RequestException as error:
            refused(request, "OIDC", "?", f"cannot reach the provider: {error.__context__ or error}")
        except SuspiciousOperation as error:
            refused(request, "OIDC", "?", f"the provider's token did not verify: {error}")
        return None

    def verify_token(self, token, **kwargs):
        payload = super().verify_token(token, **kwargs)
        audience = payload.get("aud")
        audiences = [audience] if isinstance(audience, str) else list(audience or [])
        if payload.get("iss") != self.row.issuer:
            raise SuspiciousOperation(f"the ID token was issued by {payload.get('iss')!r}, not {self.row.issuer!r}")
        if self.row.client_id not in audiences:
            raise SuspiciousOperation("the ID token is not meant for this client (aud)")
        return payload

    def get_or_create_user(self, access_token, id_token, payload):
        row, request = self.row, self.request
        claims = {**payload, **self.get_userinfo(access_token, id_token, payload)}
        username = claims.get(row.username_claim)
        subject = claims.get("sub")
        if not isinstance(username, str) or not username or not isinstance(subject, str):
            refused(request, "OIDC", "?", f"the provider sent no {row.username_claim} claim")
            return None
        values = claim_values(claims.get(row.role_claim))
        role = strongest(role for role, value in row.role_values().items() if value in values)
        if role is None:
            refused(
                request, "OIDC", username, f"in no mapped group: its {row.role_claim} claim holds {values or 'nothing'}"
            )
            return None
        known = DirectoryAccount.objects.filter(source=SourceChoices.OIDC, subject=subject).exists()
        if not known and not may_try(username, SourceChoices.OIDC):
            refused(request, "OIDC", username, "an account of that name exists that this provider did not make")
            return None
        if (
            not known
            and DirectoryAccount.objects.filter(source=SourceChoices.OIDC, user__username__iexact=username)
            .exclude(subject="")
            .exists()
        ):
            refused(request, "OIDC", username, "another of the provider's users (another sub) has this name here")
            return None
        if AxesProxyHandler.is_locked(request, {"username": username}):
            refused(request, "OIDC", username, "too many failed logins for this name from this address")
            return None
        return directory_login(
            username=username,
            source=SourceChoices.OIDC,
            role=role,
            subject=subject,
            email=claims.get("email") if isinstance(claims.get("email"), str) else "",
            request=request,
        )
