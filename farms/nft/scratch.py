"""A private network namespace where libnftables turns JSON into kernel objects cheaply.

libnftables reads every chain, set and counter of every table before it adds a rule or an
element (its cache); with 10,000 farms that alone takes seconds. Here it works on a kernel
that holds only what one change needs, and lbweb reads the objects back as netlink
messages (``nfmsg.read_table``) to send them to the real table itself.

The namespace belongs to one thread of this process (``unshare(CLONE_NEWNET)`` moves only
the calling thread), so nothing is created on the host, nothing needs a name, and it
disappears with the process. Every call runs on that thread.
"""

from __future__ import annotations

import ctypes
import json
import os
import socket
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import nftables

from lbweb import netlink

from . import nfmsg, steps

CLONE_NEWNET = 0x40000000
T = TypeVar("T")


class ScratchError(Exception):
    """libnftables refused a document in the scratch namespace."""


def _enter_private_namespace() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"unshare(CLONE_NEWNET): {os.strerror(code)}")


class Scratch:
    """libnftables and netlink dumps on a kernel of lbweb's own, one call at a time."""

    def __init__(self) -> None:
        self._executor = ThreadPoolExecutor(1, "nft-scratch", initializer=_enter_private_namespace)
        self._nft: nftables.Nftables | None = None
        self._sock: socket.socket | None = None  # made on the scratch thread, so in its namespace

    def run(self, function: Callable[..., T], *args: Any) -> T:
        return self._executor.submit(function, *args).result()

    # Everything below runs on the scratch thread.

    def _context(self) -> nftables.Nftables:
        if self._nft is None:
            self._nft = nftables.Nftables()
            self._nft.set_json_output(True)
        return self._nft

    def load(self, commands: list[dict]) -> None:
        if not commands:
            return
        text = json.dumps({"nftables": commands})
        steps.enter(steps.SCRATCH, text)
        rc, _out, err = self._context().cmd(text)
        if rc != 0:
            raise ScratchError((err or f"libnftables returned {rc}").strip())

    def reset(self, tables: set[tuple[str, str]]) -> None:
        """Remove the given tables (those that exist) so the next load starts from nothing."""
        for family, name in tables:
            steps.enter(steps.SCRATCH, f"delete table {family} {name}")
            self._context().cmd(f"delete table {family} {name}")

    def read(
        self, family: str, name: str, elements_of: Callable[[nfmsg.TableDump], Iterable[str]] | None = None
    ) -> nfmsg.TableDump:
        if self._sock is None:
            self._sock = netlink.open_socket(netlink.NETLINK_NETFILTER)
        return nfmsg.read_table(family, name, elements_of, self._sock)


_by_process: dict[int, Scratch] = {}
_lock = threading.Lock()


def scratch() -> Scratch:
    """This process's scratch namespace, made on first use (a forked worker makes its own)."""
    with _lock:
        if os.getpid() not in _by_process:
            _by_process[os.getpid()] = Scratch()
        return _by_process[os.getpid()]
