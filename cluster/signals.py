"""A configuration change queues an apply (``farms.tasks.apply_config``); on a cluster's master it also queues
the push of the configuration to the peer, right behind it on the same queue. Hooked on Celery's publish
signal so that the farms app needs no knowledge of the cluster."""

from __future__ import annotations

import logging

from celery.signals import before_task_publish

log = logging.getLogger("lbweb.cluster")


@before_task_publish.connect
def push_after_apply(sender: str | None = None, **_kwargs) -> None:
    if sender != "farms.tasks.apply_config":
        return
    from .models import Cluster
    from .roles import local_role

    try:
        if not Cluster.objects.filter(pk=1, enabled=True).exists() or local_role()["role"] != "master":
            return
        from lbweb.celery import app  # by name: the web process never imports the worker's tasks

        app.send_task("cluster.tasks.push_config", retry=False)
        app.send_task("cluster.tasks.deploy", retry=False)  # a farm's VIP added or removed while master
    except Exception as exc:  # the heartbeat pushes what this missed
        log.warning("cluster push not enqueued (%s)", exc)
