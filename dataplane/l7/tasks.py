"""Celery tasks of HTTP farms, run by the worker: interfaces only (names and ids in, the work in acme.py)."""

from __future__ import annotations

import logging

from celery import shared_task

from . import acme

log = logging.getLogger("lbweb.l7")


@shared_task(name="l7.tasks.acme_issue")
def acme_issue(name: str, domains: list[str]) -> int | None:
    """Ask the ACME server for a certificate (stored as ``name`` when it comes)."""
    try:
        return acme.issue(name, domains).pk
    except acme.AcmeError as exc:
        log.warning("ACME certificate %s for %s: %s", name, " ".join(domains), exc)
        return None


@shared_task(name="l7.tasks.acme_renew")
def acme_renew() -> list[str]:
    """Renew the ACME certificates that end within 30 days."""
    return acme.renew_due()
