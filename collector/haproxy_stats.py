"""HAProxy's statistics (``show stat``) as the collector's farm entries: requests/s, responses by class, latency,
sessions and queue per HTTP farm, and per backend its sessions in use against its declared capacity, its queue and
the time requests waited in it. Pure (no Django): rows in, entries out; the collector reads the rows through the
master socket and stores the entries beside the kernel's farms (collector/sampler.py)."""

from __future__ import annotations

from typing import Any

Rows = dict[tuple[str, str], dict[str, str]]


def index(rows: list[dict[str, str]]) -> Rows:
    return {(row["pxname"], row["svname"]): row for row in rows}


def _int(row: dict[str, str] | None, name: str) -> int | None:
    value = (row or {}).get(name, "")
    return int(value) if value.lstrip("-").isdigit() else None


def _rate(now: dict | None, before: dict | None, name: str, seconds: float) -> float | None:
    """Per second between two readings; None when unknown (first reading, a counter that went back: a reload)."""
    current, previous = _int(now, name), _int(before, name)
    if current is None or previous is None or seconds <= 0 or current < previous:
        return None
    return round((current - previous) / seconds, 1)


def _sum(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return round(sum(known), 1) if known else None


def farm_entries(now: Rows, before: Rows, seconds: float, service_farm: dict[str, int]) -> dict[int, dict[str, Any]]:
    """One entry per HTTP farm (frontend ``f<id>``); ``service_farm`` maps HAProxy backend names to farm ids."""
    entries: dict[int, dict[str, Any]] = {}
    for (px, sv), row in now.items():
        if sv != "FRONTEND" or not px[1:].isdigit() or px[0] != "f":
            continue
        old = before.get((px, sv))
        entry: dict[str, Any] = {
            "bytes_in": _rate(row, old, "bin", seconds),
            "bytes_out": _rate(row, old, "bout", seconds),
            "new_conns": _rate(row, old, "stot", seconds),
            "requests": _rate(row, old, "req_tot", seconds),
            "sessions": _int(row, "scur"),
            "active_conns": _int(row, "scur"),
            "backends": {},
        }
        for klass in range(1, 6):
            entry[f"responses_{klass}xx"] = _rate(row, old, f"hrsp_{klass}xx", seconds)
        entries[int(px[1:])] = entry
    queues: dict[int, list] = {}
    latencies: dict[int, list] = {}
    for (px, sv), row in now.items():
        farm_id = service_farm.get(px)
        if farm_id is None or farm_id not in entries:
            continue
        if sv == "BACKEND":
            queues.setdefault(farm_id, []).append(_int(row, "qcur"))
            latencies.setdefault(farm_id, []).append(_int(row, "rtime"))
            continue
        if not sv.startswith("b") or not sv[1:].isdigit():
            continue
        old = before.get((px, sv))
        limit = _int(row, "slim")
        entries[farm_id]["backends"][sv[1:]] = {
            "sessions": _int(row, "scur"),
            "active_conns": _int(row, "scur"),
            "capacity": limit if limit else None,
            "queue": _int(row, "qcur"),
            "queue_time_ms": _int(row, "qtime"),
            "latency_ms": _int(row, "rtime"),
            "new_conns": _rate(row, old, "stot", seconds),
            "bytes": _sum([_rate(row, old, "bin", seconds), _rate(row, old, "bout", seconds)]),
            "enabled": row.get("status", "").split(" ")[0] in ("UP", "no", "DRAIN", "OPEN"),
        }
    for farm_id, entry in entries.items():
        server_queue = [b["queue"] for b in entry["backends"].values()]
        entry["queue"] = _sum(queues.get(farm_id, []) + server_queue)
        known = [v for v in latencies.get(farm_id, []) if v]
        entry["latency_ms"] = max(known) if known else None
    return entries
