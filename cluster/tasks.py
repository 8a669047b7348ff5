"""The cluster's worker tasks (queue ``dataplane``): each takes no data from the queue, it reads the database."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from farms.models import ConfigGeneration

from . import engine, services, sync
from .models import Cluster
from .roles import local_role


@shared_task
def deploy() -> dict:
    """Rewrite keepalived's and conntrackd's files and the handler's plan from the database."""
    return engine.deploy()


def _status() -> dict:
    role = local_role()
    return {"node": settings.LBWEB_NODE_NAME, "role": str(role["role"]), "since": role["since"]}


@shared_task
def push_config() -> dict:
    """After a change on the master: the peer gets the whole configuration now (the backup follows in < 1 s)."""
    status = _status()
    if status["role"] != "master":
        return {"skipped": f"this node is {status['role']}"}
    return sync.push(status, with_config=True)


@shared_task
def heartbeat() -> dict:
    """Every 2 s: record this node's transitions, keep the files current, tell the peer our role, and push the
    configuration again if the peer has not acknowledged the current generation (a push it missed)."""
    services.ingest_journal()
    cluster = Cluster.objects.filter(pk=1).first()
    if cluster is None or not cluster.enabled:
        engine.deploy()
        return {"skipped": "no cluster"}
    engine.deploy()
    status = _status()
    behind = cluster.pushed_generation != ConfigGeneration.current() or bool(cluster.push_error)
    return sync.push(status, with_config=status["role"] == "master" and behind)
