"""Liveness of lbweb's long-running processes: a heartbeat in Redis that the API and the pages read.

Every process that must keep running (healthd, the worker, beat, the collector) writes its
heartbeat here every second; one whose heartbeat is older than ``LBWEB_PROCESS_STALE_SECONDS``
shows as not running on every page and in ``/api/v1/status/`` (``farms/liveness.py``).

The heartbeat comes from a thread of its own, so it says the process lives, not that its work gets
done. A process whose work is a loop of rounds (the collector's samples) says so with a
:class:`Progress`: its heartbeat then carries when the last round was done, and a process that lives
but completes no round (stuck, every round failing, or crashing before its first one and restarted
again and again, each life a fresh heartbeat) shows as "impaired" with the reason, never as running.

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


class Publisher:
    """Writes one process's heartbeat: every BEAT_SECONDS from its own thread, and at once when the process
    asks (:meth:`beat`), e.g. right after a round, so the heartbeat says it before the round's results are
    read. One lock: a beat computed before a round never lands after the one that tells of it."""

    def __init__(self, process: str, info: Callable[[], dict[str, Any]] | None = None):
        self.process = process
        self.info = info
        self._lock = threading.Lock()
        self._failing = False
        self._client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)

    def beat(self) -> None:
        """Write the heartbeat now; a Redis outage is logged once, and the process goes on."""
        with self._lock:
            try:
                self._client.set(key_of(self.process), encode(self.info() if self.info else {}), ex=KEEP_SECONDS)
                self._failing = False
            except Exception as exc:  # Redis down, or info() failed: the process itself goes on
                if not self._failing:
                    log.warning("%s: heartbeat not written (%s)", self.process, exc)
                self._failing = True

    def run(self) -> None:
        while True:
            self.beat()
            time.sleep(BEAT_SECONDS)


def start_publisher(process: str, info: Callable[[], dict[str, Any]] | None = None) -> Publisher:
    """Write ``process``'s heartbeat every BEAT_SECONDS from a daemon thread of this process, so it beats
    as long as the process lives, whatever its main loop is busy with. A Redis outage is logged once and
    the thread keeps trying."""
    publisher = Publisher(process, info)
    threading.Thread(target=publisher.run, name=f"{process}-heartbeat", daemon=True).start()
    return publisher


class Progress:
    """The rounds of a process's loop, for its heartbeat (``start_publisher(name, progress.info)``): one is
    expected every ``every`` seconds; ``done`` after each one completed (then the publisher's ``beat``, so that
    the heartbeat tells of the round before its results are stored), ``failed`` after one that was not."""

    def __init__(self, every: float):
        self.every = every
        self.started_at = time.time()
        self.done_at: float | None = None
        self.error = ""

    def done(self) -> None:
        self.done_at, self.error = time.time(), ""

    def failed(self, error: str) -> None:
        self.error = error

    def info(self) -> dict[str, Any]:
        return {
            "started_at": self.started_at,
            "progress_every": self.every,
            "progress_at": self.done_at,
            "last_error": self.error,
        }


def progress_state(process: str, info: dict[str, Any], now: float, stale_after: float) -> dict[str, Any] | None:
    """The state "impaired" for a process that beats but whose rounds (:class:`Progress`) stopped, None
    otherwise. A round is late once it is ``stale_after`` seconds overdue; a process that has done none since
    it started is impaired from its start: a fresh start's first round takes a fraction of a second, and a
    process that crashes before its first round and is restarted has a new heartbeat every time, but never a
    round."""
    every = info.get("progress_every")
    if every is None:
        return None
    done_at = info.get("progress_at")
    if done_at is not None and now - done_at <= every + stale_after:
        return None
    if done_at is None:
        since = max(0.0, now - info.get("started_at", now))
        detail = f"{process} runs but has completed no round since it started {since:.0f} s ago"
    else:
        detail = f"{process} runs but has completed no round for {now - done_at:.0f} s"
    if info.get("last_error"):
        detail += f" ({info['last_error']})"
    return {"state": "impaired", "detail": detail}


def process_states(client: redis.Redis | None = None) -> dict[str, dict[str, Any]]:
    """Every process's state from its heartbeat: running, impaired (lives but its rounds stopped, see
    :func:`progress_state`), stopped (stale), never_seen, or unknown (no Redis)."""
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
        info = json.loads(value)
        age = max(0.0, now - info["beat_at"])
        running = age <= stale_after
        states[process] = {
            "state": "running" if running else "stopped",
            "detail": f"{process} running" if running else f"{process} not running",
            "age_seconds": round(age, 3),
        }
        if running:
            states[process].update(progress_state(process, info, now, stale_after) or {})
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
