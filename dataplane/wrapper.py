"""What the supervised wrappers of the engines lbweb runs share (``dataplane/cluster/run.py``,
``dataplane/bgp/run.py``, ``dataplane/syslog/run.py``): each polls the file the worker writes for its engine,
and ends its engine and itself on SIGTERM or SIGINT. Standard library only: the cluster's wrapper is on the
failover path."""

from __future__ import annotations

import signal
from pathlib import Path

POLL = 0.5  # seconds between two looks at the engine's file and process


class StopSignal:
    """True once SIGTERM or SIGINT arrived (the handlers are installed when it is made)."""

    def __init__(self) -> None:
        self.received = False
        signal.signal(signal.SIGTERM, self._receive)
        signal.signal(signal.SIGINT, self._receive)

    def _receive(self, signum, frame) -> None:
        self.received = True

    def __bool__(self) -> bool:
        return self.received


def mtime(path: Path) -> int | None:
    """The file's modification time in ns, or None when the worker has not written it (or removed it)."""
    try:
        return path.stat().st_mtime_ns
    except FileNotFoundError:
        return None
