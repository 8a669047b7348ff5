"""BGP's worker tasks (queue ``dataplane``): each takes no data from the queue, it reads the database and the
kernel itself."""

from __future__ import annotations

import logging

from celery import shared_task
from celery.signals import task_postrun

from . import applier

log = logging.getLogger("lbweb.bgp")


@shared_task(name="bgp.tasks.deploy")
def deploy() -> dict:
    """Rewrite BIRD's file from the database and the kernel, and reload BIRD if it changed."""
    return applier.deploy()


@shared_task(name="bgp.tasks.heartbeat")
def heartbeat() -> dict:
    """Every 2 s (beat): what can serve here may have changed without a write (a farm applied, a drain period
    over), so the routes follow within one beat."""
    return applier.deploy()


@task_postrun.connect
def after_apply(sender=None, **_kwargs) -> None:
    """Right after the worker applied a change (a backend went down, a farm was added): the routes follow at once,
    in this process, rather than a beat later."""
    if getattr(sender, "name", "") != "farms.tasks.apply_config":
        return
    try:
        applier.deploy()
    except Exception as exc:  # the heartbeat does it again within 2 s
        log.warning("BGP deploy after apply failed: %s", exc)
