"""The kernel writer: a child process of the worker that makes every libnftables call and netlink batch.

Why: libnftables is C, and when it crashes it takes its process with it. libnftables 1.0.6 overflows
a 128-byte buffer on a log prefix of 168 bytes (``*** stack smashing detected ***``, SIGABRT); in the
worker that lost the task, wrote no ApplyRun, and every later apply and reconcile died the same way.
Here a crash kills only the child: the worker sees it die (which signal, in which step: ``steps.py``),
raises :class:`KernelCrash` (an :class:`ApplyError`, so the unit that caused it is isolated like one
the kernel refuses), and starts a new child on the next call.

Why one long-lived child and not a fork per write: forking the worker costs in proportion to its memory
(the compiled units of every farm), a call to a child that is already running costs one round trip on a
pipe; the child is spawned (not forked), so it holds only libnftables and the scratch namespace.

Pure-Python netlink reads (the ruleset generation, the skeleton's digest, the counters) stay in the
worker: they cannot crash it with a signal.

For tests only: when ``LBWEB_TEST_CRASH_ON`` is set in the worker's environment, the child (and the
scratch process it starts) kills itself with ``LBWEB_TEST_CRASH_SIGNAL`` (default ABRT) before any step
whose input contains that text, as libnftables does on the log prefix above (``steps.test_crash``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from compiler import merge_elements
from compiler.units import UnitObjects

from . import drift, nfmsg, steps
from .applier import ApplyError, Kernel

ROOT = Path(__file__).resolve().parents[2]
CRASH_ON, CRASH_SIGNAL = steps.CRASH_ON, steps.CRASH_SIGNAL
# A full apply of 10,000 farms took 16 min on 2 cores (bench/runs/PASSES.md); beyond this it hangs.
ANSWER_SECONDS = 3600
LEAVE_SECONDS = 10  # a child ended (its request pipe closed) that has not exited by then is killed
RESTART_AFTER_BYTES = 4 << 20  # ~400 farms of 10 backends
CALLS = {
    "check",
    "apply",
    "apply_text",
    "apply_incremental",
    "prefetch",
    "apply_prefetched",
    "written_records",
    "repair",
    "list_table",
    "list_set",
    "dsr_tables",
}
WRITES = {"apply", "apply_text", "apply_incremental", "apply_prefetched", "repair"}


class KernelCrash(ApplyError):
    """The kernel writer died by a signal (or hung) during ``step``; nothing it was doing is known to be done."""

    def __init__(self, cause: str, step: str, document: dict | None = None, *, uncertain: bool = False):
        super().__init__(f"crashed: the kernel writer died by {cause} during {step}", document, uncertain=uncertain)
        self.cause = cause
        self.step = step


def _cause(returncode: int | None) -> str:
    if returncode is None:
        return "no answer"
    if returncode < 0:
        return steps.signal_name(-returncode)
    return f"exit status {returncode}"


class Writer:
    """The worker's side: one child at a time, started on first use and again after it died."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen | None = None
        self._requests: Connection | None = None
        self._answers: Connection | None = None
        # children ended without waiting (``close(wait=False)``), with when: reaped later
        self._leaving: list[tuple[subprocess.Popen, float]] = []

    def _start(self) -> None:
        request_read, request_write = os.pipe()
        answer_read, answer_write = os.pipe()
        command = [sys.executable, "-m", "dataplane.kernel.sandbox", str(request_read), str(answer_write)]
        try:
            self._proc = subprocess.Popen(
                command, cwd=ROOT, stdin=subprocess.DEVNULL, pass_fds=(request_read, answer_write)
            )
        finally:
            os.close(request_read)
            os.close(answer_write)
        self._requests = Connection(request_write, readable=False)
        self._answers = Connection(answer_read, writable=False)

    def close(self, wait: bool = True) -> None:
        """Stop the child (it exits when its request pipe closes). ``wait=False``: without waiting for it to
        exit (after 1,000 farms it took 64 ms to free what libnftables held, time the apply waited for); it
        is reaped at the next call or close, and killed if it has not exited LEAVE_SECONDS after its end."""
        for connection in (self._requests, self._answers):
            if connection is not None:
                connection.close()
        self._requests = self._answers = None
        if self._proc is not None:
            self._leaving.append((self._proc, time.monotonic()))
            self._proc = None
        self._reap(wait)

    def _reap(self, wait: bool) -> None:
        for entry in list(self._leaving):
            proc, since = entry
            if not wait and proc.poll() is None and time.monotonic() - since < LEAVE_SECONDS:
                continue
            try:
                proc.wait(timeout=max(0.0, since + LEAVE_SECONDS - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            self._leaving.remove(entry)

    def call(self, method: str, *args: Any) -> Any:
        if self._proc is None or self._proc.poll() is not None:
            self.close(wait=False)
            self._start()
        document = next((a for a in args if isinstance(a, dict)), None)
        generation = nfmsg.generation_id() if method in WRITES else None
        step = "the call"
        try:
            self._requests.send((method, args))
            while True:
                if not self._answers.poll(ANSWER_SECONDS):
                    self._proc.kill()
                    raise EOFError
                answer = self._answers.recv()
                if answer[0] == "step":
                    step = answer[1]
                    continue
                break
        except (EOFError, OSError):
            returncode = self._proc.wait()
            self.close()
            committed = generation is not None and step in steps.SENT and nfmsg.generation_id() != generation
            raise KernelCrash(_cause(returncode), step, document, uncertain=committed) from None
        if answer[0] == "ok":
            return answer[1]
        _kind, message, uncertain = answer
        raise ApplyError(message, document, uncertain=uncertain)


_by_process: dict[int, Writer] = {}
_lock = threading.Lock()


def writer() -> Writer:
    """This process's kernel writer (a forked process makes its own)."""
    with _lock:
        if os.getpid() not in _by_process:
            _by_process[os.getpid()] = Writer()
        return _by_process[os.getpid()]


class IsolatedKernel(Kernel):
    """:class:`Kernel` whose libnftables calls and netlink batches run in the kernel writer."""

    def __init__(self) -> None:
        super().__init__()
        self._announced: dict[int, tuple[dict, int]] = {}  # id(document) -> (document, the writer's token)

    def check(self, document: dict) -> None:
        writer().call("check", document)

    def apply(self, document: dict) -> None:
        """The document goes to the writer as its JSON text, which libnftables reads anyway: pickled as
        dicts it cost the writer ~1 GB and seconds of unpickling at 10,000 farms.

        After a big one (``RESTART_AFTER_BYTES``) the writer is ended, and the next call starts another:
        the memory libnftables took for it stays with the process once freed (the writer kept ~300 MB
        after loading 1,000 farms, and the worker's processes peaked 300 MB higher at the next import)."""
        if not document.get("nftables"):
            return
        text = json.dumps(merge_elements(document))
        try:
            writer().call("apply_text", text)
        finally:
            if len(text) > RESTART_AFTER_BYTES:
                writer().close(wait=False)

    def prefetch(self, document: dict, context: list[dict], whole: Mapping[str, UnitObjects] | None = None) -> int:
        """The writer starts the change's scratch loads now (see ``Kernel.prefetch``); the document is sent
        once: :meth:`apply_incremental` of the same object sends only its token."""
        if not document.get("nftables"):
            return 0
        token = writer().call("prefetch", document, context, dict(whole or {}))
        self._announced[id(document)] = (document, token)
        while len(self._announced) > 2:
            self._announced.pop(next(iter(self._announced)))
        return token

    def apply_incremental(self, document: dict, context: list[dict]) -> str:
        if not document.get("nftables"):
            return "none"
        announced = self._announced.pop(id(document), None)
        if announced is not None and announced[0] is document:
            writer_said = writer().call("apply_prefetched", announced[1])
            if writer_said is not None:
                return writer_said
        return writer().call("apply_incremental", document, context)

    def repair(self, removals: list[nfmsg.Message], document: dict, context: list[dict]) -> str:
        return writer().call("repair", removals, document, context)

    def written_records(self) -> dict[str, drift.Record]:
        """The writer's records (``Kernel.written_records``); a new writer since has none: those units are read back."""
        return writer().call("written_records")

    def release(self) -> None:
        """End the kernel writer (and its scratch process with it): what they took for a bulk change stays
        with them once freed, ~290 MB after 10,000 farms, while the worker reads back what it must."""
        writer().close()

    def list_table(self, family: str | None = None, name: str | None = None) -> list[dict[str, Any]] | None:
        return writer().call("list_table", *(a for a in (family, name) if a is not None))

    def list_set(self, name: str) -> list[Any] | None:
        return writer().call("list_set", name)

    def dsr_tables(self) -> list[tuple[str, str]]:
        return writer().call("dsr_tables")


# -- the child -------------------------------------------------------------------------------


def serve(requests: Connection, answers: Connection) -> None:
    crash = steps.test_crash()

    def announce(step: str, subject: Any) -> None:
        answers.send(("step", step))
        if crash is not None:
            crash(step, subject)

    steps.listen(announce)
    kernel = Kernel()
    while True:
        try:
            method, args = requests.recv()
        except EOFError:
            return
        try:
            if method not in CALLS:
                raise ApplyError(f"kernel writer: unknown call {method!r}")
            answers.send(("ok", getattr(kernel, method)(*args)))
        except ApplyError as exc:
            answers.send(("refused", exc.message, exc.uncertain))
        except Exception as exc:  # a bug of ours is one unit's failure, not the writer's end
            answers.send(("refused", f"kernel writer: {type(exc).__name__}: {exc}", False))


if __name__ == "__main__":
    serve(Connection(int(sys.argv[1]), writable=False), Connection(int(sys.argv[2]), readable=False))
