"""Writes of the monitoring app: the scoped tokens of ``/metrics``, audited like every other write."""

from __future__ import annotations

from django.db import transaction

from farms.audit import audited

from .models import MetricsToken


@audited("create")
@transaction.atomic
def metrics_token_create(*, name: str, created_by=None) -> tuple[MetricsToken, str]:
    """A new token for a scraper; returns the row and the token (shown once, only its digest is kept)."""
    return MetricsToken.issue(name=name, created_by=created_by)


@audited("delete", "token")
@transaction.atomic
def metrics_token_delete(*, token: MetricsToken) -> None:
    """Revoke a scraper's token: its next scrape gets 401."""
    token.delete()
