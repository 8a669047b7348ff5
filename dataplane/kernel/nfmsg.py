"""nf_tables netlink messages: read objects out of a kernel, write them into another in one batch.

The vocabulary is the kernel's own (include/uapi/linux/netfilter/nf_tables.h). Objects are
kept as their raw attributes, flags and all, so that what one kernel dumped can be sent to
another as it is, minus the attributes that only describe one kernel's copy (handles, use
counts, expirations). Nothing here knows nftables syntax: that is libnftables' job.
"""

from __future__ import annotations

import errno
import itertools
import os
import socket
import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from . import netlink, steps

# The nf_tables netlink vocabulary (include/uapi/linux/netfilter/nf_tables.h), defined here only: the
# applier's reads, drift and the transcriber use these names.
NFNL_SUBSYS_NFTABLES = 10
NFNL_MSG_BATCH_BEGIN, NFNL_MSG_BATCH_END = 0x10, 0x11
NLM_F_REQUEST, NLM_F_ACK = netlink.NLM_F_REQUEST, netlink.NLM_F_ACK
NLM_F_CREATE, NLM_F_APPEND = 0x400, 0x800
NLA_F_NESTED = 0x8000
NLA_TYPE_MASK = netlink.NLA_TYPE_MASK
SO_SNDBUFFORCE = 32

# NFT_MSG_*
NEWTABLE, GETTABLE, DELTABLE = 0, 1, 2
NEWCHAIN, GETCHAIN, DELCHAIN = 3, 4, 5
NEWRULE, GETRULE, DELRULE = 6, 7, 8
NEWSET, GETSET, DELSET = 9, 10, 11
NEWSETELEM, GETSETELEM, DELSETELEM = 12, 13, 14
NEWOBJ, GETOBJ, DELOBJ = 18, 19, 20
GETFLOWTABLE = 23

FAMILIES = {"ip": 2, "ip6": 10, "inet": 1, "arp": 3, "bridge": 7, "netdev": 5}
OBJECT_TYPES = {"counter": 1, "quota": 2, "ct helper": 3, "limit": 4}

# Attributes by kind: the one naming the table, the one naming the object, and those a NEW
# message may carry. A dump says more (handles, use counts, element counts, backend names;
# newer kernels add more), so what is sent is chosen from a list of what a request may say.
TABLE_NAME = 1
TABLE_USE = 3  # NFTA_TABLE_USE: the table's chains, named sets, named objects and flowtables (the kernel's count)
CHAIN_TABLE, CHAIN_NAME = 1, 3
RULE_TABLE, RULE_CHAIN, RULE_EXPRESSIONS, RULE_COMPAT, RULE_USERDATA = 1, 2, 4, 5, 7
SET_TABLE, SET_NAME, SET_FLAGS, SET_ID = 1, 2, 3, 10
ELEM_LIST_TABLE, ELEM_LIST_SET, ELEM_LIST_ELEMENTS, ELEM_LIST_SET_ID = 1, 2, 3, 4
ELEM_KEY, ELEM_DATA, ELEM_FLAGS, ELEM_KEY_END = 1, 2, 3, 10
ELEM_INTERVAL_END = 1  # NFT_SET_ELEM_INTERVAL_END: the element ends a range
ELEM_OBJREF = 9  # NFTA_SET_ELEM_OBJREF: the named object (a counter) of an object-map element
DATA_VALUE, DATA_VERDICT, VERDICT_CHAIN = 1, 2, 2  # NFTA_DATA_VALUE, NFTA_DATA_VERDICT, NFTA_VERDICT_CHAIN
OBJ_TABLE, OBJ_NAME, OBJ_TYPE, OBJ_DATA = 1, 2, 3, 4
COUNTER_BYTES, COUNTER_PACKETS = 1, 2  # NFTA_COUNTER_* inside OBJ_DATA
UDATA_RULE_COMMENT = 0  # libnftnl's user data type of a rule's comment, in RULE_USERDATA
LIST_ELEM = 1
EXPR_NAME, EXPR_DATA = 1, 2
SET_ANONYMOUS = 0x1
SET_INTERVAL = 0x4  # NFT_SET_INTERVAL: its elements are ranges, each a start and an end element
SET_TIMEOUT = 0x10  # NFT_SET_TIMEOUT: elements expire (persistence entries, meters): the kernel's own state

# Expressions that name a set: (expression, attribute with the set's name, attribute with its batch id)
SET_REFERENCES = {b"lookup": (1, 4), b"dynset": (1, 2), b"objref": (4, 5)}

REQUEST_ATTRIBUTES = {
    GETTABLE: {1, 2, 6},  # name, flags, userdata
    GETCHAIN: {1, 3, 4, 5, 7, 10, 12},  # table, name, hook, policy, type, flags, userdata
    GETRULE: {1, 2, 4, 5, 7},  # table, chain, expressions, compat, userdata
    # table, name, flags, key type/len, data type/len, policy, desc, timeout, gc interval, userdata,
    # object type, expr, expressions
    GETSET: {1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 15, 17, 18},
    GETOBJ: {1, 2, 3, 4, 8},  # table, name, type, data, userdata
}
# key, data, flags, timeout, userdata, expr, objref, key end, expressions
ELEMENT_REQUEST_ATTRIBUTES = {1, 2, 3, 4, 6, 7, 9, 10, 11}
ELEMENT_IDENTITY = (ELEM_KEY, ELEM_KEY_END, ELEM_FLAGS)

U32 = struct.Struct(">I")
_sequence = itertools.count(int.from_bytes(os.urandom(2)) << 8)


def string(value: str) -> bytes:
    return value.encode() + b"\0"


def raw_attrs(data: bytes, start: int = 0, end: int | None = None) -> list[tuple[int, bytes, bytes]]:
    """(type without flags, the whole attribute as sent, its payload) of each attribute in a span.
    A list built in one loop: this runs for every attribute of every object a table dump returns."""
    end = len(data) if end is None else end
    unpack = netlink.ATTR_HEADER.unpack_from
    found = []
    while start + 4 <= end:
        length, kind = unpack(data, start)
        if length < 4:
            break
        following = start + ((length + 3) & ~3)
        found.append((kind & NLA_TYPE_MASK, data[start:following], data[start + 4 : start + length]))
        start = following
    return found


def nested(kind: int, payload: bytes) -> bytes:
    return netlink.attr(kind | NLA_F_NESTED, payload)


class Obj:
    """One kernel object as dumped: its attributes as the kernel sent them, in the kernel's order.

    They are kept as the one bytes object they came in and parsed when read (``attrs``): a table of
    10,000 farms is ~500,000 objects, and parsed once and kept, their attributes held ~800 MB of the
    worker while it read the table back after a full apply."""

    __slots__ = ("raw",)

    def __init__(self, raw: bytes) -> None:
        self.raw = raw

    def __reduce__(self) -> tuple[type, tuple[bytes]]:
        # The scratch process sends its reads to the kernel writer pickled: this way ~3x quicker to
        # pickle and ~2x to unpickle than the default for a class with slots (measured on 200,000).
        return type(self), (self.raw,)

    @property
    def attrs(self) -> list[tuple[int, bytes, bytes]]:
        return raw_attrs(self.raw)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.raw == self.raw

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.raw!r})"

    def get(self, kind: int) -> bytes | None:
        raw, start, unpack = self.raw, 0, netlink.ATTR_HEADER.unpack_from
        while start + 4 <= len(raw):  # the first of its kind, without parsing the rest
            length, found = unpack(raw, start)
            if length < 4:
                return None
            if found & NLA_TYPE_MASK == kind:
                return raw[start + 4 : start + length]
            start += (length + 3) & ~3
        return None

    def name(self, kind: int) -> str:
        value = self.get(kind)
        return value.rstrip(b"\0").decode() if value is not None else ""

    def only(self, kept: Iterable[int]) -> bytes:
        kept = set(kept)
        return b"".join(whole for kind, whole, _payload in self.attrs if kind in kept)

    def request(self, dump_kind: int, dropped: Iterable[int] = ()) -> bytes:
        """The attributes a NEW request for this object may carry (those in ``dropped`` left out)."""
        return self.only(REQUEST_ATTRIBUTES[dump_kind] - set(dropped))


class Element(Obj):
    """One set element, as its raw attributes (parsed when read, as :class:`Obj`'s)."""

    __slots__ = ()

    def identity(self) -> bytes:
        return b"".join(whole for kind, whole, _payload in self.attrs if kind in ELEMENT_IDENTITY)

    def for_add(self) -> bytes:
        return b"".join(whole for kind, whole, _payload in self.attrs if kind in ELEMENT_REQUEST_ATTRIBUTES)

    def for_delete(self) -> bytes:
        return self.identity()


def key_value(element: Element) -> int | None:
    """A 32-bit key's value, None for other keys. An interval map's keys are in network byte order
    (libnftables turns a mark, kept in host order, around for the kernel's ordered tree)."""
    key = element.get(ELEM_KEY)
    if key is None:
        return None
    for kind, _whole, data in raw_attrs(key):
        if kind == DATA_VALUE and len(data) == 4:
            return int.from_bytes(data, "big")
    return None


def ends_range(element: Element) -> bool:
    """The element ends a range of an interval set (NFT_SET_ELEM_INTERVAL_END)."""
    flags = element.get(ELEM_FLAGS)
    return bool(flags) and bool(U32.unpack(flags)[0] & ELEM_INTERVAL_END)


def is_interval_floor(element: Element) -> bool:
    """The end element at key 0 that libnftables puts below an interval map's first range. It belongs to
    the map, not to a unit, and matches nothing: records leave it out, and a change never deletes it
    (another unit's change may find it gone)."""
    return ends_range(element) and key_value(element) == 0


def ascending(elements: Iterable[Element]) -> list[Element]:
    """An interval set's elements by their keys, a range's end before the next range's start at the same key.

    Why: a dump gives them in the kernel's tree order, highest first, and the kernel refuses (``File
    exists``: a partial overlap) a range sent end first beside a neighbour the set already holds, where
    the same elements sent in this order, libnftables' own, go in. An interval set's keys all have one
    length and are in network byte order, so their bytes sort as their values."""

    def order(e: Element) -> tuple[bytes, bool]:
        return e.get(ELEM_KEY) or b"", not ends_range(e)

    return sorted(elements, key=order)


ELEMENTS_PER_ATTRIBUTE = 60000  # bytes: a netlink attribute's length is 16 bits


def elements_payloads(elements: Iterable[Element], adding: bool) -> Iterator[bytes]:
    """The elements as ELEMENTS attributes, as many as their size needs (one message each)."""
    body = b""
    for e in elements:
        item = nested(LIST_ELEM, e.for_add() if adding else e.for_delete())
        if body and len(body) + len(item) > ELEMENTS_PER_ATTRIBUTE:
            yield nested(ELEM_LIST_ELEMENTS, body)
            body = b""
        body += item
    if body:
        yield nested(ELEM_LIST_ELEMENTS, body)


@dataclass
class TableDump:
    """Everything one table holds, read with a handful of dumps."""

    family: str
    name: str
    table: Obj | None = None
    chains: dict[str, Obj] = field(default_factory=dict)
    sets: dict[str, Obj] = field(default_factory=dict)
    objects: dict[str, Obj] = field(default_factory=dict)
    rules: dict[str, list[Obj]] = field(default_factory=dict)  # chain -> rules in order
    elements: dict[str, list[Element]] = field(default_factory=dict)  # set -> elements


def each_object(message: int, family: str, payload: bytes, sock: socket.socket | None = None) -> Iterator[Obj]:
    """The objects one dump answers, one at a time: a caller that keeps less than each object holds less
    than the dump (the caller's payload names the table, chain or set)."""
    message_type = (NFNL_SUBSYS_NFTABLES << 8) | message
    answers = netlink.dump(netlink.NETLINK_NETFILTER, message_type, FAMILIES[family], payload, sock=sock)
    for data, start, end in answers:
        yield Obj(data[start:end])


def dump_objects(message: int, family: str, payload: bytes, sock: socket.socket | None = None) -> list[Obj]:
    """Every object one dump answers (the caller's payload names the table, chain or set)."""
    return list(each_object(message, family, payload, sock))


def get_one(message: int, family: str, payload: bytes, sock: socket.socket | None = None) -> Obj | None:
    """One object asked for by name (a GET without DUMP): the kernel answers with that object alone,
    whatever the size of the table; None when it has no such object."""
    sock = sock or shared_socket()
    header = netlink.MESSAGE_HEADER
    sequence = next(_sequence) & 0x7FFFFFFF
    body = struct.pack("=BBH", FAMILIES[family], 0, 0) + payload
    kind = (NFNL_SUBSYS_NFTABLES << 8) | message
    sock.settimeout(10)
    sock.send(header.pack(header.size + len(body), kind, NLM_F_REQUEST, sequence, 0) + body)
    while True:
        data = sock.recv(1 << 20)
        for answer, seq, start, end in netlink.messages(data):
            if seq != sequence:
                continue
            if answer == netlink.NLMSG_ERROR:
                (code,) = netlink.ERROR_CODE.unpack_from(data, start)
                if -code == errno.ENOENT:
                    return None
                raise netlink.NetlinkError(-code, os.strerror(-code))
            return Obj(data[start + netlink.NFGEN_HEADER_SIZE : end])


def each_named_object(
    family: str, table: str, named: Iterable[tuple[str, str]]
) -> Iterator[tuple[bytes, list[tuple[int, int]], int]]:
    """The named objects (kind, name) of ``table``, each asked for by name (``netlink.get_each``: where a dump
    of a large table costs the square of its objects): each buffer received, the (start, end) of the objects
    in it, and how many answers it held (an object the kernel does not have answers with an error)."""
    table_attr = netlink.attr(OBJ_TABLE, string(table))
    payloads = (
        table_attr + netlink.attr(OBJ_NAME, string(name)) + netlink.attr(OBJ_TYPE, U32.pack(OBJECT_TYPES[kind]))
        for kind, name in named
    )
    message_type = (NFNL_SUBSYS_NFTABLES << 8) | GETOBJ
    for data, answers in netlink.get_each(netlink.NETLINK_NETFILTER, message_type, FAMILIES[family], payloads):
        yield data, [(start, end) for kind, start, end in answers if kind != netlink.NLMSG_ERROR], len(answers)


def find_table(family: str, name: str, sock: socket.socket | None = None) -> Obj | None:
    """The table of that name in the current network namespace, None when there is none."""
    found = None
    for table in each_object(GETTABLE, family, b"", sock):
        if table.name(TABLE_NAME) == name:
            found = table
    return found


def read_table(
    family: str,
    name: str,
    elements_of: Callable[[TableDump], Iterable[str]] | None = None,
    sock: socket.socket | None = None,
) -> TableDump:
    """One table of the current network namespace (raises NetlinkError): its chains, rules, sets and
    named objects, and the elements of the sets ``elements_of`` names (all without it)."""
    table_attr = netlink.attr(1, string(name))  # NFTA_{CHAIN,RULE,SET,OBJ}_TABLE are all 1
    dump = TableDump(family, name, find_table(family, name, sock))
    if dump.table is None:
        return dump
    for chain in each_object(GETCHAIN, family, table_attr, sock):
        if chain.name(CHAIN_TABLE) == name:
            dump.chains[chain.name(CHAIN_NAME)] = chain
            dump.rules[chain.name(CHAIN_NAME)] = []
    for rule in each_object(GETRULE, family, table_attr, sock):
        dump.rules.setdefault(rule.name(RULE_CHAIN), []).append(rule)
    for set_ in each_object(GETSET, family, table_attr, sock):
        dump.sets[set_.name(SET_NAME)] = set_
    for obj in each_object(GETOBJ, family, table_attr, sock):
        dump.objects[obj.name(OBJ_NAME)] = obj
    wanted = dump.sets if elements_of is None else [n for n in elements_of(dump) if n in dump.sets]
    for set_name in wanted:
        request = table_attr + netlink.attr(ELEM_LIST_SET, string(set_name))
        found: list[Element] = []
        for message in each_object(GETSETELEM, family, request, sock):
            for kind, _whole, payload in message.attrs:
                if kind == ELEM_LIST_ELEMENTS:
                    found += [Element(item) for _k, _w, item in raw_attrs(payload)]
        dump.elements[set_name] = found
    return dump


def set_flags(set_: Obj) -> int:
    value = set_.get(SET_FLAGS)
    return U32.unpack(value)[0] if value else 0


def is_interval(set_: Obj | None) -> bool:
    """A set whose elements are ranges, each a start and an end element (see :func:`ascending`)."""
    return set_ is not None and bool(set_flags(set_) & SET_INTERVAL)


def is_anonymous(set_: Obj | None) -> bool:
    """A set the kernel made for one rule (``__set<n>``, ``__map<n>``: named and numbered by the kernel)."""
    return set_ is not None and bool(set_flags(set_) & SET_ANONYMOUS)


def rule_set_references(rule: Obj) -> list[str]:
    """The sets a rule's expressions name, in order."""
    names = []
    for _kind, _whole, expressions in (a for a in rule.attrs if a[0] == RULE_EXPRESSIONS):
        for _k, _w, expression in raw_attrs(expressions):
            parts = {k: p for k, _w2, p in raw_attrs(expression)}
            reference = SET_REFERENCES.get(parts.get(EXPR_NAME, b"").rstrip(b"\0"))
            if reference and EXPR_DATA in parts:
                for k, _w3, p in raw_attrs(parts[EXPR_DATA]):
                    if k == reference[0]:
                        names.append(p.rstrip(b"\0").decode())
    return names


def rename_set_references(rule_attrs: bytes, renames: dict[str, tuple[str, int]]) -> bytes:
    """A rule's attributes with references to the sets in ``renames`` given a new name and a batch id."""
    out = b""
    for kind, whole, payload in raw_attrs(rule_attrs):
        if kind != RULE_EXPRESSIONS:
            out += whole
            continue
        expressions = b""
        for _k, item_whole, expression in raw_attrs(payload):
            parts = list(raw_attrs(expression))
            expr_name = next((p for k, _w, p in parts if k == EXPR_NAME), b"").rstrip(b"\0")
            reference = SET_REFERENCES.get(expr_name)
            if not reference:
                expressions += item_whole
                continue
            name_attr, id_attr = reference
            body = b""
            for k, w, p in parts:
                if k != EXPR_DATA:
                    body += w
                    continue
                data = b""
                for dk, dw, dp in raw_attrs(p):
                    target = renames.get(dp.rstrip(b"\0").decode()) if dk == name_attr else None
                    if target:
                        data += netlink.attr(name_attr, string(target[0])) + netlink.attr(id_attr, U32.pack(target[1]))
                    elif dk != id_attr:
                        data += dw
                body += nested(EXPR_DATA, data)
            expressions += nested(LIST_ELEM, body)
        out += nested(RULE_EXPRESSIONS, expressions)
    return out


@dataclass
class Message:
    """One request of a batch and what to call it if the kernel refuses it (``label``: the words, or
    what makes them when asked: a bulk transaction has ~50,000 messages, the kernel refuses one)."""

    kind: int
    family: str
    flags: int
    payload: bytes
    label: str | Callable[[], str]

    @property
    def what(self) -> str:
        return self.label if isinstance(self.label, str) else self.label()


class BatchRefused(Exception):
    """The kernel refused a batch: nothing of it was committed."""

    def __init__(self, message: Message, code: int):
        self.message, self.code = message, code
        super().__init__(f"the kernel refused {message.what}: {os.strerror(code)}")


_sockets: dict[tuple[int, int], socket.socket] = {}


def shared_socket() -> socket.socket:
    """A netfilter netlink socket kept open for this process and network namespace: closing one
    that sent a batch costs the kernel ~10 ms, more than a whole small change."""
    key = (os.getpid(), os.stat("/proc/thread-self/ns/net").st_ino)
    sock = _sockets.get(key)
    if sock is None:
        sock = _sockets[key] = netlink.open_socket(netlink.NETLINK_NETFILTER)
    return sock


def commit(messages: list[Message]) -> None:
    """Send the messages as one nf_tables transaction: all of it is committed, or nothing and
    :class:`BatchRefused` names the first message the kernel refused.

    Only the last message asks for an acknowledgement: the kernel reports every refused message
    anyway, in order, before that last answer, so one answer per batch is read whatever its size
    (an acknowledgement per message could overflow the socket on a big batch)."""
    if not messages:
        return
    first = next(_sequence) & 0x7FFFFFFF
    header = netlink.MESSAGE_HEADER
    subsystem = struct.pack("=BBH", 0, 0, socket.htons(NFNL_SUBSYS_NFTABLES))
    chunks = [header.pack(header.size + 4, NFNL_MSG_BATCH_BEGIN, NLM_F_REQUEST, first, 0) + subsystem]
    by_sequence = {}
    for offset, message in enumerate(messages, start=1):
        sequence = first + offset
        body = struct.pack("=BBH", FAMILIES[message.family], 0, 0) + message.payload
        flags = message.flags | NLM_F_REQUEST | (NLM_F_ACK if offset == len(messages) else 0)
        kind = (NFNL_SUBSYS_NFTABLES << 8) | message.kind
        chunks += [header.pack(header.size + len(body), kind, flags, sequence, 0), body]
        by_sequence[sequence] = message
    last = first + len(messages)
    chunks.append(header.pack(header.size + 4, NFNL_MSG_BATCH_END, NLM_F_REQUEST, last + 1, 0) + subsystem)
    batch = b"".join(chunks)
    sock = shared_socket()
    # The kernel takes a batch from one datagram, which must fit the send buffer.
    size = max(len(batch) * 2, 1 << 20)
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, size)
    except PermissionError:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size)
    sock.settimeout(30)
    try:
        sock.send(batch)
        steps.enter(steps.ANSWERS, None)
        refused = _answers(sock, by_sequence, first, last)
    except OSError:  # a socket in an unknown state is not used again
        _sockets.pop(next(k for k, v in _sockets.items() if v is sock), None)
        sock.close()
        raise
    if refused:
        raise BatchRefused(*refused)


def _answers(sock: socket.socket, by_sequence: dict[int, Message], first: int, last: int) -> tuple[Message, int] | None:
    """Read the batch's answers up to the last message's acknowledgement; the first refusal, if any.
    Answers to earlier requests on this socket (other sequence numbers) are skipped."""
    refused = None
    while True:
        try:
            data = sock.recv(1 << 20)
        except TimeoutError:
            if refused:  # a batch cut short by its error may leave the last message unanswered
                return refused
            raise
        for kind, sequence, start, _end in netlink.messages(data):
            if kind == netlink.NLMSG_ERROR and first <= sequence <= last + 1:
                (code,) = netlink.ERROR_CODE.unpack_from(data, start)
                if code and sequence in by_sequence and refused is None:
                    refused = (by_sequence[sequence], -code)
                    sock.settimeout(1)
                elif code and sequence not in by_sequence:
                    raise OSError(-code, f"nf_tables batch: {os.strerror(-code)}")
                if sequence == last:
                    return refused


GETGEN, NEWGEN, GEN_ID = 16, 15, 1


def generation_id() -> int:
    """This network namespace's ruleset generation: the kernel moves it with every nf_tables
    transaction it commits, whoever sends it (one small request, whatever the ruleset's size)."""
    header = netlink.MESSAGE_HEADER
    sequence = next(_sequence) & 0x7FFFFFFF
    body = struct.pack("=BBH", 0, 0, 0)
    request = header.pack(header.size + len(body), (NFNL_SUBSYS_NFTABLES << 8) | GETGEN, NLM_F_REQUEST, sequence, 0)
    sock = shared_socket()
    sock.settimeout(10)
    sock.send(request + body)
    while True:
        data = sock.recv(1 << 16)
        for kind, seq, start, end in netlink.messages(data):
            if seq == sequence and kind == netlink.NLMSG_ERROR:
                (code,) = netlink.ERROR_CODE.unpack_from(data, start)
                raise OSError(-code, f"nf_tables generation: {os.strerror(-code)}")
            if seq == sequence and kind == (NFNL_SUBSYS_NFTABLES << 8) | NEWGEN:
                for attr_kind, _whole, payload in raw_attrs(data, start + netlink.NFGEN_HEADER_SIZE, end):
                    if attr_kind == GEN_ID:
                        return U32.unpack(payload)[0]
