"""A minimal, read-only netlink dump client for the hot paths of metric collection.

pyroute2 decodes every attribute of every message into Python objects: fine
for a handful of links, but a conntrack table of 100,000 entries takes it
~30 s and lbweb's ~10,000 named nftables counters take libnftables ~0.3 s
(it builds its whole cache first). Reading the same dumps with this module and
looking only at the attributes we need costs a small fraction of that (see
``bench/collector.py``). It only ever sends dump *requests*: nothing here
changes the kernel.
"""

from __future__ import annotations

import itertools
import os
import socket
import struct
from collections.abc import Iterator

NETLINK_NETFILTER = 12
NLM_F_REQUEST = 0x1
NLM_F_DUMP = 0x300
NLMSG_ERROR = 2
NLMSG_DONE = 3
NLA_TYPE_MASK = 0x3FFF  # strips NLA_F_NESTED / NLA_F_NET_BYTEORDER

MESSAGE_HEADER = struct.Struct("=IHHII")  # length, type, flags, sequence, port id
ATTR_HEADER = struct.Struct("=HH")  # length, type
NFGEN_HEADER = struct.Struct("=BBH")  # family, version, resource id (big endian, unused here)
NFGEN_HEADER_SIZE = NFGEN_HEADER.size
ERROR_CODE = struct.Struct("=i")

_sequence = itertools.count(1)


def align(length: int) -> int:
    return (length + 3) & ~3


def attr(attr_type: int, payload: bytes) -> bytes:
    """One netlink attribute, padded to four bytes."""
    length = ATTR_HEADER.size + len(payload)
    return ATTR_HEADER.pack(length, attr_type) + payload + b"\0" * (align(length) - length)


def attrs(data: bytes, start: int, end: int) -> Iterator[tuple[int, int, int]]:
    """The attributes between ``start`` and ``end``: (type, payload start, payload end)."""
    unpack = ATTR_HEADER.unpack_from
    while start + 4 <= end:
        length, attr_type = unpack(data, start)
        if length < 4:
            return
        yield attr_type & NLA_TYPE_MASK, start + 4, start + length
        start += align(length)


class NetlinkError(OSError):
    """The kernel answered a dump request with an error (errno)."""


def dump(
    protocol: int, message_type: int, family: int, payload: bytes = b"", receive_buffer: int = 4 << 20
) -> Iterator[tuple[bytes, int, int]]:
    """Send one dump request; yield (buffer, start, end) of each answer's body after the nfgen header."""
    sequence = next(_sequence) & 0x7FFFFFFF
    body = NFGEN_HEADER.pack(family, 0, 0) + payload
    flags = NLM_F_REQUEST | NLM_F_DUMP
    request = MESSAGE_HEADER.pack(MESSAGE_HEADER.size + len(body), message_type, flags, sequence, 0)
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, protocol) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        sock.bind((0, 0))
        sock.settimeout(10)
        sock.send(request + body)
        unpack = MESSAGE_HEADER.unpack_from
        while True:
            data = sock.recv(1 << 20)
            offset, size = 0, len(data)
            while offset + MESSAGE_HEADER.size <= size:
                length, kind, _flags, seq, _port = unpack(data, offset)
                if length < MESSAGE_HEADER.size:
                    return
                if seq == sequence:
                    if kind == NLMSG_DONE:
                        return
                    if kind == NLMSG_ERROR:
                        (code,) = ERROR_CODE.unpack_from(data, offset + MESSAGE_HEADER.size)
                        if code:
                            raise NetlinkError(-code, os.strerror(-code))
                        return
                    yield data, offset + MESSAGE_HEADER.size + NFGEN_HEADER_SIZE, offset + length
                offset += align(length)
