"""The one way a service writes a row's operator fields: only the names it allows, validated by the model's
``clean()``, then saved (every app's services; the UI and the API refuse the same input with the same words)."""

from __future__ import annotations

from collections.abc import Iterable

from django.db import models


def validated_save(instance: models.Model, fields: Iterable[str], values: dict, *, update_fields=None):
    """Set ``values`` on a model instance, validate it with ``full_clean()``, save it (``update_fields``: only
    those columns, leaving the others to their own writer). A name outside ``fields`` is a programming error
    (TypeError), not input."""
    unknown = set(values) - set(fields)
    if unknown:
        raise TypeError(f"unknown field(s): {', '.join(sorted(unknown))}")
    for name, value in values.items():
        setattr(instance, name, value)
    instance.full_clean()
    instance.save(update_fields=update_fields)
    return instance
