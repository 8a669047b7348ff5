"""The login pages: the password (any backend), the second factor, and the account's own second-factor page.

A password that passes for an account owing a second factor logs nobody in: the session only remembers who waits
(accounts/second_factor.py) and the browser goes to the code page. A wrong code counts as a failed login for
django-axes; a locked name and address get axes' lockout page there too.
"""

from __future__ import annotations

import base64

import segno
from axes.helpers import get_lockout_response
from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.mixins import LoginRequiredMixin
from django.core.exceptions import ValidationError
from django.shortcuts import redirect, render
from django.utils.decorators import method_decorator
from django.utils.http import url_has_allowed_host_and_scheme
from django.views import View
from django.views.decorators.cache import never_cache
from django.views.decorators.debug import sensitive_post_parameters
from django_otp import login as otp_login
from django_otp.plugins.otp_totp.models import TOTPDevice

from . import second_factor, services
from .forms import CodeForm
from .models import OidcSettings

SENSITIVE = sensitive_post_parameters("password", "otp_token")


class LoginView(auth_views.LoginView):
    """Django's login page, which hands an account owing a second factor to the code page instead of logging it in."""

    redirect_authenticated_user = True

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        oidc = OidcSettings.load()
        context["oidc_enabled"], context["oidc_label"] = oidc.enabled, oidc.button_label
        # Only "no role" is told (the password was right); anything else stays "wrong name or password".
        context["no_role"] = "in no mapped group" in getattr(self.request, "lbweb_login_refusal", "")
        return context

    def form_valid(self, form):
        user = form.get_user()
        if second_factor.needed(user):
            second_factor.begin(self.request, user, self.get_redirect_url())
            return redirect("accounts:second_factor")
        return super().form_valid(form)


def _safe_next(request, url: str) -> str:
    if url and url_has_allowed_host_and_scheme(url, allowed_hosts={request.get_host()}, require_https=False):
        return url
    return "/"


def qr_data_uri(text: str) -> str:
    """``text`` as a QR code, an SVG in a data: URI (the page's Content-Security-Policy allows those images)."""
    return segno.make(text, error="m").svg_data_uri(scale=4, dark="#000", light="#fff")


def enrolment_context(device: TOTPDevice) -> dict:
    secret = base64.b32encode(device.bin_key).decode()
    return {
        "secret": secret,
        "secret_spaced": " ".join(secret[i : i + 4] for i in range(0, len(secret), 4)),
        "qr": qr_data_uri(device.config_url),
    }


@method_decorator([SENSITIVE, never_cache], name="dispatch")
class SecondFactorView(View):
    """The code page: a pending login (password passed), or a logged-in session that has not given its code yet
    (the admin site's login, a policy made stricter). An account with no device enrols here first."""

    template_name = "registration/second_factor.html"

    def subject(self, request):
        if request.user.is_authenticated:
            return request.user, False
        return second_factor.pending_user(request), True

    def next_url(self, request, pending: bool) -> str:
        return _safe_next(request, second_factor.pending_next(request) if pending else request.GET.get("next", ""))

    def get(self, request):
        user, pending = self.subject(request)
        if user is None:
            messages.info(request, "Log in first (a login waits at most five minutes for its code).")
            return redirect("login")
        return self.page(request, user, CodeForm())

    def page(self, request, user, form, status=200):
        context = {"form": form, "account": user, "enrolled": second_factor.enrolled(user)}
        if not context["enrolled"]:
            context.update(enrolment_context(services.totp_unconfirmed(user)))
        return render(request, self.template_name, context, status=status)

    def post(self, request):
        user, pending = self.subject(request)
        if user is None:
            return redirect("login")
        if second_factor.locked(request, user):
            request.session.pop(second_factor.PENDING_KEY, None)
            return get_lockout_response(request, {"username": user.get_username()})
        form = CodeForm(request.POST)
        if not form.is_valid():
            return self.page(request, user, form, status=400)
        token = form.cleaned_data["otp_token"]
        if second_factor.enrolled(user):
            device = second_factor.verify(user, token)
            codes = None
        else:
            codes = services.totp_confirm(user=user, token=token)
            device = second_factor.totp_device(user) if codes is not None else None
        if device is None:
            second_factor.failed(request, user)
            if second_factor.locked(request, user):
                request.session.pop(second_factor.PENDING_KEY, None)
                return get_lockout_response(request, {"username": user.get_username()})
            form.add_error("otp_token", "Wrong code (or already used). Enter the current code of your app.")
            return self.page(request, user, form, status=400)
        next_url = self.next_url(request, pending)
        if pending:
            second_factor.finish(request, user, device)
        else:
            otp_login(request, device)
        if codes:
            return render(request, "registration/recovery_codes.html", {"codes": codes, "next": next_url})
        return redirect(next_url)


@method_decorator([SENSITIVE, never_cache], name="dispatch")
class EnrolView(LoginRequiredMixin, View):
    """Account › Second factor: enrol an authenticator app, replace it, renew the recovery codes, or remove it
    (when the policy does not require one)."""

    template_name = "accounts/second_factor.html"

    def context(self, request, form=None) -> dict:
        user = request.user
        context = {
            "form": form or CodeForm(),
            "enrolled": second_factor.enrolled(user),
            "required": second_factor.required_by_policy(user),
            "codes_left": second_factor.recovery_codes_left(user),
        }
        if not context["enrolled"] or request.GET.get("replace") or request.POST.get("action") == "replace":
            context["replacing"] = context["enrolled"]
            context.update(enrolment_context(services.totp_unconfirmed(user)))
        return context

    def get(self, request):
        return render(request, self.template_name, self.context(request))

    def post(self, request):
        user, action = request.user, request.POST.get("action", "enrol")
        form = CodeForm(request.POST)
        if not form.is_valid():
            return render(request, self.template_name, self.context(request, form), status=400)
        token = form.cleaned_data["otp_token"]
        if action in ("enrol", "replace"):
            codes = services.totp_confirm(user=user, token=token)
            if codes is None:
                second_factor.failed(request, user)
                form.add_error("otp_token", "Wrong code: enter the code your app shows now for this new secret.")
                return render(request, self.template_name, self.context(request, form), status=400)
            otp_login(request, second_factor.totp_device(user))
            return render(request, "registration/recovery_codes.html", {"codes": codes, "next": request.path})
        if second_factor.verify(user, token) is None:
            second_factor.failed(request, user)
            form.add_error("otp_token", "Wrong code: enter the current code of your app (or a recovery code).")
            return render(request, self.template_name, self.context(request, form), status=400)
        if action == "codes":
            codes = services.recovery_codes_renew(user=user)
            return render(request, "registration/recovery_codes.html", {"codes": codes, "next": request.path})
        if action == "remove":
            try:
                services.second_factor_remove(user=user, actor=user)
            except ValidationError as error:
                form.add_error(None, error.messages[0])
                return render(request, self.template_name, self.context(request, form), status=400)
            messages.success(request, "Second factor removed: your logins ask only for the password now.")
            return redirect("accounts:enrol")
        return redirect("accounts:enrol")
