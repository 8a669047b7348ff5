"""The cluster's worker tasks (queue ``dataplane``): each takes no data from the queue, it reads the database."""

from __future__ import annotations

import logging
import time

from celery import shared_task
from celery.signals import task_postrun
from django.conf import settings

from cluster import services, sync
from cluster.models import Cluster
from cluster.roles import local_role
from farms.models import ConfigGeneration

from . import applier as engine

log = logging.getLogger("lbweb.cluster")


@shared_task(name="cluster.tasks.deploy")
def deploy() -> dict:
    """Rewrite keepalived's and conntrackd's files and the handler's plan from the database."""
    return engine.deploy()


def _status() -> dict:
    role = local_role()
    return {"node": settings.LBWEB_NODE_NAME, "role": str(role["role"]), "since": role["since"]}


@shared_task(name="cluster.tasks.push_config")
def push_config() -> dict:
    """After a change on the master: the peer gets the whole configuration now (the backup follows in < 1 s)."""
    status = _status()
    if status["role"] != "master":
        return {"skipped": f"this node is {status['role']}"}
    return sync.push(status, with_config=True)


REDEPLOY_SECONDS = 30  # the files are rebuilt at least this often even when nothing changed (drift, a lost deploy)
RETRY_SECONDS = 10  # a peer that did not answer is tried again after this long, not at every heartbeat
_last = {"deployed": None, "deployed_at": 0.0, "failed_at": 0.0}


@task_postrun.connect
def after_apply(sender=None, **_kwargs) -> None:
    """Right after the worker applied a change, on a cluster's master: the peer gets the configuration and the
    VIPs follow the farms. Here, in the worker's process, rather than by queueing more tasks when the change is
    queued: a task published from inside another's publication waited seconds for the broker."""
    if getattr(sender, "name", "") != "farms.tasks.apply_config":
        return
    try:
        if Cluster.objects.filter(pk=1, enabled=True).exists() and str(local_role()["role"]) == "master":
            push_config()
            engine.deploy()
    except Exception as exc:  # the heartbeat does it again within 2 s
        log.warning("cluster push after apply failed: %s", exc)


@shared_task(name="cluster.tasks.heartbeat")
def heartbeat() -> dict:
    """Every 2 s: record this node's transitions, keep the files current, tell the peer our role, and push the
    configuration again if the peer has not acknowledged the current generation (a push it missed).

    It shares the worker with the applies, so it stays cheap: the files are rebuilt when the configuration moved
    (or every 30 s), and a peer that does not answer is left alone for 10 s rather than waited for every 2 s."""
    services.ingest_journal()
    cluster = Cluster.objects.filter(pk=1).first()
    generation = ConfigGeneration.current()
    now = time.monotonic()
    enabled = cluster is not None and cluster.enabled
    if _last["deployed"] != (generation, enabled) or now - _last["deployed_at"] > REDEPLOY_SECONDS:
        engine.deploy()
        _last.update(deployed=(generation, enabled), deployed_at=now)
    if not enabled:
        return {"skipped": "no cluster"}
    if cluster.push_error and now - _last["failed_at"] < RETRY_SECONDS:
        return {"skipped": "the peer did not answer; trying again later"}
    status = _status()
    behind = cluster.pushed_generation != generation or bool(cluster.push_error)
    result = sync.push(status, with_config=status["role"] == "master" and behind)
    if result.get("error"):
        _last["failed_at"] = now
    return result
