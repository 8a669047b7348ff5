"""The farms' parts of a backup (``system/backup``): the configuration document, and the farms' health checks.

``configuration`` is the export of ``config_io`` (policies, farms with backends and static sessions, and every
section other apps add to it, such as HTTP farms): a restore loads it as an import does, with the same checks
and located errors. ``health_checks`` are the farms' own checks by farm name, which the document leaves out.
"""

from __future__ import annotations

from typing import Any

from compiler.types import Json

from . import config_io, health_services
from .audit import current_actor
from .field_lists import HEALTH_CHECK_FIELDS
from .models import Farm, HealthCheck


def export_configuration() -> Json:
    document = config_io.export_config()
    document.pop("exported_at")
    return document


def restore_configuration(data: Any, result: config_io.ImportResult) -> None:
    before = len(result.errors)
    config_io.load_document(data, result, actor=current_actor())
    for error in result.errors[before:]:
        error.location = f"configuration.{error.location}" if error.location else "configuration"


def export_health_checks() -> list[Json]:
    checks = HealthCheck.objects.select_related("farm").order_by("farm__name")
    return [{"farm": c.farm.name, **{name: getattr(c, name) for name in HEALTH_CHECK_FIELDS}} for c in checks]


def restore_health_checks(data: Any, result: config_io.ImportResult) -> None:
    from system.backup.sections import fields_ok, items_ok, sync

    farms = {f.name: f for f in Farm.objects.all()}
    wanted: dict[str, tuple[str, Json]] = {}
    for index, entry in enumerate(items_ok(result, "health_checks", data)):
        where = f"health_checks[{index}]"
        if not fields_ok(result, where, entry, ("farm", *HEALTH_CHECK_FIELDS), HealthCheck):
            continue
        if entry.get("farm") not in farms:
            result.errors.append(config_io.ImportError_(where, "farm", f"No farm '{entry.get('farm')}' in the backup."))
            continue
        full = {n: entry.get(n, HealthCheck._meta.get_field(n).get_default()) for n in HEALTH_CHECK_FIELDS}
        wanted[entry["farm"]] = (where, full)
    existing = {check.farm.name: check for check in HealthCheck.objects.select_related("farm")}
    sync(
        result, "health_checks", existing, wanted, HEALTH_CHECK_FIELDS,
        create=lambda name, v: health_services.health_check_create(farm=farms[name], **v),
        update=lambda check, v: health_services.health_check_update(health_check=check, **v),
        delete=lambda check: health_services.health_check_delete(health_check=check),
    )  # fmt: skip


def register() -> None:
    from system.backup import sections

    sections.register("configuration", order=20, export=export_configuration, restore=restore_configuration)
    sections.register("health_checks", order=30, export=export_health_checks, restore=restore_health_checks)
