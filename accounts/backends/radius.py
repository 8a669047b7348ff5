"""RADIUS logins for the UI, as network teams run them: the server checks the password and names the role."""

from __future__ import annotations

from django.contrib.auth import get_user_model

from ..choices import SourceChoices
from ..directory import directory_login, may_try, refused, strongest
from ..models import RadiusSettings
from ..radius_client import RadiusUnreachable, authenticate


def role_from(row: RadiusSettings, values: list[str]) -> str | None:
    """The strongest role whose configured value the reply's role attribute carries."""
    return strongest(role for role, value in row.role_values().items() if value in values)


class RadiusBackend:
    """An Access-Request per login; an Access-Accept whose role attribute names a mapped role logs the user in."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        if username is None or password is None:
            return None
        row = RadiusSettings.load()
        if not row.enabled or not may_try(username, SourceChoices.RADIUS):
            return None
        try:
            answer = authenticate(row, username, password)
        except RadiusUnreachable as unreachable:
            refused(request, "RADIUS", username, f"no verified answer from {unreachable}")
            return None
        if not answer.accepted:
            refused(request, "RADIUS", username, f"Access-Reject from {answer.server}")
            return None
        role = role_from(row, answer.attributes.get(row.role_attribute, []))
        if role is None:
            refused(request, "RADIUS", username, f"in no mapped group: its {row.role_attribute} names no mapped role")
            return None
        return directory_login(username=username, source=SourceChoices.RADIUS, role=role, request=request)

    def get_user(self, user_id):
        return get_user_model().objects.filter(pk=user_id, is_active=True).first()
