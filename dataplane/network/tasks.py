"""Celery tasks of the network settings: interfaces only (ids and generations, never settings)."""

from __future__ import annotations

from celery import shared_task
from celery.signals import worker_ready


@shared_task(name="network.tasks.apply_network")
def apply_network(generation: int | None = None) -> bool | None:
    """Bring the kernel's links, addresses and routes to at least ``generation`` and write the files."""
    from . import applier as worker

    report = worker.apply_network(generation)
    return None if report is None else report.ok


@shared_task(name="network.tasks.publish_network")
def publish_network() -> None:
    """Read the kernel's links, addresses and routes again for the page."""
    from . import applier as worker

    worker.publish()


@worker_ready.connect
def network_at_start(sender=None, **_kwargs) -> None:
    """At worker start (boot): publish what the kernel has; re-apply when a change waits."""
    from network.models import NetworkSettings

    state = NetworkSettings.load()
    if state.generation > state.applied_generation:
        apply_network.apply_async(kwargs={"generation": state.generation})
    else:
        publish_network.apply_async()
