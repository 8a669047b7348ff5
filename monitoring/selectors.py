"""Reads for the API and the dashboard: series with their gaps, and the latest summary.

A point exists for every instant the collector sampled. Where it did not
(stopped, restarting, Redis down) the series carries an explicit gap point
(``{"t": ..., "gap": true}``, every value null), so a chart breaks its line
instead of drawing zeros or bridging the hole.
"""

from __future__ import annotations

import time

from django.conf import settings

from farms.models import Farm
from farms.types import Json

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


def _idle_point(t: float, census: bool, backends: dict[str, bool]) -> Json:
    point: Json = {"t": t, **dict.fromkeys(RATE_FIELDS, 0.0)}
    if census:
        point.update(dict.fromkeys(CENSUS_FIELDS, 0.0))
    point["backends"] = {}
    for backend_id, enabled in backends.items():
        backend = dict.fromkeys(BACKEND_RATE_FIELDS, 0.0)
        if census:
            backend.update(dict.fromkeys(BACKEND_CENSUS_FIELDS, 0.0))
        backend["enabled"] = enabled
        point["backends"][backend_id] = backend
    return point


def farm_series(
    store: MetricStore, farm: Farm, window: str, since: float | None = None, now: float | None = None
) -> Json:
    """One farm's points: its own entries, zeros where it was idle, gaps where the collector was not sampling."""
    now = now or time.time()
    start, resolution, step = _window(window, since, now)
    measured = farm.mode in MEASURED_MODES
    heartbeat = store.system_series(resolution, start) if measured else []
    # Backend states are written only when they change: start from the last one before the window.
    entries = store.farm_series(farm.id, resolution, start - STATE_LOOKBACK * step)
    states = {str(b.id): b.state == "enabled" for b in farm.backends.all()}
    for t in sorted(t for t in entries if t <= start):
        for backend_id, backend in entries.pop(t)["backends"].items():
            if "enabled" in backend:
                states[backend_id] = backend["enabled"]
    points = []
    for beat in heartbeat:
        t = beat["t"]
        entry = entries.get(t)
        if entry is None:
            point = _idle_point(t, bool(beat.get("census")), states)
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
        points.append(point)
    last = heartbeat[-1]["t"] if heartbeat else (store.latest() or {}).get("t")
    census_interval = next((b.get("census_interval") for b in reversed(heartbeat) if b.get("census_interval")), None)
    return {
        "series": f"farm:{farm.id}",
        "farm": {"id": farm.id, "name": farm.name, "vip": farm.vip, "mode": farm.mode, "state": farm.state},
        "backends": [
            {"id": b.id, "address": str(b), "state": b.state, "weight": b.weight} for b in farm.backends.all()
        ],
        "window": window,
        "resolution": resolution,
        "step": step,
        "census_interval": census_interval,
        "measured": measured,
        "now": now,
        **staleness(last, now, step),
        "points": with_gaps(points, step, since),
    }


def summary(store: MetricStore, now: float | None = None) -> Json:
    """The latest sample: system figures and one row per farm, with how old it is.

    A farm absent from the newest sample's moved farms was idle then (zero rates);
    its open connections come from the newest census.
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
    for farm in Farm.objects.order_by("name").values("id", "name", "vip", "mode", "state"):
        key = str(farm["id"])
        row = dict(farm)
        if key in totals:  # sampled: absent from the moved farms means idle
            row.update(dict.fromkeys(RATE_FIELDS, 0.0))
            row.update(zip(("total_bytes_in", "total_bytes_out", "total_conns"), totals[key], strict=True))
        if key in moved:
            row.update({k: v for k, v in decode_farm_fields(moved[key]).items() if k != "backends"})
        if key in counted:
            row.update({k: v for k, v in decode_farm_fields(counted[key]).items() if k != "backends"})
        rows.append(row)
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
