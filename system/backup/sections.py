"""The parts of a backup: every app that holds some of the appliance's state registers one section.

A section is ``export()`` (its part as JSON, secrets included: the archive is encrypted) and
``restore(data, result)``, which makes the app's state equal to ``data`` through the app's services inside the
restore's one transaction. Problems go into ``result.errors`` (``farms.config_io.ImportError_``: location,
field, message) and objects into ``result.count(...)``; any error rolls the whole restore back. ``finish`` (optional)
runs after every section's restore, in the same order (certificates no farm needs any more go there).

Sections restore in ``order`` (lower first): what others refer to by name comes before them (certificates before
HTTP farms, directories before the login policy). An app registers its section from its ``AppConfig.ready()``; an
archive without a section's key (made before the app had one) leaves that part as it is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from farms.config_io import ImportResult


@dataclass(frozen=True)
class BackupSection:
    key: str
    order: int
    export: Callable[[], Any]
    restore: Callable[[Any, ImportResult], None]
    finish: Callable[[Any, ImportResult], None] | None = None


SECTIONS: dict[str, BackupSection] = {}


def register(
    key: str,
    *,
    order: int,
    export: Callable[[], Any],
    restore: Callable[[Any, ImportResult], None],
    finish: Callable[[Any, ImportResult], None] | None = None,
) -> None:
    """Put an app's part of the appliance into every backup and restore (call it from ``ready()``)."""
    SECTIONS[key] = BackupSection(key, order, export, restore, finish)


def ordered() -> list[BackupSection]:
    return sorted(SECTIONS.values(), key=lambda s: (s.order, s.key))


def fields_ok(result: ImportResult, location: str, item: Any, fields: tuple[str, ...], model=None) -> bool:
    """``item`` is an object of only ``fields``, each of a JSON type its model field holds (``config_io``'s check);
    every problem is reported at ``location``."""
    from farms.config_io import ImportError_, type_errors

    if not isinstance(item, dict):
        result.errors.append(ImportError_(location, "__all__", "Must be an object."))
        return False
    problems = [(name, f"Unknown field '{name}'.") for name in sorted(set(item) - set(fields))]
    if model is not None:
        problems += type_errors(model, {k: v for k, v in item.items() if k in fields})
    for name, message in problems:
        result.errors.append(ImportError_(location, name, message))
    return not problems


def items_ok(result: ImportResult, location: str, value: Any) -> list:
    """``value`` as a list, or [] with an error at ``location``."""
    from farms.config_io import ImportError_

    if isinstance(value, list):
        return value
    result.errors.append(ImportError_(location, "__all__", "Must be a list."))
    return []


def attempt(result: ImportResult, location: str, write) -> bool:
    """Run one service call: True, or False with its refusal (ValidationError) recorded at ``location``."""
    from django.core.exceptions import ValidationError

    from farms.config_io import validation_errors

    try:
        write()
        return True
    except ValidationError as exc:
        result.errors.extend(validation_errors(location, exc))
        return False


def sync(
    result: ImportResult,
    kind: str,
    existing: dict[str, Any],
    wanted: dict[str, tuple[str, dict]],
    fields: tuple[str, ...],
    *,
    create: Callable[[str, dict], Any],
    update: Callable[[Any, dict], Any],
    delete: Callable[[Any], Any],
    location: str = "",
) -> None:
    """Make the objects of one kind, by name, what the archive holds (``wanted``: where in it, every field's
    value) through the app's services: those it lacks deleted, the others created, updated, or counted unchanged.
    Each refusal is recorded where it was found (a deletion's at ``location``, by default ``kind``)."""
    for name, obj in existing.items():
        if name not in wanted and attempt(result, location or kind, lambda o=obj: delete(o)):
            result.count(kind, "deleted", name)
    for name, (where, values) in wanted.items():
        obj = existing.get(name)
        if obj is None:
            if attempt(result, where, lambda n=name, v=values: create(n, v)):
                result.count(kind, "created", name)
        elif {n: getattr(obj, n) for n in fields} == values:
            result.count(kind, "unchanged")
        elif attempt(result, where, lambda o=obj, v=values: update(o, v)):
            result.count(kind, "updated", name)
