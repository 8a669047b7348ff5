"""Where the kernel writer is: each call into libnftables or each netlink batch announces its step first.

The worker runs those calls in a child process (``sandbox.py``). When C code in it dies by a signal
(libnftables 1.0.6 overflows a buffer on a long log prefix: ``*** stack smashing detected ***``,
SIGABRT), the child can no longer say anything; the last step it announced tells the worker where it
died. Outside the child nobody listens and announcing costs one test.
"""

from __future__ import annotations

import json
import os
import resource
import signal
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


CRASH_ON = "LBWEB_TEST_CRASH_ON"
CRASH_SIGNAL = "LBWEB_TEST_CRASH_SIGNAL"


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _text(subject: Any) -> str:
    if subject is None:
        return ""
    if isinstance(subject, str):
        return subject
    if isinstance(subject, list) and subject and hasattr(subject[0], "what"):  # nfmsg.Message
        return "\n".join(m.what for m in subject)
    return json.dumps(subject)


def test_crash() -> Listener | None:
    """For tests only: with ``LBWEB_TEST_CRASH_ON`` set in the environment, a listener that kills this
    process with ``LBWEB_TEST_CRASH_SIGNAL`` (default ABRT) before any step whose input contains that
    text, as libnftables 1.0.6 does on a long log prefix. None otherwise."""
    crash_on = os.environ.get(CRASH_ON, "")
    if not crash_on:
        return None
    number = signal.Signals["SIG" + os.environ.get(CRASH_SIGNAL, "ABRT").upper().removeprefix("SIG")]
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a test's crashes leave no core files behind

    def crash(_step: str, subject: Any) -> None:
        if crash_on in _text(subject):
            os.kill(os.getpid(), number)

    return crash


def listen(listener: Listener | None) -> None:
    global _listener
    _listener = listener


def enter(step: str, subject: Any) -> None:
    """Announce ``step``, about to act on ``subject`` (a document, commands or messages)."""
    if _listener is not None:
        _listener(step, subject)
