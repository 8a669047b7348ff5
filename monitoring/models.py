"""Monitoring keeps its series in Redis; the database holds only the scoped tokens of ``/metrics``."""

from __future__ import annotations

import hashlib
import secrets

from django.conf import settings
from django.db import models
from django.utils import timezone


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class MetricsToken(models.Model):
    """A token that can read ``/metrics`` and nothing else (a scraper's credential).

    Only its SHA-256 is stored; the token is shown once when made. It is not an API token: no other
    view looks in this table, so a leaked scraper configuration exposes the figures, never the
    configuration or a write. It is a random 256-bit secret, so a plain hash (no salt, no stretching) is
    enough and a lookup by digest costs one indexed query per scrape.
    """

    name = models.CharField(max_length=60, unique=True, help_text="Who scrapes with it, e.g. 'prometheus'.")
    digest = models.CharField(max_length=64, unique=True, editable=False)
    prefix = models.CharField(max_length=8, editable=False, help_text="The token's first characters, to tell it.")
    created = models.DateTimeField(default=timezone.now)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    last_used = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ("name",)

    def __str__(self) -> str:
        return f"metrics token {self.name} ({self.prefix}…)"

    def audit_state(self) -> dict:
        return {"name": self.name, "prefix": self.prefix}

    @classmethod
    def issue(cls, *, name: str, created_by=None) -> tuple[MetricsToken, str]:
        """A new token: (the row, the token itself, which is not kept anywhere)."""
        token = secrets.token_urlsafe(32)
        row = cls(name=name, digest=token_digest(token), prefix=token[:8], created_by=created_by)
        row.full_clean()
        row.save()
        return row, token

    @classmethod
    def authenticate(cls, token: str) -> MetricsToken | None:
        row = cls.objects.filter(digest=token_digest(token)).first() if token else None
        if row is not None and (row.last_used is None or (timezone.now() - row.last_used).total_seconds() > 60):
            cls.objects.filter(pk=row.pk).update(last_used=timezone.now())  # at most one write a minute
        return row
