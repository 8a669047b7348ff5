"""healthd's liveness: a heartbeat in Redis that the API reads.

A healthd that died leaves every backend's health as it was (nothing marks
them down) and its heartbeat goes stale, which the API and the farms page
show as "health checking stopped".
"""

from __future__ import annotations

import json
import time
from typing import Any

import redis
from django.conf import settings

KEY = "lbweb:healthd:heartbeat"
BEAT_SECONDS = 1.0
KEEP_SECONDS = 7 * 24 * 3600  # a dead healthd's last heartbeat stays readable this long


def encode(info: dict[str, Any]) -> str:
    return json.dumps({**info, "beat_at": time.time()})


def read_status(client: redis.Redis | None = None) -> dict[str, Any]:
    """The daemon's state for the API: running, stopped (stale heartbeat), never_seen, or unknown (no Redis)."""
    stale_after = settings.LBWEB_HEALTHD_STALE_SECONDS
    client = client or redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)
    try:
        raw = client.get(KEY)
    except redis.RedisError as exc:
        return {"state": "unknown", "detail": f"Redis unreachable: {exc}", "stale_after_seconds": stale_after}
    if raw is None:
        return {"state": "never_seen", "detail": "healthd has not run", "stale_after_seconds": stale_after}
    info = json.loads(raw)
    age = max(0.0, time.time() - info["beat_at"])
    running = age <= stale_after
    detail = "health checking runs" if running else "health checking stopped: backends keep their last health"
    return {
        **info,
        "state": "running" if running else "stopped",
        "detail": detail,
        "age_seconds": round(age, 3),
        "stale_after_seconds": stale_after,
    }
