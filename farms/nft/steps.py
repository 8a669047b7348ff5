"""Where the kernel writer is: each call into libnftables or each netlink batch announces its step first.

The worker runs those calls in a child process (``sandbox.py``). When C code in it dies by a signal
(libnftables 1.0.6 overflows a buffer on a long log prefix: ``*** stack smashing detected ***``,
SIGABRT), the child can no longer say anything; the last step it announced tells the worker where it
died. Outside the child nobody listens and announcing costs one test.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Listener = Callable[[str, Any], None]
_listener: Listener | None = None

DRY_RUN = "libnftables dry run"
COMMIT = "libnftables commit"
READ = "libnftables read"
SCRATCH = "libnftables load in the scratch namespace"
BATCH = "netlink batch (building, sending)"
ANSWERS = "netlink batch (reading the kernel's answers)"

# Steps after which the kernel may hold what was sent: a crash there leaves the outcome unknown.
SENT = {COMMIT, ANSWERS}


def listen(listener: Listener | None) -> None:
    global _listener
    _listener = listener


def enter(step: str, subject: Any) -> None:
    """Announce ``step``, about to act on ``subject`` (a document, commands or messages)."""
    if _listener is not None:
        _listener(step, subject)
