"""HAProxy's statistics (``show stat``) as the collector's farm entries: requests/s, responses by class, latency,
sessions, queue, retries and redispatches per HTTP farm, and per backend its sessions in use against its declared
capacity, its queue and the time requests waited in it. Pure (no Django): rows in, entries out; the collector reads
the rows through the master socket and stores the entries beside the kernel's farms (collector/sampler.py)."""

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


def farm_entries(
    now: Rows, before: Rows, seconds: float, service_farm: dict[str, int]
) -> tuple[dict[int, dict[str, Any]], dict[int, str]]:
    """One entry per HTTP farm (frontend ``f<id>``); ``service_farm`` maps HAProxy backend names to farm ids.

    Each farm is built on its own: one whose rows cannot be read (a field HAProxy spells differently) gets no
    entry but an error (farm id -> why, the second result), and every other farm its entry."""
    by_proxy: dict[str, list[tuple[str, dict[str, str]]]] = {}
    for (px, sv), row in now.items():
        by_proxy.setdefault(px, []).append((sv, row))
    farm_proxies: dict[int, list[str]] = {}
    for px, farm_id in service_farm.items():
        farm_proxies.setdefault(farm_id, []).append(px)
    entries: dict[int, dict[str, Any]] = {}
    errors: dict[int, str] = {}
    for px in by_proxy:
        if px[:1] != "f" or not px[1:].isdigit() or (px, "FRONTEND") not in now:
            continue
        farm_id = int(px[1:])
        try:
            entries[farm_id] = farm_entry(px, by_proxy, farm_proxies.get(farm_id, []), now, before, seconds)
        except Exception as exc:  # this farm says why it has no figures; the others go on
            errors[farm_id] = f"HAProxy's statistics not read: {type(exc).__name__}: {exc}"
    return entries, errors


def farm_entry(
    frontend: str,
    by_proxy: dict[str, list[tuple[str, dict[str, str]]]],
    proxies: list[str],
    now: Rows,
    before: Rows,
    seconds: float,
) -> dict[str, Any]:
    """The entry of the farm whose frontend is ``frontend``, from its rows and those of its HAProxy backends
    (``proxies``)."""
    row, old = now[(frontend, "FRONTEND")], before.get((frontend, "FRONTEND"))
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
    queues: list[int | None] = []
    latencies: list[int | None] = []
    retries: list[float | None] = []
    redispatches: list[float | None] = []
    for px in proxies:
        for sv, server in by_proxy.get(px, []):
            if sv == "BACKEND":
                queues.append(_int(server, "qcur"))
                latencies.append(_int(server, "rtime"))
                retries.append(_rate(server, before.get((px, sv)), "wretr", seconds))
                redispatches.append(_rate(server, before.get((px, sv)), "wredis", seconds))
                continue
            if not sv.startswith("b") or not sv[1:].isdigit():
                continue
            previous = before.get((px, sv))
            limit = _int(server, "slim")
            entry["backends"][sv[1:]] = {
                "sessions": _int(server, "scur"),
                "active_conns": _int(server, "scur"),
                "capacity": limit if limit else None,
                "queue": _int(server, "qcur"),
                "queue_time_ms": _int(server, "qtime"),
                "latency_ms": _int(server, "rtime"),
                "new_conns": _rate(server, previous, "stot", seconds),
                "bytes": _sum([_rate(server, previous, "bin", seconds), _rate(server, previous, "bout", seconds)]),
                "enabled": server.get("status", "").split(" ")[0] in ("UP", "no", "DRAIN", "OPEN"),
            }
    server_queue = [b["queue"] for b in entry["backends"].values()]
    entry["queue"] = _sum(queues + server_queue)
    entry["retries"], entry["redispatches"] = _sum(retries), _sum(redispatches)  # retry_on, redispatch
    known = [v for v in latencies if v]
    entry["latency_ms"] = max(known) if known else None
    return entry
