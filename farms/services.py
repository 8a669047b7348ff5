"""The only code that writes farms and backends.

Each write validates with the model's ``clean()`` (the same words for the UI
and the API), saves inside one transaction, bumps the configuration
generation, and asks the worker for an apply once the transaction commits.
"""

from __future__ import annotations

import logging

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
)
BACKEND_FIELDS = ("address", "port", "weight", "state")


def request_apply(generation: int) -> None:
    """Enqueue an apply after commit; if the broker is down the change stays pending, never lost."""

    def enqueue() -> None:
        from .tasks import apply_config

        try:
            apply_config.apply_async(args=[generation], retry=False)
        except Exception as exc:  # broker down: reconcile at worker start applies it
            log.warning(
                "apply of generation %s not enqueued (%s); it stays pending",
                generation,
                exc,
            )

    transaction.on_commit(enqueue)


def _mark_changed(farm: Farm) -> int:
    generation = ConfigGeneration.bump()
    Farm.objects.filter(pk=farm.pk).update(config_generation=generation)
    farm.config_generation = generation
    request_apply(generation)
    return generation


def _assign(instance, fields: tuple[str, ...], values: dict) -> None:
    unknown = set(values) - set(fields)
    if unknown:
        raise TypeError(f"unknown field(s): {', '.join(sorted(unknown))}")
    for name, value in values.items():
        setattr(instance, name, value)


@transaction.atomic
def farm_create(**values) -> Farm:
    """Create a farm from its field values (see FARM_FIELDS)."""
    farm = Farm()
    _assign(farm, FARM_FIELDS, values)
    farm.full_clean()
    farm.save()
    _mark_changed(farm)
    return farm


@transaction.atomic
def farm_update(*, farm: Farm, **values) -> Farm:
    """Change some fields of a farm."""
    _assign(farm, FARM_FIELDS, values)
    farm.full_clean()
    farm.save()
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
    _assign(backend, BACKEND_FIELDS, values)
    backend.full_clean()
    backend.save()
    _mark_changed(farm)
    return backend


@transaction.atomic
def backend_update(*, backend: Backend, **values) -> Backend:
    """Change some fields of a backend (weight, state, ...)."""
    _assign(backend, BACKEND_FIELDS, values)
    backend.full_clean()
    backend.save()
    _mark_changed(backend.farm)
    return backend


@transaction.atomic
def backend_delete(*, backend: Backend) -> None:
    """Remove a backend from its farm."""
    farm = backend.farm
    backend.delete()
    _mark_changed(farm)
