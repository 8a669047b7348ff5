"""Conntrack, read and pruned by the worker (pyroute2 netlink): per-backend counts and cuts.

A farm's connections carry its id as conntrack mark; a backend is recognised by the reply
direction's source, which DNAT sets to the backend's address.
"""

from __future__ import annotations

import collections
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


def _reply_source(entry) -> str | None:
    reply = entry.get_attr("CTA_TUPLE_REPLY")
    if reply is None:
        return None
    ip = reply.get_attr("CTA_TUPLE_IP")
    return ip.get_attr("CTA_IP_V4_SRC") or ip.get_attr("CTA_IP_V6_SRC")


TCP_CLOSING_STATES = {7, 8}  # TIME_WAIT, CLOSE: the connection is over, only its entry lingers


def _is_live(entry) -> bool:
    info = entry.get_attr("CTA_PROTOINFO")
    tcp = info.get_attr("CTA_PROTOINFO_TCP") if info is not None else None
    if tcp is None:
        return True
    return tcp.get_attr("CTA_PROTOINFO_TCP_STATE") not in TCP_CLOSING_STATES


def connections_by_backend(mark: int) -> dict[str, int]:
    """How many live connections of one farm each backend address holds right now."""
    counts: collections.Counter[str] = collections.Counter()
    with Conntrack() as ct:
        for entry in ct.dump(mark=mark):
            if entry.get_attr("CTA_MARK") != mark or not _is_live(entry):
                continue
            source = _reply_source(entry)
            if source:
                counts[str(ipaddress.ip_address(source))] += 1
    return dict(counts)


def cut(mark: int, backend_address: str) -> int:
    """Delete a farm's conntrack entries towards one backend; established connections to it end now."""
    return delete_backend_connections(mark, backend_address, None)
