"""Read what the kernel counts right now, in the network namespace of the calling thread.

Each function reads one source and returns plain values (cumulative counters,
not rates); :mod:`monitoring.sampler` turns two readings into rates. Nothing
here writes to the kernel. nftables counters are read by
``farms.kernel.applier.Kernel.read_counters`` (the one module that talks to nftables).
"""

from __future__ import annotations

import socket
import struct
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from pyroute2 import IPRoute

from . import netlink

LINK_FIELDS = ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets", "rx_errors", "tx_errors", "rx_dropped", "tx_dropped")
CONNTRACK_STAT_FIELDS = ("insert_failed", "drop", "early_drop")
# /proc/self/net follows the process's first thread; thread-self follows the thread that reads (see run_in_netns).
PROC_NET = Path("/proc/thread-self/net")
PROC_SYS_NETFILTER = Path("/proc/sys/net/netfilter")


def read_links(ipr: IPRoute) -> dict[str, dict[str, int]]:
    """Cumulative counters of every interface (bytes, packets, errors, drops each way), by name."""
    links = {}
    for message in ipr.get_links():
        stats = message.get_attr("IFLA_STATS64") or message.get_attr("IFLA_STATS") or {}
        links[message.get_attr("IFLA_IFNAME")] = {k: int(stats.get(k, 0)) for k in LINK_FIELDS}
    return links


class CpuTimes(NamedTuple):
    """Jiffies one core spent busy and in total since boot."""

    busy: int
    total: int


def read_cpu_times(path: Path = Path("/proc/stat")) -> list[CpuTimes]:
    """Per core, in core order (the aggregate ``cpu`` line is left out)."""
    cores = []
    for line in path.read_text().splitlines():
        if line.startswith("cpu") and line[3:4].isdigit():
            values = [int(v) for v in line.split()[1:]]
            idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
            total = sum(values[:8])  # guest time is already inside user/nice
            cores.append(CpuTimes(total - idle, total))
    return cores


def read_conntrack_totals() -> tuple[int | None, int | None]:
    """Entries in the conntrack table and its maximum (None when conntrack is not loaded)."""

    def read(name: str) -> int | None:
        try:
            return int((PROC_SYS_NETFILTER / name).read_text())
        except (OSError, ValueError):
            return None

    return read("nf_conntrack_count"), read("nf_conntrack_max")


def read_conntrack_stats(path: Path | None = None) -> dict[str, int]:
    """Cumulative insert_failed, drop and early_drop, summed over CPUs ({} when unavailable)."""
    try:
        lines = (path or PROC_NET / "stat" / "nf_conntrack").read_text().split("\n")
    except OSError:
        return {}
    names = lines[0].split()
    totals = dict.fromkeys(CONNTRACK_STAT_FIELDS, 0)
    for line in lines[1:]:
        values = line.split()
        if len(values) != len(names):
            continue
        for name, value in zip(names, values, strict=True):
            if name in totals:
                totals[name] += int(value, 16)
    return totals


def read_local_port_range() -> int:
    """ip_local_port_range's size: the census's denominator for a farm whose SNAT capacity is unknown
    (nf_nat itself picks masquerade ports in 1024-65535, and a farm's own range when it has one)."""
    try:
        low, high = (int(v) for v in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        return high - low + 1
    except (OSError, ValueError):
        return 28232  # Linux default 32768-60999


# ctnetlink (include/uapi/linux/netfilter/nfnetlink_conntrack.h)
NFNL_SUBSYS_CTNETLINK = 1
IPCTNL_MSG_CT_GET = 1
CTA_TUPLE_REPLY, CTA_STATUS, CTA_PROTOINFO, CTA_MARK = 2, 3, 4, 8
CTA_PROTOINFO_TCP, CTA_PROTOINFO_TCP_STATE = 1, 1
TCP_CLOSING_STATES = frozenset({7, 8})  # TIME_WAIT, CLOSE: over, only the entry lingers (as conntrack.py)
CTA_TUPLE_IP, CTA_TUPLE_PROTO = 1, 2
CTA_IP_V4_SRC, CTA_IP_V6_SRC = 1, 3
CTA_PROTO_SRC_PORT = 2
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
