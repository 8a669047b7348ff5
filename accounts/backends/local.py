"""Local accounts (Django's own passwords), tried after the directories, and only while the login policy allows."""

from __future__ import annotations

from django.contrib.auth.backends import ModelBackend

from ..models import DirectoryAccount, LoginPolicy


class LocalBackend(ModelBackend):
    """Django's ModelBackend, refusing every password while local logins are switched off, and never opening an
    account a directory made (those have no usable password; this says so in code too)."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        if username is None or password is None or not LoginPolicy.load().local_logins:
            return None
        user = super().authenticate(request, username=username, password=password, **kwargs)
        if user is not None and DirectoryAccount.objects.filter(user=user).exists():
            return None
        return user
