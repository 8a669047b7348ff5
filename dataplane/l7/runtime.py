"""HAProxy's master CLI: reloads, and the runtime API of the current worker (``@1 <command>``). No Django.

One unix socket (``haproxy -S``) reaches both: the master itself (``show proc``, ``reload``) and, with the ``@1``
prefix, the newest worker at admin level (weights, states, ``maxconn``, stats). The worker process of lbweb is its
only client that changes anything.

A reload re-executes the master with the same arguments; the new worker takes the listening sockets from the old
one over the master's socket pair, so no connection is refused, and the old worker finishes its requests. HAProxy
2.6 answers ``reload`` with nothing, so success is read from ``show proc``: the master's reload count moves and
its ``failed`` count does not (a configuration it cannot load leaves the old worker serving, and the master
counts the failure until a reload succeeds). A refused reload costs nothing but itself: the master takes the
next ``reload`` as usual, so the worker simply reloads again once the configuration is one HAProxy loads.
"""

from __future__ import annotations

import contextlib
import csv
import io
import re
import socket
import time
from dataclasses import dataclass


class EngineError(Exception):
    """HAProxy refused a command or could not be reached."""


class ReloadRefused(EngineError):
    """HAProxy could not load a configuration ``haproxy -c`` had passed (a listener it cannot bind, most often):
    the worker that served before still serves, with the configuration it had."""


@dataclass(frozen=True)
class Processes:
    master_pid: int
    reloads: int
    failed: int
    workers: tuple[tuple[int, int], ...]  # (pid, reloads the worker has seen: the fewest is the newest)

    @property
    def current_worker(self) -> int | None:
        """The newest worker, the one that serves: the one that has seen the fewest reloads. Not "the one at 0":
        after a reload HAProxy refused, no worker is at 0 and the one still serving is at 1 or more (issue 39:
        a worker at 0 sought there made HAProxy look stopped for good after one refused reload)."""
        return min(self.workers, key=lambda worker: worker[1])[0] if self.workers else None


_MASTER = re.compile(r"^(\d+)\s+master\s+(\d+)\s+\[failed:\s*(\d+)\]", re.M)
_WORKER = re.compile(r"^(\d+)\s+worker\s+(\d+)", re.M)
_OK_ANSWERS = ("", "Done.")


class MasterCLI:
    """A client of the master socket; one connection per command (the master closes after each answer)."""

    def __init__(self, path: str, timeout: float = 5.0):
        self.path = path
        self.timeout = timeout

    def command(self, text: str) -> str:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(self.timeout)
                sock.connect(self.path)
                sock.sendall(text.encode() + b"\n")
                sock.shutdown(socket.SHUT_WR)  # end of input: the master answers, then closes
                chunks = []
                while chunk := sock.recv(65536):
                    chunks.append(chunk)
        except OSError as exc:
            raise EngineError(f"HAProxy's master socket {self.path}: {exc}") from exc
        return b"".join(chunks).decode(errors="replace")

    def worker(self, text: str) -> str:
        """A runtime-API command to the current worker."""
        return self.command(f"@1 {text}")

    def processes(self) -> Processes:
        answer = self.command("show proc")
        master = _MASTER.search(answer)
        if not master:
            raise EngineError(f"unexpected answer to 'show proc': {answer[:200]!r}")
        workers = tuple((int(pid), int(reloads)) for pid, reloads in _WORKER.findall(answer))
        return Processes(int(master.group(1)), int(master.group(2)), int(master.group(3)), workers)

    def alive(self) -> bool:
        try:
            return self.processes().current_worker is not None
        except EngineError:
            return False

    def reload(self, timeout: float = 30.0) -> Processes:
        """Reload and wait for the new worker; raise when HAProxy could not load the configuration."""
        before = self.processes()
        with contextlib.suppress(EngineError):  # the master closes the socket as it re-executes itself
            self.command("reload")
        deadline = time.monotonic() + timeout
        while True:
            try:
                after = self.processes()
            except EngineError:
                after = None  # the new master is not listening yet
            if after is not None:
                if after.reloads > before.reloads and after.failed > before.failed:
                    raise ReloadRefused(
                        "HAProxy could not load the configuration, which its check (haproxy -c) passes: most often a "
                        "port another process holds; the previous configuration still serves"
                    )
                new = after.reloads > before.reloads and after.current_worker not in (None, before.current_worker)
                # Listed once forked; serving once its own loop answers the CLI (listeners are set by then).
                if new and self._answers(after.current_worker):
                    return after
            if time.monotonic() > deadline:
                raise EngineError(f"HAProxy did not finish reloading within {timeout:.0f} s")
            time.sleep(0.02)

    def _answers(self, pid: int) -> bool:
        try:
            return f"Pid: {pid}\n" in self.worker("show info")
        except EngineError:
            return False

    def _set(self, text: str) -> None:
        answer = self.worker(text).strip()
        if answer not in _OK_ANSWERS:
            raise EngineError(f"HAProxy refused '{text}': {answer}")

    def set_weight(self, backend: str, server: str, weight: int) -> None:
        self._set(f"set weight {backend}/{server} {weight}")

    def set_state(self, backend: str, server: str, state: str) -> None:
        """``ready``, ``drain`` (no new clients, persistence still honoured) or ``maint``."""
        self._set(f"set server {backend}/{server} state {state}")

    def set_maxconn(self, backend: str, server: str, maxconn: int) -> None:
        """The server's connection limit (its declared capacity; 0 means no limit); beyond it requests queue."""
        self._set(f"set maxconn server {backend}/{server} {maxconn}")

    def stats(self) -> list[dict[str, str]]:
        """``show stat`` as one dict per frontend, backend and server (HAProxy's CSV column names)."""
        text = self.worker("show stat").lstrip("# ")
        return [row for row in csv.DictReader(io.StringIO(text)) if row.get("pxname")]

    def servers(self) -> dict[tuple[str, str], dict[str, str]]:
        """(backend, server) -> its stats row, for servers only."""
        return {
            (row["pxname"], row["svname"]): row for row in self.stats() if row["svname"] not in ("FRONTEND", "BACKEND")
        }
