"""A logged-in session that owes a second factor reaches only the second-factor pages and the logout.

lbweb's own login never logs such an account in before its code (accounts/second_factor.py); this catches every
other way a password alone makes a session (the admin site's login form) and a policy made stricter while
sessions were open: those sessions must give (or enrol) a code before anything else. Fail-closed: a path is let
through only by name. API requests with a token are not sessions and are not concerned (tokens stay as they are).
"""

from __future__ import annotations

from urllib.parse import quote

from django.http import JsonResponse
from django.shortcuts import redirect
from django.urls import reverse

from . import second_factor

ALLOWED_NAMES = ("accounts:second_factor", "logout")


class SecondFactorRequired:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        user = getattr(request, "user", None)
        if (
            user is not None
            and user.is_authenticated
            and not user.is_verified()
            and request.path not in {reverse(name) for name in ALLOWED_NAMES}
            and not request.path.startswith("/static/")
            and second_factor.needed(user)
        ):
            if request.path.startswith("/api/"):
                return JsonResponse(
                    {"detail": "This session has not given its second factor: log in again through the login page."},
                    status=403,
                )
            return redirect(f"{reverse('accounts:second_factor')}?next={quote(request.get_full_path())}")
        return self.get_response(request)
