"""Liveness of lbweb's long-running processes: a heartbeat in Redis that the API and the pages read.

Every process that must keep running (healthd, the worker, beat, the collector) writes its
heartbeat here every second; one whose heartbeat is older than ``LBWEB_PROCESS_STALE_SECONDS``
shows as not running on every page and in ``/api/v1/status/`` (``farms/liveness.py``).

A healthd that died leaves every backend's health as it was (nothing marks
them down) and its heartbeat goes stale, which the API, the farms page and the
dashboard show as "health checking stopped". A healthd that runs but cannot
probe (its own network is down, it has no descriptors left, its command
prober does not answer) changes no
backend's health either and shows as "impaired", with the reason.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import redis
from django.conf import settings

from lbweb import redis_keys as keys

PROCESSES = ("worker", "beat", "collector", "healthd")
BEAT_SECONDS = 1.0
KEEP_SECONDS = 7 * 24 * 3600  # a dead process's last heartbeat stays readable this long
log = logging.getLogger("lbweb.heartbeat")


key_of = keys.heartbeat


KEY = key_of("healthd")


def start_publisher(process: str, info: Callable[[], dict[str, Any]] | None = None) -> threading.Thread:
    """Write ``process``'s heartbeat every BEAT_SECONDS from a daemon thread of this process, so it beats
    as long as the process lives, whatever its main loop is busy with. A Redis outage is logged once and
    the thread keeps trying."""

    def run() -> None:
        client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)
        failing = False
        while True:
            try:
                client.set(key_of(process), encode(info() if info else {}), ex=KEEP_SECONDS)
                failing = False
            except Exception as exc:  # Redis down, or info() failed: the process itself goes on
                if not failing:
                    log.warning("%s: heartbeat not written (%s)", process, exc)
                failing = True
            time.sleep(BEAT_SECONDS)

    thread = threading.Thread(target=run, name=f"{process}-heartbeat", daemon=True)
    thread.start()
    return thread


def process_states(client: redis.Redis | None = None) -> dict[str, dict[str, Any]]:
    """Every process's state from its heartbeat: running, stopped (stale), never_seen, or unknown (no Redis)."""
    stale_after = settings.LBWEB_PROCESS_STALE_SECONDS
    client = client or redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)
    try:
        raw = client.mget([key_of(p) for p in PROCESSES])
    except redis.RedisError as exc:
        return {p: {"state": "unknown", "detail": f"Redis unreachable: {exc}"} for p in PROCESSES}
    now = time.time()
    states = {}
    for process, value in zip(PROCESSES, raw, strict=True):
        if value is None:
            states[process] = {"state": "never_seen", "detail": f"{process} has not run"}
            continue
        age = max(0.0, now - json.loads(value)["beat_at"])
        running = age <= stale_after
        states[process] = {
            "state": "running" if running else "stopped",
            "detail": f"{process} running" if running else f"{process} not running",
            "age_seconds": round(age, 3),
        }
    return states


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
