"""Conntrack, read and pruned through ctnetlink: the collector's census, per-backend counts, cuts.

The one conntrack reader of lbweb (the collector's census, the worker's least-connections counts and
its cuts all parse the same dump here). A farm's connections carry its id as conntrack mark; a backend
is recognised by the reply direction's source, which DNAT sets to the backend's address.

Why not pyroute2's Conntrack: it decodes every attribute of every entry into Python objects (a table
of 100,000 entries takes it ~30 s, see ``bench/collector.py``); this reads only the attributes it
needs, and deletes an entry by sending back the original tuple (and id) the dump gave.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
import struct
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from . import netlink

# ctnetlink (include/uapi/linux/netfilter/nfnetlink_conntrack.h)
NFNL_SUBSYS_CTNETLINK = 1
IPCTNL_MSG_CT_GET, IPCTNL_MSG_CT_DELETE = 1, 2
CTA_TUPLE_ORIG, CTA_TUPLE_REPLY, CTA_STATUS, CTA_PROTOINFO, CTA_MARK, CTA_ID, CTA_MARK_MASK = 1, 2, 3, 4, 8, 12, 21
CTA_PROTOINFO_TCP, CTA_PROTOINFO_TCP_STATE = 1, 1
TCP_CLOSING_STATES = frozenset({7, 8})  # TIME_WAIT, CLOSE: the connection is over, only its entry lingers
CTA_TUPLE_IP, CTA_TUPLE_PROTO = 1, 2
CTA_IP_V4_SRC, CTA_IP_V6_SRC = 1, 3
CTA_PROTO_SRC_PORT = 2
# A flow's counters (nf_conntrack_acct): lbweb counts bytes in nftables instead; bench/ct_destroy_reader.py
# reads these to measure what reading them would cost (bench/runs/PASSES.md, "Conntrack accounting with its reader").
CTA_COUNTERS_ORIG, CTA_COUNTERS_REPLY, CTA_COUNTERS_PACKETS, CTA_COUNTERS_BYTES = 9, 10, 1, 2
IPS_SRC_NAT = 1 << 4
BE32 = struct.Struct(">I")
BE16 = struct.Struct(">H")
ATTR = netlink.ATTR_HEADER


class Destination(NamedTuple):
    """Where a tracked connection really goes: the reply tuple's source (a backend after DNAT)."""

    mark: int
    address: bytes  # packed IPv4 or IPv6 address
    port: int | None


@dataclass
class Census:
    """One pass over the whole conntrack table, counted by mark and real destination."""

    entries: int = 0
    connections: Counter = field(default_factory=Counter)  # Destination -> entries (open or closing)
    open: Counter = field(default_factory=Counter)  # Destination -> entries not closing (TCP before FIN; UDP...)
    snat: Counter = field(default_factory=Counter)  # Destination -> entries whose source was NATed (ports held)


def _reply_source(data: bytes, start: int, end: int) -> tuple[bytes, int | None]:
    address, port = b"", None
    for kind, a, b in netlink.attrs(data, start, end):
        if kind == CTA_TUPLE_IP:
            for inner, c, d in netlink.attrs(data, a, b):
                if inner in (CTA_IP_V4_SRC, CTA_IP_V6_SRC):
                    address = data[c:d]
        elif kind == CTA_TUPLE_PROTO:
            for inner, c, _d in netlink.attrs(data, a, b):
                if inner == CTA_PROTO_SRC_PORT:
                    (port,) = BE16.unpack_from(data, c)
    return address, port


def _reply_source_fast(data: bytes, a: int) -> tuple[bytes, int | None] | None:
    """The usual layout of a reply tuple (ip: src first; proto: number then source port), else None."""
    ip_length, ip_kind = ATTR.unpack_from(data, a)
    source_length, source_kind = ATTR.unpack_from(data, a + 4)
    if ip_kind & netlink.NLA_TYPE_MASK != CTA_TUPLE_IP or source_kind not in (CTA_IP_V4_SRC, CTA_IP_V6_SRC):
        return None
    address = data[a + 8 : a + 4 + source_length]
    proto = a + netlink.align(ip_length)
    _proto_length, proto_kind = ATTR.unpack_from(data, proto)
    number_length, number_kind = ATTR.unpack_from(data, proto + 4)
    port_at = proto + 4 + netlink.align(number_length)
    _port_length, port_kind = ATTR.unpack_from(data, port_at)
    if proto_kind & netlink.NLA_TYPE_MASK != CTA_TUPLE_PROTO or number_kind != 1 or port_kind != CTA_PROTO_SRC_PORT:
        return address, None  # ICMP and friends have no ports
    return address, BE16.unpack_from(data, port_at + 4)[0]


def _tcp_state(data: bytes, a: int) -> int | None:
    """The TCP state inside a CTA_PROTOINFO at ``a`` (None for other protocols)."""
    _length, kind = ATTR.unpack_from(data, a + 4)
    state_length, state_kind = ATTR.unpack_from(data, a + 8)
    if kind & netlink.NLA_TYPE_MASK == CTA_PROTOINFO_TCP and state_kind == CTA_PROTOINFO_TCP_STATE:
        return data[a + 12]
    return None


def conntrack_census() -> Census:
    """Dump the conntrack table once (IPv4 and IPv6) and count entries per mark and real destination.

    This walks every entry, so it costs CPU in proportion to the table size
    (~5 us an entry): the sampler spaces censuses out to keep within a CPU budget.
    The loop is written flat on purpose: it runs once per tracked connection.
    """
    census = Census()
    message_type = (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_GET
    connections, opened, snat = census.connections, census.open, census.snat
    unpack_attr, unpack32 = ATTR.unpack_from, BE32.unpack_from
    entries = 0
    for data, start, end in netlink.dump(netlink.NETLINK_NETFILTER, message_type, socket.AF_UNSPEC):
        entries += 1
        mark = status = 0
        reply = protoinfo = None
        a = start
        while a < end:
            length, kind = unpack_attr(data, a)
            if length < 4:
                break
            kind &= 0x3FFF
            if kind == CTA_MARK:
                mark = unpack32(data, a + 4)[0]
            elif kind == CTA_STATUS:
                status = unpack32(data, a + 4)[0]
            elif kind == CTA_TUPLE_REPLY:
                reply = a
            elif kind == CTA_PROTOINFO:
                protoinfo = a
            a += (length + 3) & ~3
        if mark and reply is not None:
            length = unpack_attr(data, reply)[0]
            source = _reply_source_fast(data, reply + 4) or _reply_source(data, reply + 4, reply + length)
            destination = Destination(mark, *source)
            connections[destination] += 1
            if protoinfo is None or _tcp_state(data, protoinfo) not in TCP_CLOSING_STATES:
                opened[destination] += 1
            if status & IPS_SRC_NAT:
                snat[destination] += 1
    census.entries = entries
    return census


# -- one farm's connections: counts and cuts ---------------------------------------------------


@dataclass
class Entry:
    """One tracked connection of a farm, as the dump gave it."""

    family: int
    address: bytes  # the reply tuple's source: the backend after DNAT (packed)
    port: int | None
    live: bool  # not TIME_WAIT or CLOSE
    handle: bytes  # CTA_TUPLE_ORIG and CTA_ID as dumped: what a delete sends back


def farm_entries(mark: int, sock: socket.socket | None = None) -> Iterator[Entry]:
    """Every tracked connection whose conntrack mark is ``mark`` (the kernel filters the dump by mark;
    checked here too, as a kernel may ignore the filter)."""
    request = netlink.attr(CTA_MARK, BE32.pack(mark)) + netlink.attr(CTA_MARK_MASK, BE32.pack(0xFFFFFFFF))
    message_type = (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_GET
    for data, start, end in netlink.dump(netlink.NETLINK_NETFILTER, message_type, socket.AF_UNSPEC, request, sock=sock):
        found = reply = protoinfo = None
        handle = b""
        for kind, a, b in netlink.attrs(data, start, end):
            if kind == CTA_MARK:
                (found,) = BE32.unpack_from(data, a)
            elif kind == CTA_TUPLE_REPLY:
                reply = (a, b)
            elif kind == CTA_PROTOINFO:
                protoinfo = a - ATTR.size
            elif kind in (CTA_TUPLE_ORIG, CTA_ID):
                whole = data[a - ATTR.size : b]
                handle += whole + b"\0" * (netlink.align(len(whole)) - len(whole))
        if found != mark or reply is None:
            continue
        address, port = _reply_source(data, *reply)
        live = protoinfo is None or _tcp_state(data, protoinfo) not in TCP_CLOSING_STATES
        yield Entry(data[start - netlink.NFGEN_HEADER_SIZE], address, port, live, handle)


def connections_by_backend(mark: int) -> dict[str, int]:
    """How many live connections of one farm each backend address holds right now."""
    counts: Counter[str] = Counter()
    for entry in farm_entries(mark):
        if entry.live and entry.address:
            counts[str(ipaddress.ip_address(entry.address))] += 1
    return dict(counts)


def delete_backend_connections(mark: int, address: str, port: int | None) -> int:
    """Delete every connection with conntrack mark ``mark`` whose reply comes from ``address[:port]``.

    After DNAT the reply tuple's source is the backend, so this is "delete by
    destination" without touching the same server's connections of other farms.
    Returns how many entries were deleted (one that ended meanwhile is not counted).
    """
    backend = ipaddress.ip_address(address).packed
    message_type = (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_DELETE
    with netlink.open_socket(netlink.NETLINK_NETFILTER) as sock:
        doomed = [
            (message_type, e.family, e.handle)
            for e in farm_entries(mark, sock)
            if e.address == backend and (port is None or e.port == port)
        ]
        answers = netlink.acknowledged(doomed, sock)
    failed = [code for code in answers if code not in (0, errno.ENOENT)]
    if failed:
        raise netlink.NetlinkError(failed[0], f"conntrack delete: {errno.errorcode.get(failed[0], failed[0])}")
    return answers.count(0)


def cut(mark: int, backend_address: str) -> int:
    """Delete a farm's conntrack entries towards one backend; established connections to it end now."""
    return delete_backend_connections(mark, backend_address, None)
