"""lbweb-prober: runs healthd's ``command`` checks as a user of their own, with nothing of lbweb's.

A ``command`` check runs a program an admin typed. Spawned by healthd it would inherit healthd's
user, its CAP_NET_RAW, its environment (``DATABASE_URL``, ``REDIS_URL``, ``SECRET_KEY``,
``LBWEB_ADMIN_PASSWORD``) and its access to the database and Redis. So healthd does not spawn
them: it asks this small process, which the supervisor starts as the user ``lbweb-probe`` (no
capabilities, no group of lbweb's, an empty environment), over a unix socket only lbweb's group
may connect to (the socket 0660, its directory owner lbweb-probe, group lbweb, 0750 with the
setgid bit so the socket gets group lbweb).

Each command runs with an empty environment, cwd ``/``, stdin and stdout on /dev/null, in its
own session (so its own process group), with ``no_new_privs`` (a set-uid or file-capability
program gains nothing). At the request's deadline the whole group is killed with SIGKILL
(the command and every child still in its group), and the group is killed too when the
command exits before, so nothing left in its group outlives the check. A child that leaves the
group on purpose (setsid, setpgid) escapes this; it still runs as lbweb-probe with nothing of
lbweb's, and the service manager ends it with the prober (systemd's control group).

No ``PATH`` is given to the command: the environment is empty, as promised. A bare program name
(``curl``) is looked up by the prober in ``SEARCH_PATH``, a fixed list, never in anything the
request carries; programs the command starts itself find theirs by their own defaults (glibc's
execvp and the shells use ``/bin:/usr/bin`` and more when ``PATH`` is unset).

Wire format: one request per connection, one line of JSON each way. Request
``{"argv": ["prog", "arg", ...], "timeout": 1.5}`` (at most ``MAX_REQUEST`` bytes); answer
``{"exit": 0, "timed_out": false, "stderr": "last words"}`` (with ``"late": seconds`` past the
deadline when it timed out) or ``{"error": "why", "local": true}``
when the command could not run at all (healthd's own trouble, never the backend's). The argv is
healthd's, which read it from the database and replaced ``{address}``/``{port}``; it is never
given to a shell. This module imports nothing of Django: ``python -m healthd.prober``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import json
import logging
import os
import resource
import shutil
import signal
import socket
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SOCKET_ENV = "LBWEB_PROBER_SOCKET"
DEFAULT_SOCKET = "/run/lbweb-prober/prober.sock"
SEARCH_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
MAX_REQUEST = 64 * 1024  # bytes of one request line: a command line is at most 1,000 characters in the database
MAX_ANSWER = 16 * 1024
MAX_ARGS = 512
MAX_TIMEOUT = 600.0  # the model's longest timeout
MAX_RUNNING = 512  # commands at once; more wait for a slot within their own deadline
READ_SECONDS = 5.0  # a client that connects and sends nothing is dropped after this
STDERR_KEEP = 4096  # bytes of the command's stderr kept (the last ones); the answer carries its last line
ANSWER_GRACE = 1.0  # healthd waits this long past the timeout for the prober's answer
STALL_GRACE = 0.25  # a timer that fires this much later than its deadline says the process stalled
PR_SET_NO_NEW_PRIVS = 38

log = logging.getLogger("lbweb.prober")


def socket_path() -> str:
    """The socket both sides use: ``LBWEB_PROBER_SOCKET`` or the appliance's default."""
    return os.environ.get(SOCKET_ENV) or DEFAULT_SOCKET


class BadRequest(ValueError):
    """A request the prober refuses to run; the message says why."""


def parse_request(line: bytes) -> tuple[list[str], float]:
    """The argv and timeout of one request line; BadRequest for anything else."""
    try:
        request = json.loads(line)
    except ValueError as exc:
        raise BadRequest(f"not JSON: {exc}") from None
    if not isinstance(request, dict) or set(request) != {"argv", "timeout"}:
        raise BadRequest('a request is {"argv": [...], "timeout": seconds}')
    argv, timeout = request["argv"], request["timeout"]
    if not isinstance(argv, list) or not argv or len(argv) > MAX_ARGS:
        raise BadRequest(f"argv must be a list of 1 to {MAX_ARGS} strings")
    if not all(isinstance(arg, str) and "\0" not in arg for arg in argv) or not argv[0]:
        raise BadRequest("every argument must be a string without NUL, the program name not empty")
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= MAX_TIMEOUT:
        raise BadRequest(f"timeout must be a number of seconds in (0, {MAX_TIMEOUT:g}]")
    return argv, float(timeout)


def _program(name: str) -> str | None:
    """An absolute path for argv[0]: as given when it has a slash, else looked up in ``SEARCH_PATH`` only."""
    if "/" in name:
        return name
    return shutil.which(name, path=SEARCH_PATH)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


async def _keep_tail(stream: asyncio.StreamReader, tail: bytearray) -> None:
    while chunk := await stream.read(65536):
        tail += chunk
        del tail[:-STDERR_KEEP]


def _last_line(tail: bytes) -> str:
    lines = tail.decode(errors="replace").strip().splitlines()
    return lines[-1][:200] if lines else ""


class Runner:
    """Runs commands, at most ``MAX_RUNNING`` at once, each killed with its process group at its deadline."""

    def __init__(self) -> None:
        self._slots = asyncio.Semaphore(MAX_RUNNING)
        self._groups: set[int] = set()

    async def run(self, argv: list[str], timeout: float) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            async with asyncio.timeout_at(deadline):
                await self._slots.acquire()
        except TimeoutError:
            return {"error": f"the prober is busy: {MAX_RUNNING} commands running", "local": True}
        try:
            return await self._run(argv, deadline)
        finally:
            self._slots.release()

    async def _run(self, argv: list[str], deadline: float) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        program = _program(argv[0])
        if program is None:
            return {"error": f"cannot run {argv[0]}: not found in {SEARCH_PATH}", "local": True}
        # stderr on a pipe of our own, not asyncio's: asyncio's wait() also waits for its pipes to close,
        # which a child left running in the background would hold open until the deadline
        try:
            read_end, write_end = os.pipe2(os.O_CLOEXEC)
        except OSError as exc:  # no descriptors left
            return {"error": f"the prober cannot run {argv[0]}: {(exc.strerror or str(exc)).lower()}", "local": True}
        try:
            proc = await asyncio.create_subprocess_exec(
                program,
                *argv[1:],
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=write_end,
                env={},
                cwd="/",
                start_new_session=True,  # its own session and process group: the group is killed as one
            )
        except OSError as exc:
            os.close(read_end)
            return {"error": f"cannot run {argv[0]}: {(exc.strerror or str(exc)).lower()}", "local": True}
        finally:
            os.close(write_end)
        self._groups.add(proc.pid)
        stream = asyncio.StreamReader()
        pipe, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(stream),
            open(read_end, "rb", buffering=0),  # noqa: SIM115 - the transport closes it
        )
        tail = bytearray()
        reader = asyncio.ensure_future(_keep_tail(stream, tail))
        timed_out, late = False, 0.0
        try:
            async with asyncio.timeout_at(deadline):
                await proc.wait()
        except TimeoutError:
            timed_out, late = True, loop.time() - deadline
        finally:
            # At the deadline: the command and its children. After it exited: whatever it left behind
            # (its pid stays reserved as the group's id while any member lives, so this reaches only them).
            _kill_group(proc.pid)
            self._groups.discard(proc.pid)
        await proc.wait()
        try:
            async with asyncio.timeout(0.5):  # a child that escaped into a session of its own may hold stderr
                await reader
        except TimeoutError:
            reader.cancel()
        finally:
            pipe.close()
        answer = {"exit": None if timed_out else proc.returncode, "timed_out": timed_out, "stderr": _last_line(tail)}
        return {**answer, "late": round(late, 3)} if timed_out else answer

    def kill_all(self) -> None:
        for pgid in list(self._groups):
            _kill_group(pgid)


async def _answer(writer: asyncio.StreamWriter, answer: dict[str, Any]) -> None:
    writer.write(json.dumps(answer).encode() + b"\n")
    with contextlib.suppress(ConnectionError):
        await writer.drain()


def connection_handler(runner: Runner):
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                async with asyncio.timeout(READ_SECONDS):
                    line = await reader.readuntil(b"\n")
                argv, timeout = parse_request(line)
            except asyncio.LimitOverrunError:
                await _answer(writer, {"error": f"request larger than {MAX_REQUEST} bytes", "local": True})
                return
            except (asyncio.IncompleteReadError, TimeoutError, ConnectionError):
                return  # the client went away or sent no full line: nobody to answer
            except BadRequest as exc:
                await _answer(writer, {"error": f"bad request: {exc}", "local": True})
                return
            try:
                answer = await runner.run(argv, timeout)
            except Exception as exc:  # a bug of the prober: healthd's trouble, said as such, never the backend's
                log.exception("cannot run %s", argv[0])
                answer = {"error": f"the prober failed: {exc!r}"[:200], "local": True}
            await _answer(writer, answer)
        finally:
            writer.close()

    return handle


# -- the client side, used by healthd ----------------------------------------------------------


class ProberUnavailable(Exception):
    """The prober is not running, not reachable or not answering: healthd's own trouble, never a backend's."""


@dataclass(frozen=True)
class Answer:
    exit: int | None = None
    timed_out: bool = False
    stderr: str = ""
    error: str = ""
    local: bool = False
    late: float = 0.0  # how much later than the deadline the prober's timer fired (a stall of its own)


async def ask(argv: list[str], timeout: float, path: str | None = None) -> Answer:
    """Have the prober run ``argv`` with ``timeout``; raises ProberUnavailable when it cannot answer."""
    path = path or socket_path()
    request = json.dumps({"argv": argv, "timeout": timeout}).encode() + b"\n"
    writer = None
    try:
        async with asyncio.timeout(timeout + ANSWER_GRACE):
            reader, writer = await asyncio.open_unix_connection(path, limit=MAX_ANSWER)
            writer.write(request)
            await writer.drain()
            line = await reader.readline()
    except TimeoutError:
        raise ProberUnavailable(f"the command prober did not answer within {timeout + ANSWER_GRACE:g}s") from None
    except (FileNotFoundError, ConnectionRefusedError):
        raise ProberUnavailable(f"the command prober is not running: nothing listens on {path}") from None
    except PermissionError:
        raise ProberUnavailable(f"healthd may not connect to the command prober's socket {path}") from None
    except (OSError, ValueError) as exc:
        raise ProberUnavailable(f"the command prober failed: {exc}") from None
    finally:
        if writer is not None:
            writer.close()
    try:
        answer = json.loads(line)
        return Answer(**answer)
    except (ValueError, TypeError):
        raise ProberUnavailable(f"the command prober gave no answer ({line[:100]!r})") from None


# -- the process -------------------------------------------------------------------------------


def _no_new_privs() -> None:
    """Neither the prober nor any command may gain privileges through a set-uid or file-capability program."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")


def _listening(path: str) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(path)
        except OSError:
            return False
    return True


def _prepare(path: str) -> None:
    """Make the socket's directory when missing (the supervisor makes it on the appliance); clear a stale socket."""
    directory = Path(path).parent
    if not directory.is_dir():
        directory.mkdir(parents=True)
        directory.chmod(0o2750)  # (umask 077 is already set) its group, which new sockets inherit, may enter
    if os.path.lexists(path):
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            raise SystemExit(f"lbweb-prober: {path} exists and is not a socket")
        if _listening(path):
            raise SystemExit(f"lbweb-prober: another prober listens on {path}")
        os.unlink(path)


async def serve(path: str) -> None:
    """Listen on ``path`` until SIGTERM or SIGINT; then kill what still runs and remove the socket."""
    runner = Runner()
    _prepare(path)
    handler = connection_handler(runner)
    previous = os.umask(0o117)  # the socket is born 0660: owner and the directory's group, from the first moment
    try:
        server = await asyncio.start_unix_server(handler, path, limit=MAX_REQUEST, backlog=MAX_RUNNING)
    finally:
        os.umask(previous)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    log.info("lbweb-prober: listening on %s as uid %d", path, os.getuid())
    try:
        await stop.wait()
    finally:
        server.close()
        runner.kill_all()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        log.info("lbweb-prober: stopped")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m healthd.prober", description=__doc__.split("\n")[0])
    parser.add_argument("--socket", default=None, help=f"unix socket path (default: ${SOCKET_ENV} or {DEFAULT_SOCKET})")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    if os.geteuid() == 0:
        raise SystemExit("lbweb-prober: refusing to run commands as root; start it as the user lbweb-probe")
    _no_new_privs()
    os.umask(0o077)
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # each command in flight: a connection and a pipe
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    try:
        asyncio.run(serve(args.socket or socket_path()))
    except PermissionError as exc:  # the socket's directory is not the prober's to write
        raise SystemExit(f"lbweb-prober: {exc}") from None


if __name__ == "__main__":
    main()
