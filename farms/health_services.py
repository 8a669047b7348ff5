"""The only code that writes health: check settings (API) and health transitions (healthd).

Check settings are audited like every operator's write (:mod:`farms.audit`); health transitions are
healthd's, recorded as :class:`HealthEvent` rows instead.

A transition that changes whether a backend takes new connections bumps the
configuration generation and asks for an apply, exactly like an operator's
write, so the backend leaves or rejoins the scheduler through the normal
apply pipeline (coalescing, ApplyRun, pending/applied status).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from lbweb import enqueue
from lbweb.writes import validated_save

from . import syslog_events
from .audit import audited
from .choices import BackendHealthChoices, HealthCheckTypeChoices
from .field_lists import HEALTH_CHECK_FIELDS
from .models import Backend, Farm, HealthCheck, HealthEvent
from .services import mark_farms_changed

log = logging.getLogger("lbweb.health")


@dataclass(frozen=True)
class HealthTransition:
    """healthd's verdict on one backend: its new health and why."""

    backend_id: int
    health: str
    reason: str = ""
    at: datetime | None = None


def takes_traffic(health: str) -> bool:
    """Only a backend healthd saw down is left out; 'unknown' (not checked yet) keeps its traffic."""
    return health != BackendHealthChoices.DOWN


@audited("create")
@transaction.atomic
def health_check_create(*, farm: Farm, **values) -> HealthCheck:
    """Give a farm its own health check (replacing its protocol's default)."""
    check = HealthCheck(farm=farm)
    validated_save(check, HEALTH_CHECK_FIELDS, values)
    _check_changed(farm)
    return check


@audited("update", "health_check")
@transaction.atomic
def health_check_update(*, health_check: HealthCheck, **values) -> HealthCheck:
    """Change some settings of a farm's health check."""
    validated_save(health_check, HEALTH_CHECK_FIELDS, values)
    _check_changed(health_check.farm)
    return health_check


@audited("delete", "health_check")
@transaction.atomic
def health_check_delete(*, health_check: HealthCheck) -> None:
    """Remove a farm's own check: its protocol's default applies again."""
    farm = health_check.farm
    health_check.delete()
    _check_changed(Farm.objects.get(pk=farm.pk))


def _check_changed(farm: Farm) -> None:
    """With no check left, nobody will ever bring a down backend back: every backend becomes 'unknown'."""
    if HealthCheck.effective_for(farm).type == HealthCheckTypeChoices.NONE:
        stale = farm.backends.exclude(health=BackendHealthChoices.UNKNOWN)
        _record(
            [HealthTransition(b.id, BackendHealthChoices.UNKNOWN, "health checking off") for b in stale],
            also_changed=[farm.pk],
        )
    else:
        mark_farms_changed([farm.pk])


@transaction.atomic
def health_record(transitions: Iterable[HealthTransition]) -> list[int]:
    """Record healthd's transitions in one transaction; returns the ids of the backends that changed.

    A transition to the health a backend already has (or of a backend deleted
    meanwhile) is ignored. One generation bump covers every farm whose
    active backends changed; backends that went down in a farm whose check
    says so get their connections cut by the worker after the apply.
    """
    return _record(list(transitions), also_changed=[])


def _record(transitions: list[HealthTransition], also_changed: list[int]) -> list[int]:
    backends = Backend.objects.select_related("farm__health_check").in_bulk([t.backend_id for t in transitions])
    now = timezone.now()
    changed, events, farms, cut = [], [], set(also_changed), []
    for t in transitions:
        backend = backends.get(t.backend_id)
        if backend is None or backend.health == t.health:
            continue
        previous, at, reason = backend.health, t.at or now, t.reason[:200]
        backend.health, backend.health_changed, backend.health_reason = t.health, at, reason
        changed.append(backend)
        events.append(HealthEvent(backend=backend, time=at, previous=previous, current=t.health, reason=reason))
        if takes_traffic(previous) != takes_traffic(t.health):
            farms.add(backend.farm_id)
            if t.health == BackendHealthChoices.DOWN and HealthCheck.effective_for(backend.farm).cut_connections:
                cut.append(backend.id)
    Backend.objects.bulk_update(changed, ["health", "health_changed", "health_reason"])
    HealthEvent.objects.bulk_create(events)
    if farms:
        mark_farms_changed(farms)
    for backend_id in cut:  # queued after the apply, so the backend has left the scheduler first
        enqueue.send_after_commit(
            "farms.tasks.cut_backend_connections", args=[backend_id], what=f"cutting backend {backend_id}'s connections"
        )
    for event in events:
        log.info("backend %s: %s -> %s (%s)", event.backend, event.previous, event.current, event.reason)
        syslog_events.health(event)
    return [b.id for b in changed]
