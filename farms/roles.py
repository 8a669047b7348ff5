"""Roles, by Django group: what each kind of account may do, the same for the UI and the REST API.

* ``admin``: everything (superusers are admins whatever their groups).
* ``operator``: day-to-day operation: backend states (enable, drain, disable, cut), flushing
  learnt sessions and retrying an isolated farm; no creation, deletion or edit of farms, backends'
  other fields or policies.
* ``viewer``: read only.

An account in no role group can log in and read, like a viewer. The groups are created by a data
migration (``farms/migrations/0003_audit_and_roles.py``); put a user in one with the admin site or
``manage.py shell``. A directory's account (LDAP, RADIUS, OpenID Connect) is put in the group its directory
maps at every login (accounts/directory.py).
"""

from __future__ import annotations

from django.contrib.auth.mixins import LoginRequiredMixin
from django.core.exceptions import PermissionDenied

ADMIN = "admin"
OPERATOR = "operator"
VIEWER = "viewer"
ROLES = (ADMIN, OPERATOR, VIEWER)  # strongest first
RANK = {VIEWER: 0, OPERATOR: 1, ADMIN: 2}

# The backend fields an operator may change (everything else is configuration, for admins).
OPERATOR_BACKEND_FIELDS = frozenset({"state"})


def role_of(user) -> str | None:
    """The strongest role of ``user``; None for an anonymous user."""
    if user is None or not user.is_authenticated:
        return None
    if user.is_superuser:
        return ADMIN
    cached = getattr(user, "_lbweb_role", None)
    if cached is None:
        groups = set(user.groups.filter(name__in=ROLES).values_list("name", flat=True))
        cached = next((role for role in ROLES if role in groups), VIEWER)
        user._lbweb_role = cached
    return cached


def has_role(user, needed: str) -> bool:
    """True when ``user`` holds ``needed`` or a stronger role."""
    role = role_of(user)
    return role is not None and RANK[role] >= RANK[needed]


class RoleRequiredMixin(LoginRequiredMixin):
    """A page for logged-in users holding ``required_role`` (GET) or ``write_role`` (POST)."""

    required_role = VIEWER
    write_role: str | None = None

    def role_needed(self, request) -> str:
        if request.method in ("GET", "HEAD", "OPTIONS"):
            return self.required_role
        return self.write_role or self.required_role

    def dispatch(self, request, *args, **kwargs):
        if not request.user.is_authenticated:
            return self.handle_no_permission()
        if not has_role(request.user, self.role_needed(request)):
            raise PermissionDenied(f"This needs the {self.role_needed(request)} role.")
        return super().dispatch(request, *args, **kwargs)


def role_context(request) -> dict:
    """Template context: the user's role and what the page may offer them."""
    user = getattr(request, "user", None)
    return {
        "lbweb_role": role_of(user),
        "can_configure": has_role(user, ADMIN),
        "can_operate": has_role(user, OPERATOR),
    }
