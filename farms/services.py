"""The only code that writes farms and backends.

Each write validates with the model's ``clean()`` (the same words for the UI
and the API), saves inside one transaction, bumps the configuration
generation, and asks the worker for an apply once the transaction commits.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from django.db import transaction

from .models import Backend, ConfigGeneration, Farm

log = logging.getLogger("lbweb.farms")

FARM_FIELDS = (
    "name",
    "description",
    "vip",
    "protocol",
    "ports",
    "mode",
    "scheduler",
    "state",
    "when_all_down",
    "fallback_address",
    "fallback_port",
)
BACKEND_FIELDS = ("address", "port", "weight", "state")


def enqueue_on_commit(task_name: str, *args: int, what: str) -> None:
    """Queue a worker task once the transaction commits; if the broker is down the saved change stays."""

    def enqueue() -> None:
        from . import tasks

        try:
            getattr(tasks, task_name).apply_async(args=list(args), retry=False)
        except Exception as exc:  # broker down: the worker's reconcile at start picks up what is pending
            log.warning("%s not enqueued (%s)", what, exc)

    transaction.on_commit(enqueue)


def request_apply(generation: int) -> None:
    """Enqueue an apply after commit; if the broker is down the change stays pending, never lost."""
    enqueue_on_commit("apply_config", generation, what=f"apply of generation {generation} (it stays pending)")


def mark_farms_changed(farm_ids: Iterable[int]) -> int:
    """Give these farms one new generation and ask for one apply (inside the caller's transaction)."""
    generation = ConfigGeneration.bump()
    Farm.objects.filter(pk__in=list(farm_ids)).update(config_generation=generation)
    request_apply(generation)
    return generation


def _mark_changed(farm: Farm) -> int:
    farm.config_generation = mark_farms_changed([farm.pk])
    return farm.config_generation


def validated_save(instance, fields: tuple[str, ...], values: dict) -> None:
    """Set ``values`` (only names in ``fields``) on a model instance, validate it with ``clean()``, save it."""
    unknown = set(values) - set(fields)
    if unknown:
        raise TypeError(f"unknown field(s): {', '.join(sorted(unknown))}")
    for name, value in values.items():
        setattr(instance, name, value)
    instance.full_clean()
    instance.save()


@transaction.atomic
def farm_create(**values) -> Farm:
    """Create a farm from its field values (see FARM_FIELDS)."""
    farm = Farm()
    validated_save(farm, FARM_FIELDS, values)
    _mark_changed(farm)
    return farm


@transaction.atomic
def farm_update(*, farm: Farm, **values) -> Farm:
    """Change some fields of a farm."""
    validated_save(farm, FARM_FIELDS, values)
    _mark_changed(farm)
    return farm


@transaction.atomic
def farm_delete(*, farm: Farm) -> None:
    """Delete a farm and its backends; the worker removes its rules."""
    farm.delete()
    request_apply(ConfigGeneration.bump())


@transaction.atomic
def backend_create(*, farm: Farm, **values) -> Backend:
    """Add a backend to a farm."""
    backend = Backend(farm=farm)
    validated_save(backend, BACKEND_FIELDS, values)
    _mark_changed(farm)
    return backend


@transaction.atomic
def backend_update(*, backend: Backend, **values) -> Backend:
    """Change some fields of a backend (weight, state, ...)."""
    validated_save(backend, BACKEND_FIELDS, values)
    _mark_changed(backend.farm)
    return backend


@transaction.atomic
def backend_delete(*, backend: Backend) -> None:
    """Remove a backend from its farm."""
    farm = backend.farm
    backend.delete()
    _mark_changed(farm)
