"""A farm's live persistence entries as the worker last read them, kept in Redis for the API.

Only the worker can read the kernel's sets, so the API used to enqueue a read and wait up to 5 s for
the answer: four viewers of a sessions page held both web threads and an admin's request waited 9.7 s
(issue 12), and with the worker stopped every call waited the full 5 s. Now no request waits on the
worker. The worker publishes a snapshot per farm (when asked, and after every flush of that farm); the
API answers at once from it when it is recent enough for the caller (``max_age``), and otherwise asks
for a new one and answers 202 with a retry hint. Asking is deduplicated per farm, so any number of
viewers costs the worker one read per farm per ``ASK_SECONDS`` at most, and a stopped worker does not
pile up tasks. A stale snapshot is never passed off as current: the caller states the age it accepts.

Web side: this module only reads and writes Redis (and enqueues by name); the worker's reading of the
kernel is ``dataplane.sessions.publish_live``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from lbweb import enqueue
from lbweb import redis_keys as keys
from lbweb.redis_client import get_redis

SNAPSHOT_TTL = 600  # seconds a snapshot is kept at all (a farm nobody looks at costs nothing)
ASK_SECONDS = 10  # a request for a new snapshot is made at most this often per farm, and expires after it
DEFAULT_MAX_AGE = 5  # seconds: what a page that refreshes every few seconds can show
RETRY_AFTER = 1  # seconds: the worker reads one farm's sets in milliseconds when it is running


snapshot_key = keys.sessions
asked_key = keys.sessions_asked


@dataclass(frozen=True)
class Snapshot:
    read_at: float  # Unix time the worker began reading the kernel
    ok: bool
    sessions: list[dict]
    error: str = ""

    @property
    def age(self) -> float:
        return max(0.0, time.time() - self.read_at)


def publish(farm_id: int, sessions: list[dict] | None, error: str = "", *, read_at: float | None = None) -> None:
    """Worker side: store what it read (or why it could not), started at ``read_at``, and take the farm's
    request as answered."""
    payload = {
        "read_at": time.time() if read_at is None else read_at,
        "ok": sessions is not None,
        "sessions": sessions or [],
        "error": error,
    }
    redis = get_redis()
    redis.set(snapshot_key(farm_id), json.dumps(payload), ex=SNAPSHOT_TTL)
    redis.delete(asked_key(farm_id))


def read(farm_id: int) -> Snapshot | None:
    raw = get_redis().get(snapshot_key(farm_id))
    if not raw:
        return None
    value = json.loads(raw)
    return Snapshot(read_at=value["read_at"], ok=value["ok"], sessions=value["sessions"], error=value.get("error", ""))


def ask(farm_id: int) -> float:
    """Have the worker read the farm's sessions, unless that was asked within ``ASK_SECONDS``.

    Returns how many seconds ago the pending request was made (0 when made now). Never waits: with the
    worker stopped the task stays queued and expires unanswered.
    """
    redis = get_redis()
    now = time.time()
    if redis.set(asked_key(farm_id), str(now), nx=True, ex=ASK_SECONDS):
        enqueue.send("farms.tasks.report_sessions", kwargs={"farm_id": farm_id}, expires=ASK_SECONDS)
        return 0.0
    asked = redis.get(asked_key(farm_id))
    return max(0.0, now - float(asked)) if asked else 0.0
