"""The roles of :mod:`farms.roles`, enforced on every API view (the default permission class)."""

from __future__ import annotations

from rest_framework.permissions import SAFE_METHODS, BasePermission

from ..roles import ADMIN, VIEWER, has_role


def role_needed(request, view) -> str:
    """The view's own rule for this request if it has one; otherwise reads for all, writes for admins."""
    rule = getattr(view, "role_needed", None)
    needed = rule(request) if rule else None
    if needed:
        return needed
    return VIEWER if request.method in SAFE_METHODS else ADMIN


class RolePermission(BasePermission):
    """Authenticated users holding the role the request needs."""

    message = "Your role does not allow this."

    def has_permission(self, request, view) -> bool:
        user = request.user
        if not user or not user.is_authenticated:
            return False
        needed = role_needed(request, view)
        self.message = f"This needs the {needed} role."
        return has_role(user, needed)
