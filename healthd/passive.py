"""HAProxy's passive health, read for healthd: the backends of HTTP farms HAProxy took out itself.

A backend with ``passive_errors`` is watched by HAProxy as it serves requests (``observe layer7 error-limit N
on-error mark-down``): after N failed requests in a row (no connection, an empty or broken answer, a 5xx) HAProxy
marks it down at once, without waiting for any check. healthd reads that verdict from HAProxy's statistics (the
server's status ``DOWN`` with check status ``HANA``, "health analyze") and takes it as its own: the backend is
recorded down with HAProxy's reason, like a failed check, and healthd's own check brings it back (rise). No Django
here: rows in, verdicts out; the daemon does the rest.
"""

from __future__ import annotations

import re

from dataplane.l7.runtime import EngineError, MasterCLI

SERVER = re.compile(r"b(\d+)")
PREFIX = "HAProxy passive health: "


def passive_downs(rows: dict[tuple[str, str], dict[str, str]]) -> dict[int, str]:
    """backend id -> HAProxy's reason, for each server HAProxy's passive health has out now."""
    out: dict[int, str] = {}
    for (_backend, server), row in rows.items():
        name = SERVER.fullmatch(server)
        if name and row.get("status", "").startswith("DOWN") and row.get("check_status") == "HANA":
            reason = row.get("last_chk") or row.get("check_desc") or "too many failed requests"
            out[int(name.group(1))] = (PREFIX + reason)[:200]
    return out


class PassiveWatch:
    """HAProxy's statistics through its master socket (as the collector reads them)."""

    def __init__(self, socket: str, timeout: float = 2.0):
        self.cli = MasterCLI(socket, timeout=timeout)

    def downs(self) -> dict[int, str]:
        """:func:`passive_downs` of HAProxy now; {} when HAProxy cannot be read (not running: nothing is out)."""
        try:
            return passive_downs(self.cli.servers())
        except (EngineError, KeyError):
            return {}
