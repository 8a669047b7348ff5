"""The accounts a directory makes: who may be tried against which directory, and the role each login gives.

A directory (LDAP, RADIUS, OIDC) is asked only about a name that is no local account: a directory user called
``admin`` never takes over the local ``admin``, and a local password never opens a directory's account. Each
login sets the account's role from what the directory said this time (a user moved out of the admins' group is
an operator at the next login), and a role that changes is written to the audit trail.
"""

from __future__ import annotations

import logging

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction
from django.utils import timezone

from farms.audit import record
from farms.roles import ROLES

from .choices import SourceChoices
from .models import DirectoryAccount

logger = logging.getLogger("lbweb.accounts")


def source_of(user) -> str:
    """Where ``user``'s login is checked: a directory's name, or local."""
    account = DirectoryAccount.objects.filter(user=user).first()
    return account.source if account else SourceChoices.LOCAL


def may_try(username: str, source: str) -> bool:
    """True when ``source`` may check ``username``: no account has that name yet, or the source made it."""
    user = get_user_model().objects.filter(username__iexact=username).first()
    if user is None:
        return True
    return DirectoryAccount.objects.filter(user=user, source=source).exists()


def strongest(roles) -> str | None:
    """The strongest of ``roles`` (farms.roles.ROLES is strongest first), or None."""
    found = set(roles)
    return next((role for role in ROLES if role in found), None)


@transaction.atomic
def directory_login(*, username: str, source: str, role: str, subject: str = "", email: str = "", request=None):
    """The account of a directory user who just proved who they are: made at the first login, its role set to
    ``role`` (the directory's answer of this login). Returns the user."""
    users = get_user_model().objects
    account = None
    if subject:
        account = DirectoryAccount.objects.select_related("user").filter(source=source, subject=subject).first()
    user = account.user if account else users.filter(username__iexact=username).first()
    if user is None:
        user = users.create_user(username.lower(), email=email)  # no usable password: the directory checks it
        user.set_unusable_password()
        user.save(update_fields=["password"])
    if account is None:
        account, _ = DirectoryAccount.objects.get_or_create(user=user, defaults={"source": source})
    if email and user.email != email:
        user.email = email
        user.save(update_fields=["email"])
    before = account.role
    set_role(user, role)
    account.subject, account.role, account.last_login = subject or account.subject, role, timezone.now()
    account.save()
    if before != role:
        record(
            actor=None,
            action="directory role",
            object_type="account",
            object_id=user.pk,
            object_name=user.get_username(),
            before={"role": before or None, "source": source},
            after={"role": role, "source": source},
        )
    logger.info("%s login of %r: role %s", source, user.get_username(), role)
    return user


def set_role(user, role: str) -> None:
    """Make ``user`` a member of the group of ``role`` and of no other role's group."""
    groups = {group.name: group for group in Group.objects.filter(name__in=ROLES)}
    for name in ROLES:
        if name not in groups:
            groups[name] = Group.objects.create(name=name)
    user.groups.remove(*(groups[name] for name in ROLES if name != role))
    user.groups.add(groups[role])
    user._lbweb_role = None  # farms.roles caches the role on the instance


def refused(request, source: str, username: str, reason: str) -> None:
    """Say in the log why a directory refused a login (never the password), and keep the reason on the request
    for the login page."""
    address = request.META.get("REMOTE_ADDR", "?") if request is not None else "?"
    logger.info("%s refused the login of %r from %s: %s", source, username, address, reason)
    if request is not None:
        request.lbweb_login_refusal = reason
