"""Celery tasks of remote syslog: interfaces only (no settings travel in a message)."""

from __future__ import annotations

from celery import shared_task
from celery.signals import worker_ready


@shared_task(name="syslog.tasks.apply_syslog")
def apply_syslog() -> bool:
    """Write rsyslog's configuration from the database's syslog servers."""
    from . import applier

    return applier.apply().ok


@worker_ready.connect
def syslog_at_start(sender=None, **_kwargs) -> None:
    """At worker start (boot, upgrade): the file again from the database (a new lbweb may write it differently)."""
    apply_syslog.apply_async()
