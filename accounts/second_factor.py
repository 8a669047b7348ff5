"""The second factor: a TOTP device (django-otp) and ten recovery codes (a static device), per account.

Who must show one: every account that enrolled one, and every account whose role the login policy names
(``second_factor_role``: admins, operators and up, or everyone). A login whose first factor passed (a password
checked by any backend, or an OpenID Connect provider's answer) is *pending* until the code is given: the session
holds only who is waiting (for :data:`PENDING_SECONDS`), and nobody is logged in until then. A wrong code counts as
a failed login for django-axes, like a wrong password: the same name from the same address is locked out after
the same number of failures, whichever factor failed.
"""

from __future__ import annotations

import time

from axes.handlers.proxy import AxesProxyHandler
from django.contrib import auth
from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_login_failed
from django_otp import devices_for_user
from django_otp.plugins.otp_static.models import StaticDevice, StaticToken
from django_otp.plugins.otp_totp.models import TOTPDevice

from farms.roles import RANK, role_of

from .models import LoginPolicy

PENDING_KEY = "lbweb_second_factor_pending"
PENDING_SECONDS = 300
RECOVERY_CODES = 10
TOTP_NAME = "authenticator app"
RECOVERY_NAME = "recovery codes"


def required_by_policy(user, policy: LoginPolicy | None = None) -> bool:
    """True when the login policy requires a second factor of ``user``'s role."""
    needed = (policy or LoginPolicy.load()).second_factor_role
    role = role_of(user)
    return bool(needed) and role is not None and RANK[role] >= RANK[needed]


def totp_device(user) -> TOTPDevice | None:
    return TOTPDevice.objects.filter(user=user, confirmed=True).first()


def enrolled(user) -> bool:
    return TOTPDevice.objects.filter(user=user, confirmed=True).exists()


def needed(user) -> bool:
    """True when ``user`` must give a code to log in (enrolled, or required by the policy)."""
    return enrolled(user) or required_by_policy(user)


def verify(user, token: str):
    """The confirmed device of ``user`` that accepts ``token`` (a TOTP code or an unused recovery code), or None."""
    token = "".join(token.split()).lower()
    if not token or len(token) > 16:
        return None
    for device in devices_for_user(user, confirmed=True):
        if device.verify_token(token):
            return device
    return None


def recovery_codes_new(user) -> list[str]:
    """Ten new recovery codes for ``user`` (the old ones stop working); shown once, each usable once."""
    device, _ = StaticDevice.objects.get_or_create(user=user, name=RECOVERY_NAME, defaults={"confirmed": True})
    device.token_set.all().delete()
    codes = [StaticToken.random_token() for _ in range(RECOVERY_CODES)]
    StaticToken.objects.bulk_create(StaticToken(device=device, token=code) for code in codes)
    return codes


def recovery_codes_left(user) -> int:
    return StaticToken.objects.filter(device__user=user, device__name=RECOVERY_NAME).count()


# -- the pending login -------------------------------------------------------------------------------------


def begin(request, user, next_url: str = "") -> None:
    """The first factor passed: remember who waits for the second one (not a login yet)."""
    request.session[PENDING_KEY] = {
        "user": user.pk,
        "backend": user.backend,
        "next": next_url,
        "since": time.time(),
    }


def pending_user(request):
    """The account waiting for its second factor in this session, or None (none, or waited too long)."""
    pending = request.session.get(PENDING_KEY)
    if not pending:
        return None
    if time.time() - pending.get("since", 0) > PENDING_SECONDS:
        request.session.pop(PENDING_KEY, None)
        return None
    user = get_user_model().objects.filter(pk=pending["user"], is_active=True).first()
    if user is not None:
        user.backend = pending["backend"]
    return user


def pending_next(request) -> str:
    return (request.session.get(PENDING_KEY) or {}).get("next", "")


def locked(request, user) -> bool:
    return AxesProxyHandler.is_locked(request, {"username": user.get_username()})


def failed(request, user) -> None:
    """A wrong code: a failed login for django-axes (same name, same address, same count as a wrong password)."""
    user_login_failed.send(sender=__name__, credentials={"username": user.get_username()}, request=request)


def finish(request, user, device) -> None:
    """The second factor passed: log the user in, this session verified with ``device`` (django-otp)."""
    request.session.pop(PENDING_KEY, None)
    user.otp_device = device  # django-otp's user_logged_in handler marks the session verified
    auth.login(request, user, backend=user.backend)
