"""lbweb's events for remote syslog: one RFC 5424 message per event, sent to the local rsyslog (stdlib only).

Every process that makes an event sends it here: the web and the worker (audit entries, ``farms/audit.py``), the
worker (apply runs, ``dataplane/applier.py`` and ``dataplane/l7/applier.py``), healthd (health transitions,
``farms/health_services.py``) and the HA pair's transition handler (``dataplane/cluster/transition.py``, which
imports no Django). The message goes as one datagram to the unix socket rsyslog reads (``events_socket``, in the
state directory, so only lbweb can write to it); rsyslog forwards it to the servers of System › Remote syslog
(``compiler/syslog/render.py``).

Best effort, never blocking: the database holds the record of every event; when rsyslog is not running (no server
configured) or its socket is full, the message is dropped and the caller goes on.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import socket
from pathlib import Path

APP_NAME = "lbweb"
SD_ID = "lbweb@32473"  # 32473: the enterprise number RFC 5612 reserves for examples (lbweb has none of its own)
FACILITY = 16  # local0
SEVERITY = {"err": 3, "warning": 4, "notice": 5, "info": 6}
VALUE_CHARS = 2000  # at most this much of one structured-data value (an audit entry's changes)
MESSAGE_CHARS = 1000


def events_socket() -> Path:
    """Where rsyslog reads lbweb's events: ``LBWEB_SYSLOG_EVENTS_SOCKET``, else ``<state dir>/syslog/events.sock``."""
    named = os.environ.get("LBWEB_SYSLOG_EVENTS_SOCKET")
    if named:
        return Path(named)
    return (
        Path(os.environ.get("LBWEB_VAR_DIR") or Path(__file__).resolve().parent.parent / "var")
        / "syslog"
        / "events.sock"
    )


def _sd_value(value: object) -> str:
    """A PARAM-VALUE of RFC 5424 (section 6.3.3): ``"``, ``\\`` and ``]`` escaped with a backslash."""
    if not isinstance(value, str):
        value = json.dumps(value, sort_keys=True, default=str, ensure_ascii=False)
    value = value[:VALUE_CHARS]
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("]", "\\]")


def _sd_name(name: str) -> str:
    """An SD-NAME: printable US-ASCII but ``= ]"`` and space, at most 32 characters (lbweb's own names)."""
    cleaned = "".join(c for c in name if "!" <= c <= "~" and c not in '= ]"')
    return cleaned[:32] or "value"


def format_message(
    msgid: str,
    text: str,
    data: dict[str, object],
    *,
    severity: str = "info",
    hostname: str | None = None,
    now: datetime.datetime | None = None,
) -> bytes:
    """One RFC 5424 message: ``<PRI>1 TIMESTAMP HOSTNAME lbweb PROCID MSGID [lbweb@32473 k="v" ...] text``."""
    pri = FACILITY * 8 + SEVERITY[severity]
    stamp = (now or datetime.datetime.now(datetime.UTC)).isoformat(timespec="microseconds").replace("+00:00", "Z")
    host = (hostname or socket.gethostname())[:255] or "-"
    params = " ".join(f'{_sd_name(k)}="{_sd_value(v)}"' for k, v in data.items() if v is not None and v != "")
    sd = f"[{SD_ID} {params}]" if params else "-"
    body = " ".join(text.split())[:MESSAGE_CHARS]
    return f"<{pri}>1 {stamp} {host} {APP_NAME} {os.getpid()} {msgid} {sd} {body}".encode()


def send(msgid: str, text: str, data: dict[str, object], *, severity: str = "info") -> bool:
    """Send one event to the local rsyslog; False when it was dropped (no rsyslog, or its queue is full)."""
    with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.setblocking(False)
        sock.sendto(format_message(msgid, text, data, severity=severity), str(events_socket()))
        return True
    return False
