"""Remote syslog's part of a backup (``system/backup``): the syslog servers, matched by name."""

from __future__ import annotations

from typing import Any

from compiler.types import Json
from farms.config_io import ImportError_, ImportResult

from . import services
from .models import FIELDS, SyslogServer


def export() -> list[Json]:
    return [{name: getattr(s, name) for name in FIELDS} for s in SyslogServer.objects.order_by("name")]


def restore(data: Any, result: ImportResult) -> None:
    from system.backup.sections import fields_ok, items_ok, sync

    existing = {s.name: s for s in SyslogServer.objects.all()}
    wanted: dict[str, tuple[str, Json]] = {}
    for index, entry in enumerate(items_ok(result, "syslog_servers", data)):
        where = f"syslog_servers[{index}]"
        if not fields_ok(result, where, entry, FIELDS, SyslogServer):
            continue
        if entry.get("name") in wanted:
            result.errors.append(ImportError_(where, "name", f"Server '{entry.get('name')}' appears twice."))
            continue
        values = {n: entry.get(n, SyslogServer._meta.get_field(n).get_default()) for n in FIELDS}
        wanted[entry.get("name")] = (where, values)
    sync(
        result, "syslog_servers", existing, wanted, FIELDS,
        create=lambda _name, v: services.syslog_server_create(**v),
        update=lambda server, v: services.syslog_server_update(server=server, **v),
        delete=lambda server: services.syslog_server_delete(server=server),
    )  # fmt: skip


def register() -> None:
    from system.backup import sections

    sections.register("syslog_servers", order=80, export=export, restore=restore)
