"""Celery tasks: interfaces only. They carry a generation, never rules, and call the dataplane service."""

from __future__ import annotations

from celery import shared_task
from celery.signals import worker_ready

from . import dataplane


@shared_task(name="farms.tasks.apply_config")
def apply_config(generation: int | None = None) -> int | None:
    """Apply the configuration up to at least ``generation`` (coalesced with any later change)."""
    run = dataplane.Applier().apply_pending(requested=generation)
    return run.pk if run else None


@shared_task(name="farms.tasks.reconcile")
def reconcile(reason: str = "reconcile") -> int | None:
    """Compare the kernel with the database and repair any drift."""
    run = dataplane.Applier().reconcile(reason=reason)
    return run.pk if run else None


@shared_task(name="farms.tasks.cut_backend_connections")
def cut_backend_connections(backend_id: int) -> int:
    """Delete the established connections of a backend that went down (its id only; the rest is read here)."""
    return dataplane.cut_backend_connections(backend_id)


@worker_ready.connect
def restore_at_boot(sender=None, **_kwargs) -> None:
    """When the worker starts (boot, restart), make the kernel match the database."""
    dataplane.ensure_forwarding()
    reconcile.apply_async(kwargs={"reason": "worker start"})
