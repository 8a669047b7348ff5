"""Celery tasks: interfaces only. They carry ids, never rules, and call the dataplane services."""

from __future__ import annotations

import functools

from celery import shared_task
from celery.signals import beat_init, worker_ready

from dataplane.l7 import applier as l7_dataplane
from dataplane.network import applier as network_dataplane
from farms import apply_queue, audit, versions
from farms.models import ApplyRun, ConfigGeneration
from lbweb import heartbeat

from . import applier as dataplane
from . import boot, sessions
from .unit_cache import UnitCache


@functools.cache
def worker_cache() -> UnitCache:
    """The worker's unit cache: one a process, outliving each task's Applier, so that a change costs one
    farm's compilation, not all of them (``unit_cache.py``). ``worker_cache.cache_clear()`` forgets it."""
    return UnitCache()


@shared_task(name="farms.tasks.apply_config")
def apply_config(generation: int | None = None) -> int | None:
    """Apply the configuration up to at least ``generation`` (coalesced with any later change).

    Writes made while this task waited queued nothing (``apply_queue``): it applies them too, so it
    asks for the newest generation, not only its own."""
    apply_queue.started()
    newest = ConfigGeneration.current()
    run = dataplane.Applier(cache=worker_cache()).apply_pending(requested=max(generation or 0, newest) or None)
    l7_run = l7_dataplane.apply()  # after the kernel's: an ApplyRun of HAProxy never claims an unseen generation
    keep_version_later(run)
    return run.pk if run else (l7_run.pk if l7_run else None)


@shared_task(name="farms.tasks.reconcile")
def reconcile(reason: str = "reconcile") -> int | None:
    """Compare the kernel with the database and repair any drift; read the interfaces and addresses again for the
    web (its page, and the validation of farms on the appliance's own addresses: network/appliance.py), since
    DHCP, keepalived's handler or an operator change them without lbweb's network apply."""
    run = dataplane.Applier(cache=worker_cache()).reconcile(reason=reason)
    l7_dataplane.apply(reason=reason)
    network_dataplane.publish()
    keep_version_later(run)
    return run.pk if run else None


@shared_task(name="farms.tasks.balance_least_connections")
def balance_least_connections() -> int | None:
    """Re-weight least-connections farms from live conntrack counts (at most once per beat tick)."""
    if sessions.refresh_least_connection_weights():
        run = dataplane.Applier(cache=worker_cache()).apply_pending(reason="least connections")
        keep_version_later(run)
        return run.pk if run else None
    return None


def keep_version_later(run) -> None:
    """Keep the configuration as a version after this task, behind the applies already queued: the export
    costs about a second at 10,000 farms (``bench/versions.py``), and an apply waiting must not wait for
    it. When later applies moved the configuration on, the version is theirs to keep. Without a broker
    (tests, a broker that just went away) it is kept now."""
    if run is None or not run.ok:
        return
    try:
        keep_version.apply_async(args=[run.pk], retry=False)
    except Exception:  # no broker: keep it now rather than lose it
        versions.record_applied(run)


@shared_task(name="farms.tasks.keep_version")
def keep_version(run_id: int) -> int | None:
    """Keep the configuration the kernel holds after apply run ``run_id`` (when it is still that one)."""
    version = versions.record_applied(ApplyRun.objects.filter(pk=run_id).first())
    return version.pk if version else None


@shared_task(name="farms.tasks.cut_backend")
def cut_backend(backend_id: int, audit_event_id: int | None = None) -> int:
    """End a backend's established connections now (maintenance 'cut'); the count goes into the cut's
    audit event (``connections_cut``)."""
    deleted = l7_dataplane.cut_backend(backend_id)  # an HTTP farm's: HAProxy's sessions
    if deleted is None:
        deleted = sessions.cut_backend(backend_id)
    audit.add_outcome(audit_event_id, connections_cut=deleted)
    return deleted


@shared_task(name="farms.tasks.flush_sessions")
def flush_sessions(farm_id: int, backend_id: int | None = None, client: str | None = None) -> int:
    """Forget learnt persistence entries of a farm: one backend's, one client's, or all.

    The farm's sessions are read again right after, so the API never shows what was just forgotten."""
    flushed = sessions.flush_learnt(farm_id, backend_id, client)
    sessions.publish_live(farm_id)
    return flushed


@shared_task(name="farms.tasks.report_sessions")
def report_sessions(farm_id: int) -> None:
    """Publish a farm's live persistence entries for the API (which answers from them, never waiting)."""
    sessions.publish_live(farm_id)


@shared_task(name="farms.tasks.cut_backend_connections")
def cut_backend_connections(backend_id: int) -> int:
    """Delete the established connections of a backend that went down (its id only; the rest is read here)."""
    cut = l7_dataplane.cut_backend(backend_id, only_if_down=True)  # an HTTP farm's: HAProxy's sessions
    return sessions.cut_backend_connections(backend_id) if cut is None else cut


@worker_ready.connect
def restore_at_boot(sender=None, **_kwargs) -> None:
    """When the worker starts (boot, restart), make the kernel match the database."""
    heartbeat.start_publisher("worker")
    boot.ensure_forwarding()
    boot.publish_capabilities()
    # The reconcile below applies every pending change; a claim left by a task queued before (lost
    # with a broker flush, or waiting for a worker that died) must not hold back the next writes.
    apply_queue.started()
    reconcile.apply_async(kwargs={"reason": "worker start"})


@beat_init.connect
def beat_heartbeat(sender=None, **_kwargs) -> None:
    """beat's liveness: without it no reconcile runs, and nothing else would tell."""
    heartbeat.start_publisher("beat")


@shared_task(name="system.tasks.scheduled_backup")
def scheduled_backup() -> str | None:
    """Write the scheduled backup when one is due (``system/backup/services.py``); beat asks every
    ``LBWEB_BACKUP_CHECK_SECONDS``. The path written, or None."""
    from system.backup import services as backup

    path = backup.scheduled_backup()
    return str(path) if path else None
