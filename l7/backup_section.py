"""The certificates' part of a backup (``system/backup``): each certificate with its chain and private key.

The configuration document names certificates and never carries a key (``config_section.py``); the backup's
archive is encrypted, so it carries them. Certificates restore before the configuration (its HTTP farms name them),
and those the backup does not hold are deleted after it, once no farm offers them.
"""

from __future__ import annotations

from typing import Any

from compiler.types import Json
from farms.config_io import ImportError_, ImportResult

from . import services
from .field_lists import CERTIFICATE_FIELDS
from .models import Certificate

FIELDS = (*CERTIFICATE_FIELDS, "source")


def export() -> list[Json]:
    return [{name: getattr(c, name) for name in FIELDS} for c in Certificate.objects.order_by("name")]


def restore(data: Any, result: ImportResult) -> None:
    from system.backup.sections import attempt, fields_ok, items_ok

    existing = {c.name: c for c in Certificate.objects.all()}
    seen = set()
    for index, entry in enumerate(items_ok(result, "certificates", data)):
        where = f"certificates[{index}]"
        if not fields_ok(result, where, entry, FIELDS, Certificate):
            continue
        name = entry.get("name")
        if name in seen:
            result.errors.append(ImportError_(where, "name", f"Certificate '{name}' appears twice."))
            continue
        seen.add(name)
        values = {n: entry.get(n, Certificate._meta.get_field(n).get_default()) for n in CERTIFICATE_FIELDS}
        current = existing.get(name)
        if current is None:
            source = entry.get("source") or Certificate._meta.get_field("source").get_default()
            if attempt(result, where, lambda v=values, s=source: services.certificate_create(source=s, **v)):
                result.count("certificates", "created", name)
        elif {n: getattr(current, n) for n in FIELDS} == {**values, "source": entry.get("source", current.source)}:
            result.count("certificates", "unchanged")
        elif attempt(result, where, lambda c=current, v=values: services.certificate_update(target=c, **v)):
            result.count("certificates", "updated", name)


def finish(data: Any, result: ImportResult) -> None:
    """Delete the certificates the backup does not hold (the configuration has let go of them by now)."""
    wanted = {entry.get("name") for entry in data if isinstance(entry, dict)} if isinstance(data, list) else set()
    from system.backup.sections import attempt

    for certificate in Certificate.objects.exclude(name__in=wanted):
        if attempt(result, "certificates", lambda c=certificate: services.certificate_delete(target=c)):
            result.count("certificates", "deleted", certificate.name)


def register() -> None:
    from system.backup import sections

    sections.register("certificates", order=10, export=export, restore=restore, finish=finish)
