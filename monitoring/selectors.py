"""Reads for the API and the dashboard: series with their gaps, and the latest summary.

A point exists for every instant the collector sampled. Where it did not
(stopped, restarting, Redis down) the series carries an explicit gap point
(``{"t": ..., "gap": true}``, every value null), so a chart breaks its line
instead of drawing zeros or bridging the hole.
"""

from __future__ import annotations

import time
from collections import defaultdict
from datetime import UTC, datetime

from django.conf import settings

from compiler.types import Json
from farms.choices import L7_MODES
from farms.models import AuditEvent, Farm, HealthEvent

from .farm_index import MEASURED_MODES
from .store import (
    BACKEND_CENSUS_FIELDS,
    BACKEND_RATE_FIELDS,
    CENSUS_FIELDS,
    MINUTES,
    RATE_FIELDS,
    RAW,
    MetricStore,
    decode_farm_fields,
)

WINDOWS = {"5m": (300, RAW), "15m": (900, RAW), "1h": (3600, RAW), "24h": (86400, MINUTES)}
DEFAULT_WINDOW = "15m"
GAP_FACTOR = 2.5  # a hole longer than 2.5 steps is a gap, not jitter
STATE_LOOKBACK = 300  # steps read before a window to know the backend states at its start


def step_of(resolution: str) -> float:
    return settings.LBWEB_METRICS_INTERVAL if resolution == RAW else 60.0


def staleness(last: float | None, now: float, step: float) -> Json:
    age = None if last is None else max(now - last, 0.0)
    return {
        "last_sample": last,
        "age": None if age is None else round(age, 1),
        "stale": age is None or age > max(GAP_FACTOR * step, step + 4),
    }


def with_gaps(points: list[Json], step: float, since: float | None) -> list[Json]:
    """Insert a gap point after every hole in the sampling (also right after ``since``)."""
    result: list[Json] = []
    previous = since
    for point in points:
        if previous is not None and point["t"] - previous > GAP_FACTOR * step:
            result.append({"t": round(previous + step, 3), "gap": True})
        result.append(point)
        previous = point["t"]
    return result


def _window(window: str, since: float | None, now: float) -> tuple[float, str, float]:
    seconds, resolution = WINDOWS[window]
    start = now - seconds
    if since is not None and since > start:
        start = since
    return start, resolution, step_of(resolution)


def system_series(store: MetricStore, window: str, since: float | None = None, now: float | None = None) -> Json:
    """The system's points in ``window`` (after ``since`` when given, for live updates)."""
    now = now or time.time()
    start, resolution, step = _window(window, since, now)
    points = store.system_series(resolution, start)
    last = points[-1]["t"] if points else (store.latest() or {}).get("t")
    return {
        "series": "system",
        "window": window,
        "resolution": resolution,
        "step": step,
        "now": now,
        **staleness(last, now, step),
        "points": with_gaps(points, step, since),
    }


def _idle_point(t: float, census: bool, backends: dict[str, float], states: dict[str, bool]) -> Json:
    """A sample where the farm moved nothing: zeros for the farm and for each backend that existed then."""
    point: Json = {"t": t, **dict.fromkeys(RATE_FIELDS, 0.0)}
    if census:
        point.update(dict.fromkeys(CENSUS_FIELDS, 0.0))
    point["backends"] = {}
    for backend_id, created in backends.items():
        if created > t:
            continue  # not there yet: no zero either
        backend = dict.fromkeys(BACKEND_RATE_FIELDS, 0.0)
        if census:
            backend.update(dict.fromkeys(BACKEND_CENSUS_FIELDS, 0.0))
        if backend_id in states:  # as the collector last recorded it, never today's state
            backend["enabled"] = states[backend_id]
        point["backends"][backend_id] = backend
    return point


BYTE_FIELDS = ("bytes_in", "bytes_out", "packets_in", "packets_out")
BACKEND_BYTE_FIELDS = ("bytes", "packets")


def bytes_switched_off(count_bytes: bool, mode: str) -> bool:
    """Whether a farm's bytes are unknown because its operator turned their counting off: ``count_bytes``
    means something only for the farms lbweb counts (DSR and stateless are not measured at all, HTTP farms'
    figures are HAProxy's)."""
    return not count_bytes and mode in MEASURED_MODES


def _bytes_not_counted(point: Json) -> Json:
    """A point of a farm whose bytes the kernel does not count (``count_bytes`` off): its byte and packet rates
    are unknown, never the zeros an idle sample would give them."""
    point.update(dict.fromkeys(BYTE_FIELDS))
    for backend in (point.get("backends") or {}).values():
        backend.update(dict.fromkeys(BACKEND_BYTE_FIELDS))
    return point


def serving_status(state: str, health: str) -> str:
    """What a backend did with new connections, from its state and health: the words of the farm page."""
    if state == "disabled":
        return "disabled"
    if health == "down":
        return "down"
    if state == "drain":
        return "draining"
    return "serving"


def backend_history(farm: Farm, start: float, end: float) -> list[Json]:
    """Each backend's state and health over [start, end], from what was recorded: the audit trail (its
    creation, every state change, its deletion) and healthd's transitions (HealthEvent). Segments begin at
    the backend's creation, not at the window's start, and a backend deleted in the window ends there.

    The state at the window's start is the one the last change before it left; with none before, the
    one the first change in the window started from (its ``before``, a health event's ``previous``);
    with no change at all, the present one, which has held since the backend was created (every write
    is audited). Only the window's events and one event per backend before it are read: a farm with a
    long history costs what its window holds, every poll of the chart.
    """
    since = datetime.fromtimestamp(start, tz=UTC)
    audited = AuditEvent.objects.filter(farm_ref=farm.id, object_type="backend")
    current = {b.id: b for b in farm.backends.all()}
    audit: dict[int, list[AuditEvent]] = defaultdict(list)
    for event in audited.filter(time__gt=since).exclude(object_id=None).order_by("time", "id"):
        audit[event.object_id].append(event)
    health: dict[int, list[HealthEvent]] = defaultdict(list)
    for event in HealthEvent.objects.filter(backend__farm=farm, time__gt=since).order_by("time", "id"):
        health[event.backend_id].append(event)
    before_audit, before_health = _last_before(farm, audited.exclude(action="delete"), since, current)
    result = []
    for backend_id in sorted(current.keys() | audit.keys()):
        backend, events, changes = current.get(backend_id), audit[backend_id], health[backend_id]
        created = next((e.time.timestamp() for e in events if e.action == "create"), None)
        if created is None:
            created = backend.created.timestamp() if backend else start  # a deleted one existed at the start
        deleted = next((e.time.timestamp() for e in events if e.action == "delete"), None)
        begin, finish = max(start, created), min(end, deleted) if deleted else end
        if begin >= finish:
            continue
        prior, prior_health = before_audit.get(backend_id), before_health.get(backend_id)
        states = [(e.time.timestamp(), (e.after or {}).get("state")) for e in events if e.action != "delete"]
        states = [(t, value) for t, value in states if value]
        state = ((prior.after or {}).get("state") if prior else None) or next(
            ((e.before or {}).get("state") for e in events if (e.before or {}).get("state")), None
        )
        state = state or (states[0][1] if states else (backend.state if backend else "enabled"))
        level = prior_health.current if prior_health else (changes[0].previous if changes else None)
        level = level or (backend.health if backend else "unknown")
        reason = prior_health.reason if prior_health else ""
        moments = sorted([(t, "state", value, "") for t, value in states]
                         + [(e.time.timestamp(), "health", e.current, e.reason) for e in changes])  # fmt: skip
        timeline = [(created, state, level, reason)]
        for moment, kind, value, why in moments:
            if kind == "state":
                state = value
            else:
                level, reason = value, why
            timeline.append((moment, state, level, reason))
        segments: list[Json] = []
        for index, (moment, state_then, level_then, why) in enumerate(timeline):
            upto = timeline[index + 1][0] if index + 1 < len(timeline) else finish
            low, high = max(moment, begin), min(upto, finish)
            if high <= low:
                continue
            status = serving_status(state_then, level_then)
            last = segments[-1] if segments else None
            if last and (last["status"], last["state"], last["health"]) == (status, state_then, level_then):
                last["to"] = high
                continue
            segments.append({"from": low, "to": high, "status": status, "state": state_then, "health": level_then,
                             "reason": why})  # fmt: skip
        result.append(
            {
                "id": backend_id,
                "address": str(backend) if backend else (events[-1].object_name if events else str(backend_id)),
                "created": created,
                "deleted": deleted,
                "segments": segments,
            }
        )
    return result


def _last_before(farm: Farm, audited, since, current: dict) -> tuple[dict[int, AuditEvent], dict[int, HealthEvent]]:
    """Per present backend, its last audit event and its last health event before ``since`` (two queries
    of one row per backend, whatever the history's length)."""
    from django.db.models import OuterRef, Subquery

    from farms.models import Backend

    last_audit = audited.filter(object_id=OuterRef("pk"), time__lte=since).order_by("-time", "-id").values("id")[:1]
    last_health = HealthEvent.objects.filter(backend=OuterRef("pk"), time__lte=since).order_by("-time", "-id")
    rows = Backend.objects.filter(pk__in=list(current)).annotate(
        audit_id=Subquery(last_audit), health_id=Subquery(last_health.values("id")[:1])
    ).values_list("pk", "audit_id", "health_id")  # fmt: skip
    rows = list(rows)
    audits = AuditEvent.objects.in_bulk([a for _, a, _ in rows if a])
    healths = HealthEvent.objects.in_bulk([h for _, _, h in rows if h])
    return (
        {pk: audits[a] for pk, a, _ in rows if a in audits},
        {pk: healths[h] for pk, _, h in rows if h in healths},
    )


def farm_series(
    store: MetricStore, farm: Farm, window: str, since: float | None = None, now: float | None = None
) -> Json:
    """One farm's points: its own entries, zeros where it was idle, gaps where the collector was not sampling."""
    now = now or time.time()
    start, resolution, step = _window(window, since, now)
    created = farm.created.timestamp()
    window_start = max(now - WINDOWS[window][0], created)  # the farm's history starts when it was created
    start = max(start, created - step)
    measured = farm.mode in MEASURED_MODES or farm.mode in L7_MODES  # HTTP farms: HAProxy's statistics
    bytes_counted = not bytes_switched_off(farm.count_bytes, farm.mode)
    heartbeat = [b for b in store.system_series(resolution, start) if b["t"] >= created - step] if measured else []
    # Backend flags are written only when they change: start from the last one recorded before the window.
    entries = store.farm_series(farm.id, resolution, start - STATE_LOOKBACK * step)
    states: dict[str, bool] = {}
    for t in sorted(t for t in entries if t <= start):
        for backend_id, backend in entries.pop(t)["backends"].items():
            if "enabled" in backend:
                states[backend_id] = backend["enabled"]
    born = {str(b.id): b.created.timestamp() - step for b in farm.backends.all()}
    points = []
    for beat in heartbeat:
        t = beat["t"]
        entry = entries.get(t)
        if entry is None:
            point = _idle_point(t, bool(beat.get("census")), born, states)
        else:
            # A rate the collector could not compute is null (it was stored as nothing).
            point = {"t": t, **dict.fromkeys(RATE_FIELDS), **entry}
            point["backends"] = {
                backend_id: {**dict.fromkeys(BACKEND_RATE_FIELDS), **backend}
                for backend_id, backend in entry["backends"].items()
            }
            for backend_id, backend in entry["backends"].items():
                if "enabled" in backend:
                    states[backend_id] = backend["enabled"]
        points.append(point if bytes_counted else _bytes_not_counted(point))
    last = heartbeat[-1]["t"] if heartbeat else (store.latest() or {}).get("t")
    census_interval = next((b.get("census_interval") for b in reversed(heartbeat) if b.get("census_interval")), None)
    return {
        "series": f"farm:{farm.id}",
        "farm": {
            "id": farm.id,
            "name": farm.name,
            "vip": farm.vip,
            "mode": farm.mode,
            "state": farm.state,
            "created": created,
        },  # fmt: skip
        "window_start": window_start,
        "history": backend_history(farm, window_start, now),
        "backends": [
            {"id": b.id, "address": str(b), "state": b.state, "weight": b.weight} for b in farm.backends.all()
        ],
        "window": window,
        "resolution": resolution,
        "step": step,
        "census_interval": census_interval,
        "measured": measured,
        "bytes_counted": bytes_counted,
        "now": now,
        **staleness(last, now, step),
        "points": with_gaps(points, step, since),
    }


def summary(store: MetricStore, now: float | None = None) -> Json:
    """The latest sample: system figures and one row per farm, with how old it is.

    A farm absent from the newest sample's moved farms was idle then (zero rates);
    its open connections come from the newest census. A farm whose figures the collector could not read
    then has ``error`` (why) and null rates.
    """
    now = now or time.time()
    latest = store.latest() or {}
    census = store.latest_census() or {}
    step = step_of(RAW)
    system = dict(latest.get("system") or {})
    if census:
        system["active_conns"] = census.get("active_conns")
    moved, totals, counted = latest.get("farms") or {}, latest.get("totals") or {}, census.get("farms") or {}
    warn = settings.LBWEB_CONNTRACK_WARN
    count, maximum = system.get("conntrack_count"), system.get("conntrack_max")
    rows = []
    for farm in Farm.objects.order_by("name").values("id", "name", "vip", "mode", "state", "count_bytes"):
        key = str(farm["id"])
        row = dict(farm)
        bytes_counted = not bytes_switched_off(row.pop("count_bytes"), row["mode"])
        if key in totals:  # sampled: absent from the moved farms means idle
            row.update(dict.fromkeys(RATE_FIELDS, 0.0))
            row.update(zip(("total_bytes_in", "total_bytes_out", "total_conns"), totals[key], strict=True))
        if key in moved:
            figures = decode_farm_fields(moved[key])
            if "error" in figures:  # not read at the newest sample: unknown, not the zeros of an idle farm
                row.update(dict.fromkeys(RATE_FIELDS))
            row.update({k: v for k, v in figures.items() if k != "backends"})
        if key in counted:
            row.update({k: v for k, v in decode_farm_fields(counted[key]).items() if k != "backends"})
        rows.append(row if bytes_counted or key not in totals else _bytes_not_counted(row))
    return {
        "interval": step,
        "now": now,
        **staleness(latest.get("t"), now, step),
        "census_at": census.get("t"),
        "conntrack_warn_ratio": warn,
        "conntrack_warning": bool(count is not None and maximum and count >= warn * maximum),
        "system": system,
        "farms": rows,
    }
