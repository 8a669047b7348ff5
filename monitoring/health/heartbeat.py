"""healthd's liveness: a heartbeat in Redis that the API reads.

A healthd that died leaves every backend's health as it was (nothing marks
them down) and its heartbeat goes stale, which the API, the farms page and the
dashboard show as "health checking stopped". A healthd that runs but cannot
probe (its own network is down, it has no descriptors left, its command
prober does not answer) changes no
backend's health either and shows as "impaired", with the reason.
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


def impaired(last_local_error_at: float | None, now: float) -> bool:
    """healthd failed on its own (its network, descriptors, a stall) within the last stale-after seconds."""
    return last_local_error_at is not None and now - last_local_error_at <= settings.LBWEB_HEALTHD_STALE_SECONDS


def read_status(client: redis.Redis | None = None) -> dict[str, Any]:
    """The daemon's state for the API: running, impaired (its own errors, e.g. its network, in the last
    stale-after seconds), stopped (stale heartbeat), never_seen, or unknown (no Redis)."""
    stale_after = settings.LBWEB_HEALTHD_STALE_SECONDS
    client = client or redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)
    try:
        raw = client.get(KEY)
    except redis.RedisError as exc:
        return {"state": "unknown", "detail": f"Redis unreachable: {exc}", "stale_after_seconds": stale_after}
    if raw is None:
        return {"state": "never_seen", "detail": "healthd has not run", "stale_after_seconds": stale_after}
    info = json.loads(raw)
    now = time.time()
    age = max(0.0, now - info["beat_at"])
    if age > stale_after:
        state, detail = "stopped", "health checking stopped: backends keep their last health"
    elif impaired(info.get("last_local_error_at"), now):
        state = "impaired"
        detail = f"healthd cannot probe ({info['last_local_error']}): the backends concerned keep their last health"
    else:
        state, detail = "running", "health checking runs"
    return {
        **info,
        "state": state,
        "detail": detail,
        "age_seconds": round(age, 3),
        "stale_after_seconds": stale_after,
    }
