"""Database helpers the settings' choices call for.

SQLite runs with ``transaction_mode = IMMEDIATE`` (``lbweb/settings.py``): every transaction takes the write lock
at BEGIN, so a transaction that reads and then writes never meets a lock upgrade that fails with "database is
locked". The price falls on long transactions that only read: the worker's snapshot of 10,000 farms before an
apply, or the export behind a configuration version, held every web write waiting for seconds (17.6 s measured
after a 10,000-farm import, long enough for gunicorn to kill the request). ``read_snapshot`` gives those reads
one consistent view (WAL: the state at the first read) without the write lock.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import transaction


@contextmanager
def read_snapshot(using: str | None = None) -> Iterator[None]:
    """A transaction for reads only: one consistent state, and writers are not kept waiting.

    On SQLite it begins DEFERRED (a snapshot taken at the first read; WAL lets writers commit meanwhile); a write
    inside it would have to upgrade the lock and may fail, so none belongs there. Elsewhere, and inside a
    transaction already open, it is ``transaction.atomic``."""
    connection = transaction.get_connection(using)
    if connection.vendor != "sqlite" or connection.in_atomic_block:
        with transaction.atomic(using=using):
            yield
        return
    connection.ensure_connection()  # the mode is read from the settings when the connection opens
    mode = connection.transaction_mode
    connection.transaction_mode = "DEFERRED"  # read when BEGIN is sent, at the outermost atomic's entry
    try:
        with transaction.atomic(using=using):
            connection.transaction_mode = mode
            yield
    finally:
        connection.transaction_mode = mode
