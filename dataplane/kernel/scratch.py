"""A private network namespace where libnftables turns JSON into kernel objects cheaply.

libnftables reads every chain, set and counter of every table before it adds a rule or an
element (its cache); with 10,000 farms that alone takes seconds. Here it works on a kernel
that holds only what one change needs, and lbweb reads the objects back as netlink
messages (``nfmsg.read_table``) to send them to the real table itself.

The namespace is a child process's own: it starts as ``python -m dataplane.kernel.scratch``,
unshares a user namespace and a network namespace (``CLONE_NEWUSER | CLONE_NEWNET``),
and serves calls over a socket pair. Why a process and a user namespace: the worker runs
as the unprivileged user ``lbweb`` with CAP_NET_ADMIN only, and a network namespace of its
own would need CAP_SYS_ADMIN; a user namespace needs no privilege, and inside it the
child holds CAP_NET_ADMIN over its own network namespace only. It must be a fresh process
because the kernel refuses ``CLONE_NEWUSER`` to a multithreaded one (the worker is).
Nothing is created on the host, nothing needs a name, and a crash of libnftables in
scratch ends the child, not the worker: the next call starts a new one.
"""

from __future__ import annotations

import ctypes
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable
from multiprocessing.connection import Connection
from typing import Any, Generic, TypeVar

from . import nfmsg, steps

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
T = TypeVar("T")


class ScratchError(Exception):
    """libnftables refused a document in the scratch namespace."""


class ScratchUnavailable(OSError):
    """The scratch process could not start, or died during a call (the reason says which)."""


class ScratchCrashed(Exception):
    """The scratch process died by a signal during a call: libnftables crashed on this input, and
    would crash on the real table too (so this is not an OSError: no fallback to libnftables)."""

    def __init__(self, cause: str):
        super().__init__(f"crashed: the scratch process died by {cause} during {steps.SCRATCH}")
        self.cause = cause


class Scratch:
    """Calls run in the scratch process, one at a time: ``run(f, *args)`` is ``f(kernel, *args)`` there.

    ``f`` must be a module-level function (it travels by name) and its arguments and result must
    pickle; ``kernel`` is the child's :class:`ScratchKernel`.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._conn: Connection | None = None
        self._pending: Pending | None = None  # the call under way, whose answer is not read yet

    def run(self, function: Callable[..., T], *args: Any) -> T:
        return self.submit(function, *args).result()

    def submit(self, function: Callable[..., T], *args: Any) -> Pending[T]:
        """Start ``function(kernel, *args)`` in the scratch process and return at once.

        Why: a bulk apply writes its transactions one after the other, and the scratch load of the next
        one can go on in this child while the kernel writer builds and commits the current one (the two
        processes took turns before, one core idle). The child serves one call at a time, so a call
        still under way is waited for first and its outcome kept for its own :meth:`Pending.result`."""
        with self._lock:
            self._settle()
            pending: Pending[T] = Pending(self)
            try:
                conn = self._connection()
            except ScratchUnavailable as exc:
                pending._outcome = (False, exc)
                return pending
            try:
                conn.send((function, args))
            except OSError as exc:
                pending._outcome = (False, self._ended(exc))
                return pending
            self._pending = pending
            return pending

    def _settle(self) -> None:
        """Take the answer of the call under way, if any, into its :class:`Pending` (lock held)."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        try:
            pending._outcome = self._conn.recv()
        except (EOFError, OSError) as exc:
            pending._outcome = (False, self._ended(exc))

    def _ended(self, exc: BaseException) -> Exception:
        """What the caller is told when the child stopped answering: a crash by a signal, or gone."""
        returncode = self._proc.wait() if self._proc is not None else None
        self._stop()
        if returncode is not None and returncode < 0:
            return ScratchCrashed(steps.signal_name(-returncode))
        return ScratchUnavailable(f"the scratch process ended during a call ({exc or 'no answer'})")

    def _connection(self) -> Connection:
        if self._proc is not None and self._proc.poll() is None and self._conn is not None:
            return self._conn
        self._stop()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "dataplane.kernel.scratch", str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                cwd=_project_root(),
                stdin=subprocess.DEVNULL,
            )
        finally:
            theirs.close()
        self._conn = Connection(ours.detach())
        try:
            ready = self._conn.recv()
        except EOFError as exc:
            self._stop()
            raise ScratchUnavailable("the scratch process ended before it was ready") from exc
        if ready != "ready":
            self._stop()
            raise ScratchUnavailable(str(ready))
        return self._conn

    def _stop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()
            self._proc.wait()
            self._proc = None

    def close(self) -> None:
        with self._lock:
            if self._pending is not None:  # not waited for: the child is ended with it
                self._pending._outcome = (False, ScratchUnavailable("the scratch process was closed during the call"))
                self._pending = None
            self._stop()


class Pending(Generic[T]):
    """A call :meth:`Scratch.submit` started: :meth:`result` waits for its answer, or raises what it raised."""

    def __init__(self, scratch: Scratch) -> None:
        self._scratch = scratch
        self._outcome: tuple[bool, Any] | None = None

    def result(self) -> T:
        if self._outcome is None:
            with self._scratch._lock:
                if self._scratch._pending is self:
                    self._scratch._settle()
        if self._outcome is None:  # cannot happen: a submitted call is settled before the next one
            raise ScratchUnavailable("the scratch call was never answered")
        ok, value = self._outcome
        if not ok:
            raise value
        return value


def _project_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


_by_process: dict[int, Scratch] = {}
_lock = threading.Lock()


def scratch() -> Scratch:
    """This process's scratch, its child started on first use (a forked worker makes its own)."""
    with _lock:
        if os.getpid() not in _by_process:
            _by_process[os.getpid()] = Scratch()
        return _by_process[os.getpid()]


# Everything below runs in the scratch process.


class ScratchKernel:
    """libnftables and netlink dumps on the scratch process's own kernel namespace."""

    def __init__(self) -> None:
        import nftables  # only the child loads libnftables for scratch work

        self._nft = nftables.Nftables()
        self._nft.set_json_output(True)
        _raise_netlink_buffers()
        self._sock: socket.socket | None = None

    def load_text(self, text: str) -> None:
        """Load libnftables JSON given as its text (nothing when empty)."""
        if not text:
            return
        steps.enter(steps.SCRATCH, text)
        rc, _out, err = self._nft.cmd(text)
        if rc != 0:
            raise ScratchError((err or f"libnftables returned {rc}").strip())

    def reset(self, tables: set[tuple[str, str]]) -> None:
        """Remove the given tables (those that exist) so the next load starts from nothing."""
        for family, name in tables:
            steps.enter(steps.SCRATCH, f"delete table {family} {name}")
            self._nft.cmd(f"delete table {family} {name}")

    def read(
        self, family: str, name: str, elements_of: Callable[[nfmsg.TableDump], Iterable[str]] | None = None
    ) -> nfmsg.TableDump:
        from dataplane.kernel import netlink

        if self._sock is None:
            self._sock = netlink.open_socket(netlink.NETLINK_NETFILTER)
        return nfmsg.read_table(family, name, elements_of, self._sock)


def _raise_netlink_buffers() -> None:
    """Give libnftables' netlink socket the largest buffers an unprivileged process may set.

    libnftables grows them for a large batch with SO_SNDBUFFORCE/SO_RCVBUFFORCE only, which need
    CAP_NET_ADMIN in the first user namespace: here they fail silently and a batch of a few hundred
    farms came back "Message too long". Plain SO_SNDBUF/SO_RCVBUF up to net.core.[wr]mem_max need
    no privilege; the context opened its socket when it was made, and it is this process's only
    netlink socket so far."""
    limits = {}
    for option, name in ((socket.SO_SNDBUF, "wmem_max"), (socket.SO_RCVBUF, "rmem_max")):
        with open(f"/proc/sys/net/core/{name}") as f:
            limits[option] = int(f.read())
    for fd in os.listdir("/proc/self/fd"):
        try:
            if not os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                continue
        except OSError:  # the descriptor that listed the directory, closed since
            continue
        sock = socket.socket(fileno=int(fd))
        try:
            if sock.family == socket.AF_NETLINK:
                for option, limit in limits.items():
                    sock.setsockopt(socket.SOL_SOCKET, option, limit)
        finally:
            sock.detach()


def _enter_private_namespaces() -> None:
    """A user namespace where this process is root, and a network namespace it owns."""
    uid, gid = os.getuid(), os.getgid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"unshare(CLONE_NEWUSER|CLONE_NEWNET): {os.strerror(code)}")
    with open("/proc/self/setgroups", "w") as f:
        f.write("deny")
    with open("/proc/self/uid_map", "w") as f:
        f.write(f"0 {uid} 1")
    with open("/proc/self/gid_map", "w") as f:
        f.write(f"0 {gid} 1")


def _serve(fd: int) -> None:
    steps.listen(steps.test_crash())  # nobody to tell the steps to; a test may make this process crash
    conn = Connection(fd)
    try:
        _enter_private_namespaces()
        kernel = ScratchKernel()
    except Exception as exc:  # the parent reports it and falls back to libnftables on the real table
        conn.send(f"no scratch namespace: {exc}")
        return
    conn.send("ready")
    while True:
        try:
            function, args = conn.recv()
        except EOFError:  # the worker went away
            return
        try:
            result = (True, function(kernel, *args))
        except Exception as exc:
            result = (False, exc)
        try:
            conn.send(result)
        except Exception as exc:  # a result or an exception that does not pickle
            conn.send((False, ScratchError(f"scratch call failed: {result[1]!r} ({exc})")))


if __name__ == "__main__":  # served by the module proper, so that what it pickles names dataplane.kernel.scratch
    from dataplane.kernel.scratch import _serve as serve

    serve(int(sys.argv[1]))
