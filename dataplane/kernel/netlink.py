"""A minimal netlink client: dumps for the hot paths of metric collection, and acknowledged requests.

pyroute2 decodes every attribute of every message into Python objects: fine
for a handful of links, but a conntrack table of 100,000 entries takes it
~30 s and lbweb's ~10,000 named nftables counters take libnftables ~0.3 s
(it builds its whole cache first). Reading the same dumps with this module and
looking only at the attributes we need costs a small fraction of that (see
``bench/collector.py``). Dumps change nothing; :func:`acknowledged` sends the few
requests that do (conntrack deletes, ``conntrack.py``); nf_tables batches are ``nfmsg.py``'s.
:func:`get_each` asks for many objects by name, where a dump of a large table costs more.
"""

from __future__ import annotations

import itertools
import os
import socket
import struct
from collections.abc import Iterable, Iterator

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
SO_RCVBUFFORCE = 33  # not in Python's socket module

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


def open_socket(protocol: int, receive_buffer: int = 4 << 20) -> socket.socket:
    """A bound netlink socket, for callers that make many dumps in a row (closing one costs ~1 ms)."""
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, protocol)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.bind((0, 0))
    sock.settimeout(10)
    return sock


def dump_chunks(
    protocol: int,
    message_type: int,
    family: int,
    payload: bytes = b"",
    receive_buffer: int = 4 << 20,
    sock: socket.socket | None = None,
) -> Iterator[tuple[bytes, list[tuple[int, int]]]]:
    """Send one dump request; yield each buffer received with the (start, end) of every answer's body in it.

    A body starts after the netlink and nfgen headers. The answer ends at NLMSG_DONE;
    an NLMSG_ERROR raises :class:`NetlinkError`. ``sock`` (from :func:`open_socket`) is used
    and left open; without it a socket is opened for this dump alone. A dump must be read to its
    end before the socket serves another.
    """
    if sock is None:
        with open_socket(protocol, receive_buffer) as own:
            yield from dump_chunks(protocol, message_type, family, payload, receive_buffer, own)
        return
    sequence = next(_sequence) & 0x7FFFFFFF
    body = NFGEN_HEADER.pack(family, 0, 0) + payload
    flags = NLM_F_REQUEST | NLM_F_DUMP
    request = MESSAGE_HEADER.pack(MESSAGE_HEADER.size + len(body), message_type, flags, sequence, 0)
    sock.send(request + body)
    unpack = MESSAGE_HEADER.unpack_from
    done = False
    while not done:
        data = sock.recv(1 << 20)
        spans = []
        offset, size = 0, len(data)
        while offset + MESSAGE_HEADER.size <= size:
            length, kind, _flags, seq, _port = unpack(data, offset)
            if length < MESSAGE_HEADER.size:
                done = True
                break
            if seq == sequence:
                if kind == NLMSG_DONE:
                    done = True
                    break
                if kind == NLMSG_ERROR:
                    (code,) = ERROR_CODE.unpack_from(data, offset + MESSAGE_HEADER.size)
                    if code:
                        raise NetlinkError(-code, os.strerror(-code))
                    done = True
                    break
                spans.append((offset + MESSAGE_HEADER.size + NFGEN_HEADER_SIZE, offset + length))
            offset += align(length)
        if spans:
            yield data, spans


def get_each(
    protocol: int, message_type: int, family: int, payloads: Iterable[bytes], batch: int = 256
) -> Iterator[tuple[bytes, list[tuple[int, int, int]]]]:
    """Send each payload as a GET request of its own (no DUMP), ``batch`` of them per send, and yield each
    buffer received with the (message type, body start, body end) of the answers in it: one per request,
    the object asked for or an NLMSG_ERROR (ENOENT: no such object), which the caller tells apart.

    Why: a DUMP starts again from the table's first object for every buffer it fills (the kernel's object
    list has no cursor), so dumping n objects walks about n^2 / 600 list entries: 0.4 s for 100,000
    counters and 9 s for 300,000 here. Asked for by name, each costs the same whatever the table holds.
    The kernel answers every request of a send before the send returns, so a batch's answers must fit in
    the socket's receive buffer (forced to 8 MB where the process may: about 1 KB an answer).
    """
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, protocol) as sock:
        try:
            sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 8 << 20)
        except PermissionError:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        sock.bind((0, 0))
        sock.settimeout(10)
        header = NFGEN_HEADER.pack(family, 0, 0)
        payloads = iter(payloads)  # made as they are sent: 300,000 requests held at once would be ~40 MB
        while True:
            requests, waiting = bytearray(), 0
            for payload in itertools.islice(payloads, batch):
                sequence = next(_sequence) & 0x7FFFFFFF
                length = MESSAGE_HEADER.size + len(header) + len(payload)
                requests += MESSAGE_HEADER.pack(length, message_type, NLM_F_REQUEST, sequence, 0) + header + payload
                waiting += 1
            if not waiting:
                return
            sock.send(bytes(requests))
            while waiting:
                data = sock.recv(1 << 22)
                answers = [(kind, start + NFGEN_HEADER_SIZE, end) for kind, _seq, start, end in messages(data)]
                waiting -= len(answers)
                yield data, answers


def dump_raw(
    protocol: int, message_type: int, family: int, payload: bytes = b"", receive_buffer: int = 4 << 20
) -> Iterator[bytes]:
    """Like :func:`dump_chunks` but without walking the messages: yield each buffer as received.

    For readers that scan buffers in bulk (a regular expression) and check what
    they found against a count. The final NLMSG_DONE is cut off; an error raises.
    """
    sequence = next(_sequence) & 0x7FFFFFFF
    body = NFGEN_HEADER.pack(family, 0, 0) + payload
    flags = NLM_F_REQUEST | NLM_F_DUMP
    request = MESSAGE_HEADER.pack(MESSAGE_HEADER.size + len(body), message_type, flags, sequence, 0)
    done_size = MESSAGE_HEADER.size + ERROR_CODE.size
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, protocol) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        sock.bind((0, 0))
        sock.settimeout(10)
        sock.send(request + body)
        while True:
            data = sock.recv(1 << 20)
            if len(data) < MESSAGE_HEADER.size:
                return
            _length, kind, _flags, seq, _port = MESSAGE_HEADER.unpack_from(data, 0)
            if kind == NLMSG_ERROR and seq == sequence:  # the dump could not start: a lone error message
                (code,) = ERROR_CODE.unpack_from(data, MESSAGE_HEADER.size)
                if code:
                    raise NetlinkError(-code, os.strerror(-code))
                return
            if len(data) >= done_size:
                length, kind, _flags, seq, _port = MESSAGE_HEADER.unpack_from(data, len(data) - done_size)
                if kind == NLMSG_DONE and length == done_size and seq == sequence:
                    (code,) = ERROR_CODE.unpack_from(data, len(data) - ERROR_CODE.size)
                    if code < 0:
                        raise NetlinkError(-code, os.strerror(-code))
                    if len(data) > done_size:
                        yield data[: len(data) - done_size]
                    return
            yield data


def messages(data: bytes) -> Iterator[tuple[int, int, int, int]]:
    """(type, sequence, start, end) of every message in a buffer; start is where the message's
    header ends (an error's code, an nfgen header), end where the message ends."""
    offset = 0
    while offset + MESSAGE_HEADER.size <= len(data):
        length, kind, _flags, sequence, _port = MESSAGE_HEADER.unpack_from(data, offset)
        if length < MESSAGE_HEADER.size:
            return
        yield kind, sequence, offset + MESSAGE_HEADER.size, offset + length
        offset += align(length)


def message_spans(data: bytes) -> list[tuple[int, int]]:
    """The (start, end) of every message body in a buffer from :func:`dump_raw`."""
    return [(start + NFGEN_HEADER_SIZE, end) for _kind, _sequence, start, end in messages(data)]


def dump(
    protocol: int,
    message_type: int,
    family: int,
    payload: bytes = b"",
    receive_buffer: int = 4 << 20,
    sock: socket.socket | None = None,
) -> Iterator[tuple[bytes, int, int]]:
    """Send one dump request; yield (buffer, start, end) of each answer's body after the nfgen header."""
    for data, spans in dump_chunks(protocol, message_type, family, payload, receive_buffer, sock):
        for start, end in spans:
            yield data, start, end


NLM_F_ACK = 0x4


def acknowledged(requests: list[tuple[int, int, bytes]], sock: socket.socket) -> list[int]:
    """Send each (message type, family, payload) as a request of its own, asking for an acknowledgement,
    and return the errno each got (0: done), in order. One round trip each: for the few writes lbweb
    makes outside nf_tables batches (conntrack deletes)."""
    codes = []
    for message_type, family, payload in requests:
        sequence = next(_sequence) & 0x7FFFFFFF
        body = NFGEN_HEADER.pack(family, 0, 0) + payload
        flags = NLM_F_REQUEST | NLM_F_ACK
        sock.send(MESSAGE_HEADER.pack(MESSAGE_HEADER.size + len(body), message_type, flags, sequence, 0) + body)
        code = None
        while code is None:
            data = sock.recv(1 << 16)
            for kind, seq, start, _end in messages(data):
                if kind == NLMSG_ERROR and seq == sequence:
                    code = -ERROR_CODE.unpack_from(data, start)[0]
        codes.append(code)
    return codes
