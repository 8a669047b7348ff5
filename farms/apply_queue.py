"""At most one apply waiting in the queue, however many writes come.

An apply task carries no rules: the worker reads the whole pending configuration
when the task runs, so one waiting task covers every write committed before it
starts. A write therefore queues a task only when it can take the Redis key
``APPLY_QUEUED_KEY`` (SET NX); the worker releases the key as a task starts,
before it reads the database, so a write committed after that point queues the
next one. A 10,000-farm import queues one task instead of one per row (110,000
before), and the worker never works through a backlog of tasks that each find
nothing left to do. The key expires after ``QUEUED_TTL`` seconds, so a task the
broker lost cannot block later writes for longer; the periodic reconcile applies
whatever is pending in any case.
"""

from __future__ import annotations

import logging

from lbweb import redis_keys
from lbweb.redis_client import get_redis

log = logging.getLogger(__name__)

APPLY_QUEUED_KEY = redis_keys.APPLY_QUEUED
QUEUED_TTL = 60


def claim(generation: int) -> bool:
    """True when no apply is waiting and this caller must queue one (the key is now its)."""
    return bool(get_redis().set(APPLY_QUEUED_KEY, generation, nx=True, ex=QUEUED_TTL))


def unclaim() -> None:
    """Give the key back when the task could not be queued, so the next write tries again."""
    try:
        get_redis().delete(APPLY_QUEUED_KEY)
    except Exception as exc:  # Redis down: the key expires by itself
        log.warning("apply queue key not released (%s)", exc)


def started() -> None:
    """The waiting apply is running now: the next write must queue another."""
    unclaim()
