"""The two pages of single sign-on: the start (off to the provider) and the callback (back with a code).

mozilla-django-oidc's views, reading the database's settings instead of Django's, sending a refused login back
to lbweb's login page with the reason, and a login that owes a second factor to the second-factor page.
"""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpResponseRedirect
from django.shortcuts import redirect
from django.urls import reverse
from mozilla_django_oidc.utils import import_from_settings
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from . import second_factor
from .models import OidcSettings
from .oidc_provider import ProviderError, discover


class OidcLoginStart(OIDCAuthenticationRequestView):
    """Send the browser to the provider's authorization endpoint (state, nonce and PKCE in the session)."""

    def __init__(self, *args, **kwargs):
        super(OIDCAuthenticationRequestView, self).__init__(*args, **kwargs)  # the parent would read settings
        self.row: OidcSettings | None = None

    def get_settings(self, attr, *args):
        if attr == "OIDC_RP_SCOPES" and self.row is not None:
            return self.row.scopes
        return import_from_settings(attr, *args)

    def get(self, request):
        self.row = OidcSettings.load()
        if not self.row.enabled:
            messages.error(request, "Single sign-on is not enabled.")
            return redirect("login")
        try:
            provider = discover(self.row)
        except ProviderError as error:
            messages.error(request, f"Single sign-on is unavailable: {error}.")
            return redirect("login")
        self.OIDC_OP_AUTH_ENDPOINT = provider.authorization_endpoint
        self.OIDC_RP_CLIENT_ID = self.row.client_id
        return super().get(request)


class OidcCallback(OIDCAuthenticationCallbackView):
    """The provider's answer: the backend checks it; success logs in (or asks the second factor first)."""

    def login_failure(self):
        reason = getattr(self.request, "lbweb_login_refusal", None)
        messages.error(self.request, f"Single sign-on refused: {reason}." if reason else "Single sign-on failed.")
        return HttpResponseRedirect(reverse("login"))

    def login_success(self):
        next_url = self.request.session.get("oidc_login_next") or ""
        if second_factor.needed(self.user):
            second_factor.begin(self.request, self.user, next_url)
            return HttpResponseRedirect(reverse("accounts:second_factor"))
        return super().login_success()
