"""Template context of every page: where the logged-in account's password lives (a directory's account has no
local password to change)."""

from __future__ import annotations

from .models import DirectoryAccount


def account_context(request) -> dict:
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {"account_is_local": not DirectoryAccount.objects.filter(user=user).exists()}
