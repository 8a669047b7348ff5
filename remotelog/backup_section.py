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
    from system.backup.sections import attempt, fields_ok, items_ok

    existing = {s.name: s for s in SyslogServer.objects.all()}
    wanted: dict[str, tuple[str, Json]] = {}
    for index, entry in enumerate(items_ok(result, "syslog_servers", data)):
        where = f"syslog_servers[{index}]"
        if not fields_ok(result, where, entry, FIELDS, SyslogServer):
            continue
        if entry.get("name") in wanted:
            result.errors.append(ImportError_(where, "name", f"Server '{entry.get('name')}' appears twice."))
            continue
        wanted[entry.get("name")] = (where, entry)
    for name, server in existing.items():
        if name not in wanted and attempt(
            result, "syslog_servers", lambda s=server: services.syslog_server_delete(server=s)
        ):
            result.count("syslog_servers", "deleted", name)
    for name, (where, entry) in wanted.items():
        values = {n: entry.get(n, SyslogServer._meta.get_field(n).get_default()) for n in FIELDS}
        server = existing.get(name)
        if server is None:
            if attempt(result, where, lambda v=values: services.syslog_server_create(**v)):
                result.count("syslog_servers", "created", name)
        elif {n: getattr(server, n) for n in FIELDS} == values:
            result.count("syslog_servers", "unchanged")
        elif attempt(result, where, lambda s=server, v=values: services.syslog_server_update(server=s, **v)):
            result.count("syslog_servers", "updated", name)


def register() -> None:
    from system.backup import sections

    sections.register("syslog_servers", order=80, export=export, restore=restore)
