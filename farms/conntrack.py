"""Conntrack I/O of the worker: delete the connections one farm has with one backend.

Runs only in the worker (it needs CAP_NET_ADMIN), through pyroute2's
netlink conntrack API, in the worker's own network namespace.
"""

from __future__ import annotations

import ipaddress
import socket

from pyroute2 import Conntrack
from pyroute2.netlink.nfnetlink.nfctsocket import NFCTAttrTuple


def delete_backend_connections(mark: int, address: str, port: int | None) -> int:
    """Delete every connection with conntrack mark ``mark`` whose reply comes from ``address[:port]``.

    After DNAT the reply tuple's source is the backend, so this is "delete by
    destination" without touching the same server's connections of other farms.
    Returns how many entries were deleted.
    """
    family = socket.AF_INET if ipaddress.ip_address(address).version == 4 else socket.AF_INET6
    reply = NFCTAttrTuple(family=family, saddr=address, sport=port)
    with Conntrack() as ct:
        # pyroute2 passes the mark to the kernel, which may not filter the dump by it: check it here too
        entries = [e for e in ct.dump_entries(mark=mark, tuple_reply=reply) if e.mark == mark]
        for entry in entries:
            ct.delete(entry)
    return len(entries)
