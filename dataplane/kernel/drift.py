"""Drift: what lbweb's tables hold, unit by unit (the skeleton, a farm, a policy), as fingerprints.

Why fingerprints of the kernel's own answers: the kernel and libnftables rewrite what they are
given (a set gets flags of its own, a ``ct count`` or a ``jhash`` is stored in the kernel's
form, an anonymous map gets a name like ``__map12``), so comparing the kernel with the
compiler's JSON would see differences everywhere or nowhere. Instead, right after lbweb writes
a unit, it reads that unit back as netlink messages and keeps a short hash of each of its
objects (:func:`unit_record`); a reconcile later reads the same objects again and compares
hash with hash. Everything is normalised the same way both times: handles, use counts,
counter values and the elements of dynamic sets (persistence entries, rate-limit meters,
learnt ports: the kernel's own state) are left out; an anonymous set counts by its
definition and elements, not by its name.

A record is a flat dict: ``"chain farm-web"`` (the chain's definition), ``"rules farm-web"``
(one hash per rule, in order), ``"set persist-web-3-ab12cd"``, ``"elements dispatch4"`` (the
unit's elements of a map, sorted), ``"counter farm-web"``; a DSR unit's names carry its
table (``"chain netdev lbweb-dsr-web:farm"``). Elements of the skeleton's shared maps belong
to the unit whose chain they jump to. Whatever lbweb's tables hold that no unit owns is the
skeleton's, so an extra chain or element is drift too.

The repair of drifted units (:func:`removal_messages`) removes what the kernel holds of them,
read from the same dump, and keeps their counters and dynamic sets when their definitions did
not change, so their state survives; the applier then adds them again as compiled.
"""

from __future__ import annotations

import difflib
import errno
import hashlib
import re
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from compiler.fragments import TABLE_FAMILY, TABLE_NAME
from compiler.hooks import skeleton_objects
from compiler.schedulers import is_schedules_map, schedule_slot
from compiler.units import UnitObjects

from . import netlink, nfmsg

SKELETON = "skeleton"
DSR_PREFIX = "lbweb-"  # lbweb's netdev tables (one per DSR farm)

OBJECT_KINDS = {"counter", "quota", "ct helper", "limit"}
OBJECTS_BY_DUMP = 50_000  # more named objects than this are read by name (see _owned_objects)

Record = dict[str, Any]


class CannotRepair(Exception):
    """The drift touches what only a full rebuild can restore (the skeleton's base chains or maps)."""


def _hash(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=8).hexdigest()


def _table_attr(table: str) -> bytes:
    return netlink.attr(1, nfmsg.string(table))  # NFTA_{CHAIN,RULE,SET,OBJ,SET_ELEM_LIST}_TABLE


# -- who owns what ------------------------------------------------------------------------


@dataclass
class Owners:
    """Which unit owns each name of ``table inet lbweb`` (and each DSR table), as lbweb wrote them."""

    chains: dict[str, str] = field(default_factory=dict)
    sets: dict[str, str] = field(default_factory=dict)
    dynamic: set[str] = field(default_factory=set)  # sets whose elements are the kernel's state
    objects: dict[str, str] = field(default_factory=dict)
    object_kinds: dict[str, str] = field(default_factory=dict)  # a named object's kind (counter, quota, ...)
    tables: dict[tuple[str, str], str] = field(default_factory=dict)
    shared: set[str] = field(default_factory=set)  # the skeleton's maps: their elements belong to units
    slots: dict[int, str] = field(default_factory=dict)  # farm id -> its unit, for the schedules-<n> maps' elements

    @property
    def units(self) -> set[str]:
        return {*self.chains.values(), *self.sets.values(), *self.objects.values(), *self.tables.values(), SKELETON}


def owners_of(units: Mapping[str, UnitObjects]) -> Owners:
    chains, maps = skeleton_objects()
    owners = Owners(shared=set(maps))
    owners.chains = dict.fromkeys(chains, SKELETON)
    owners.sets = dict.fromkeys(maps, SKELETON)
    for key, objects in units.items():
        for name in objects.chains:
            owners.chains[name] = key
        for _kind, name in objects.volatile:
            owners.sets[name] = key
        for kind, name in objects.objects:
            if kind in ("set", "map"):
                owners.sets[name] = key
                owners.dynamic.add(name)
            elif kind in OBJECT_KINDS:
                owners.objects[name] = key
                owners.object_kinds[name] = kind
        for family, name in objects.tables:
            owners.tables[(family, name)] = key
        if any(is_schedules_map(name) for name, _key in objects.elements):
            owners.slots[int(key.split(":", 1)[1])] = key
    return owners


# -- reading the kernel: the whole table, or one unit's objects by name ---------------------


RULE_BODY = (nfmsg.RULE_EXPRESSIONS, nfmsg.RULE_COMPAT, nfmsg.RULE_USERDATA)  # what a rule is, less where it is


def rule_body(rule: nfmsg.Obj) -> bytes:
    return b"".join(whole for kind, whole, _p in rule.attrs if kind in RULE_BODY)


def read_rule_hashes(family: str, table: str, view: Any, sock: socket.socket | None = None) -> dict[str, list[str]]:
    """Every rule of a table as its chain and :func:`rule_hash`, in order: one dump, parsed in one tight
    loop and hashed as it comes (most of a table is rules: 21 per farm here; an ``nfmsg.Obj`` for each
    cost seconds, and keeping their bodies until the records were made cost ~80 MB at 10,000 farms).
    ``view`` answers the sets the rules name (:func:`anonymous_hash`)."""
    unpack = netlink.ATTR_HEADER.unpack_from
    message_type = (nfmsg.NFNL_SUBSYS_NFTABLES << 8) | nfmsg.GETRULE
    found: dict[str, list[str]] = {}
    chunks = netlink.dump_chunks(
        netlink.NETLINK_NETFILTER, message_type, nfmsg.FAMILIES[family], _table_attr(table), sock=sock
    )
    for data, spans in chunks:
        for start, end in spans:
            position, chain, body = start, b"", []
            while position + 4 <= end:
                length, kind = unpack(data, position)
                if length < 4:
                    break
                kind &= nfmsg.NLA_TYPE_MASK
                following = position + ((length + 3) & ~3)
                if kind == nfmsg.RULE_CHAIN:
                    chain = data[position + 4 : position + length].rstrip(b"\0")
                elif kind in RULE_BODY:
                    body.append(data[position:following])
                position = following
            found.setdefault(chain.decode(), []).append(rule_hash(b"".join(body), view))
    return found


class _Hashes:
    """What a record takes of each object, for views that hold the objects themselves (``chain``,
    ``rules``, ``set``, ``elements``, ``object``)."""

    def chain_hash(self, name: str) -> str | None:
        chain = self.chain(name)
        return None if chain is None else _hash(chain.request(nfmsg.GETCHAIN))

    def rule_hashes(self, chain: str) -> list[str]:
        return [rule_hash(body, self) for body in self.rules(chain)]

    def element_hashes(self, name: str) -> list[str]:
        return [element_hash(e) for e in self.elements(name)]

    def object_hash(self, kind: str, name: str) -> str | None:
        obj = self.object(kind, name)
        return None if obj is None else object_hash(obj)


class FullView(_Hashes):
    """Lookups in one table read whole (``nfmsg.read_table``): a DSR table, a few dozen objects."""

    def __init__(self, dump: nfmsg.TableDump):
        self.dump = dump
        self._rules = {c: [rule_body(r) for r in rs] for c, rs in dump.rules.items()}

    def chain(self, name: str) -> nfmsg.Obj | None:
        return self.dump.chains.get(name)

    def rules(self, chain: str) -> list[bytes]:
        return self._rules.get(chain, [])

    def set(self, name: str) -> nfmsg.Obj | None:
        return self.dump.sets.get(name)

    def elements(self, name: str) -> list[nfmsg.Element]:
        return self.dump.elements.get(name, [])

    def object(self, kind: str, name: str) -> nfmsg.Obj | None:
        obj = self.dump.objects.get(name)
        if obj is None or obj.get(nfmsg.OBJ_TYPE) != nfmsg.U32.pack(nfmsg.OBJECT_TYPES[kind]):
            return None
        return obj


class ProbeView(_Hashes):
    """Lookups by name, each one small request, so reading one unit back costs the same whatever the
    number of farms (a chain's rules and a set's elements are dumps the kernel filters itself)."""

    def __init__(self, family: str = TABLE_FAMILY, table: str = TABLE_NAME, sock: socket.socket | None = None):
        self.family, self.table = family, table
        self.sock = sock or nfmsg.shared_socket()
        self._sets: dict[str, nfmsg.Obj | None] = {}
        self._elements: dict[str, list[nfmsg.Element]] = {}

    def chain(self, name: str) -> nfmsg.Obj | None:
        payload = _table_attr(self.table) + netlink.attr(nfmsg.CHAIN_NAME, nfmsg.string(name))
        return nfmsg.get_one(nfmsg.GETCHAIN, self.family, payload, self.sock)

    def rules(self, chain: str) -> list[bytes]:
        payload = _table_attr(self.table) + netlink.attr(nfmsg.RULE_CHAIN, nfmsg.string(chain))
        try:
            return [rule_body(r) for r in nfmsg.dump_objects(nfmsg.GETRULE, self.family, payload, self.sock)]
        except netlink.NetlinkError as exc:
            if exc.errno == errno.ENOENT:
                return []
            raise

    def set(self, name: str) -> nfmsg.Obj | None:
        if name not in self._sets:
            payload = _table_attr(self.table) + netlink.attr(nfmsg.SET_NAME, nfmsg.string(name))
            self._sets[name] = nfmsg.get_one(nfmsg.GETSET, self.family, payload, self.sock)
        return self._sets[name]

    def elements(self, name: str) -> list[nfmsg.Element]:
        if name not in self._elements:
            self._elements[name] = read_elements(self.family, self.table, name, self.sock)
        return self._elements[name]

    def object(self, kind: str, name: str) -> nfmsg.Obj | None:
        payload = _table_attr(self.table) + netlink.attr(nfmsg.OBJ_NAME, nfmsg.string(name))
        payload += netlink.attr(nfmsg.OBJ_TYPE, nfmsg.U32.pack(nfmsg.OBJECT_TYPES[kind]))
        return nfmsg.get_one(nfmsg.GETOBJ, self.family, payload, self.sock)


def read_elements(family: str, table: str, name: str, sock: socket.socket | None = None) -> list[nfmsg.Element]:
    request = _table_attr(table) + netlink.attr(nfmsg.ELEM_LIST_SET, nfmsg.string(name))
    found: list[nfmsg.Element] = []
    try:
        for message in nfmsg.dump_objects(nfmsg.GETSETELEM, family, request, sock):
            for kind, _whole, payload in message.attrs:
                if kind == nfmsg.ELEM_LIST_ELEMENTS:
                    found += [nfmsg.Element(item) for _k, _w, item in nfmsg.raw_attrs(payload)]
    except netlink.NetlinkError as exc:
        if exc.errno != errno.ENOENT:
            raise
    return found


def read_slot_elements(
    family: str, table: str, name: str, keys: Iterable[Any], sock: socket.socket | None = None
) -> list[nfmsg.Element] | None:
    """A farm's ranges in its shared ``schedules-<n>`` map ``name`` (``keys``, its unit's element keys), each range's
    start and end element asked for by key; None when one is missing.

    Why not a dump: the map holds every weight farm's ranges (200,000 elements at 10,000 farms), and
    reading it back whole after each weight change took ~1.2 s of the worker."""
    ranges = sorted(tuple(key["range"]) if isinstance(key, dict) else (key, key) for key in keys)
    # every range's start, and the last one's end: an inner end shares its key with the next range's start,
    # and the kernel answers a request for it with another end (see slot_elements)
    wanted = [(low, 0) for low, _high in ranges] + [(ranges[-1][1] + 1, nfmsg.ELEM_INTERVAL_END)]
    found = []
    for value, flags in wanted:
        key_attr = nfmsg.nested(nfmsg.ELEM_KEY, netlink.attr(nfmsg.DATA_VALUE, value.to_bytes(4, "big")))
        flags_attr = netlink.attr(nfmsg.ELEM_FLAGS, nfmsg.U32.pack(flags)) if flags else b""
        element = nfmsg.nested(nfmsg.LIST_ELEM, key_attr + flags_attr)
        request = _table_attr(table) + netlink.attr(nfmsg.ELEM_LIST_SET, nfmsg.string(name))
        answer = nfmsg.get_one(
            nfmsg.GETSETELEM, family, request + nfmsg.nested(nfmsg.ELEM_LIST_ELEMENTS, element), sock
        )
        if answer is None:
            return None
        for kind, _whole, payload in answer.attrs:
            if kind == nfmsg.ELEM_LIST_ELEMENTS:
                for _k, _w, item in nfmsg.raw_attrs(payload):
                    element = nfmsg.Element(item)
                    if nfmsg.key_value(element) != value or nfmsg.ends_range(element) != bool(flags):
                        return None  # not the element asked for
                    found.append(element)
    return found


def slot_elements(elements: Iterable[nfmsg.Element]) -> list[nfmsg.Element]:
    """A farm's elements of its ``schedules-<n>`` map as its record holds them: its ranges' starts and the ends
    no start shares a key with. Between two adjacent ranges the kernel keeps an end element and the next
    start at one key; the end says nothing the start does not (the lookup takes the start), and a request
    for it by key is answered with another range's end, so records leave it out."""
    elements = list(elements)
    starts = {nfmsg.key_value(e) for e in elements if not nfmsg.ends_range(e)}
    return [e for e in elements if not (nfmsg.ends_range(e) and nfmsg.key_value(e) in starts)]


# -- normalised hashes ----------------------------------------------------------------------


def element_hash(element: nfmsg.Element) -> str:
    return _hash(element.for_add())


def set_hash(set_: nfmsg.Obj) -> str:
    return _hash(set_.request(nfmsg.GETSET, dropped={nfmsg.SET_NAME}))


SET_HANDLE = 16
ANONYMOUS_NAME = re.compile(rb"__[a-z]+[0-9]+\x00")


def anonymous_hash(view: Any, name: str) -> str:
    """An anonymous set by its definition and its handle, not by its name (the kernel reuses names).
    A bound anonymous set cannot be changed (the kernel refuses), and any new one gets a handle never
    used before, so a rule whose map was replaced shows; and no element is read: a dump per set costs
    the kernel a walk of the table's sets, which at 10,000 farms made the read take minutes."""
    set_ = view.set(name)
    if set_ is None:
        return "missing"
    return _hash(set_.request(nfmsg.GETSET, dropped={nfmsg.SET_NAME}) + (set_.get(SET_HANDLE) or b""))


def rule_hash(body: bytes, view: Any) -> str:
    """A rule's expressions and comment (:func:`rule_body`); anonymous sets by :func:`anonymous_hash`,
    inline counters without their values."""

    def anonymous(match: re.Match) -> bytes:
        return anonymous_hash(view, match.group()[:-1].decode()).encode()

    if b"counter\x00" not in body and b"quota\x00" not in body:  # lbweb writes neither: the usual case
        return _hash(ANONYMOUS_NAME.sub(anonymous, body))
    out = b""
    for kind, whole, payload in nfmsg.raw_attrs(body):
        if kind != nfmsg.RULE_EXPRESSIONS:
            out += whole
            continue
        for _k, item_whole, expression in nfmsg.raw_attrs(payload):
            parts = list(nfmsg.raw_attrs(expression))
            name = next((p for k, _w, p in parts if k == nfmsg.EXPR_NAME), b"").rstrip(b"\0")
            out += name if name in (b"counter", b"quota") else ANONYMOUS_NAME.sub(anonymous, item_whole)
    return _hash(out)


def object_hash(obj: nfmsg.Obj) -> str:
    """A counter by its existence (its values move with the packets); other objects by definition."""
    counter = obj.get(nfmsg.OBJ_TYPE) == nfmsg.U32.pack(nfmsg.OBJECT_TYPES["counter"])
    return _hash(obj.request(nfmsg.GETOBJ, dropped={nfmsg.OBJ_DATA} if counter else ()))


def verdict_chain(element: nfmsg.Element) -> str | None:
    """The chain a verdict-map element jumps to (None for other verdicts and for sets)."""
    for kind, _whole, payload in element.attrs:
        if kind != nfmsg.ELEM_DATA:
            continue
        for k, _w, data in nfmsg.raw_attrs(payload):
            if k == nfmsg.DATA_VERDICT:
                for vk, _vw, value in nfmsg.raw_attrs(data):
                    if vk == nfmsg.VERDICT_CHAIN:
                        return value.rstrip(b"\0").decode(errors="replace")
    return None


def object_reference(element: nfmsg.Element) -> str | None:
    """The named object (a counter) an object-map element points to (None for other elements)."""
    for kind, _whole, payload in element.attrs:
        if kind == nfmsg.ELEM_OBJREF:
            return payload.rstrip(b"\0").decode(errors="replace")
    return None


def element_owner(element: nfmsg.Element, owners: Owners) -> str:
    """The unit a shared-map element belongs to: the owner of the chain it jumps to, or of the counter
    it counts into (the forward hook's counter maps), or, for a ``schedules-<n>`` map's elements (no
    verdict, no counter), the farm whose slot holds its key; the skeleton's when nobody owns it."""
    chain = verdict_chain(element)
    if chain is not None:
        return owners.chains.get(chain, SKELETON)
    counter = object_reference(element)
    if counter is not None:
        return owners.objects.get(counter, SKELETON)
    value = nfmsg.key_value(element)
    return SKELETON if value is None else owners.slots.get(schedule_slot(value), SKELETON)


# -- records ----------------------------------------------------------------------------------


def _chain_entries(view: Any, name: str, prefix: str = "") -> Record:
    chain = view.chain_hash(name)
    if chain is None:
        return {}
    return {f"chain {prefix}{name}": chain, f"rules {prefix}{name}": view.rule_hashes(name)}


def unit_record(view: Any, objects: UnitObjects) -> Record:
    """What the kernel holds of one farm or policy of ``table inet lbweb`` (shared-map elements apart)."""
    record: Record = {}
    for name in objects.chains:
        record.update(_chain_entries(view, name))
    for kind, name in (*objects.volatile, *objects.objects):
        if kind in ("set", "map"):
            set_ = view.set(name)
            if set_ is not None:
                record[f"set {name}"] = set_hash(set_)
                if (kind, name) in objects.volatile:
                    record[f"elements {name}"] = sorted(view.element_hashes(name))
        elif kind in OBJECT_KINDS:
            found = view.object_hash(kind, name)
            if found is not None:
                record[f"{kind} {name}"] = found
    return record


def skeleton_record(view: Any) -> Record:
    chains, maps = skeleton_objects()
    record: Record = {}
    for name in chains:
        record.update(_chain_entries(view, name))
    for name in maps:
        set_ = view.set(name)
        if set_ is not None:
            record[f"set {name}"] = set_hash(set_)
    return record


def table_record(dump: nfmsg.TableDump) -> Record:
    """A whole table a unit owns (DSR): every chain, rule, set and object in it."""
    if dump.table is None:
        return {}
    view = FullView(dump)
    prefix = f"{dump.family} {dump.name}:"
    record: Record = {f"table {dump.family} {dump.name}": "present"}
    for name in dump.chains:
        record.update(_chain_entries(view, name, prefix))
    for name, set_ in dump.sets.items():
        if not nfmsg.is_anonymous(set_):
            record[f"set {prefix}{name}"] = set_hash(set_)
            if not nfmsg.set_flags(set_) & nfmsg.SET_TIMEOUT:  # DSR persistence entries are traffic's, not drift
                record[f"elements {prefix}{name}"] = sorted(element_hash(e) for e in view.elements(name))
    for name, obj in dump.objects.items():
        record[f"object {prefix}{name}"] = object_hash(obj)
    return record


def add_shared_elements(
    records: dict[str, Record], view: Any, maps: Iterable[str], owners: Owners, only: set[str] | None = None
) -> None:
    """File each element of the shared maps under the unit whose chain it jumps to (the skeleton's
    when no unit owns that chain). ``only``: fill in these units alone."""
    for name in maps:
        for key in only or ():
            records.setdefault(key, {}).pop(f"elements {name}", None)
        by_unit: dict[str, list[nfmsg.Element]] = {}
        for element in view.elements(name):
            if nfmsg.is_interval_floor(element):
                continue
            owner = element_owner(element, owners)
            if only is None or owner in only:
                by_unit.setdefault(owner, []).append(element)
        for owner, elements in by_unit.items():
            if is_schedules_map(name):
                elements = slot_elements(elements)
            records.setdefault(owner, {})[f"elements {name}"] = sorted(element_hash(e) for e in elements)


class TableHashes:
    """``table inet lbweb`` as the records need it, hashed as it is read: a chain, a rule, a named object
    and an element of a unit's own set are kept as their hashes, not as themselves. A table of 10,000
    farms is ~700,000 objects; kept whole until the records were made, they held ~320 MB of the worker
    at the end of a full apply. The sets are kept whole (a rule's anonymous set is hashed by its
    definition, and a repair reads their flags), and so are the elements of the shared maps (each is
    filed under the unit it jumps or counts for, and a repair removes a unit's)."""

    def __init__(self) -> None:
        self.table: nfmsg.Obj | None = None
        self.chains: dict[str, str] = {}  # name -> hash of its definition
        self.rules: dict[str, list[str]] = {}  # chain -> its rules' hashes, in order
        self.sets: dict[str, nfmsg.Obj] = {}
        self.objects: dict[str, tuple[bytes, str]] = {}  # name -> (its NFTA_OBJ_TYPE, its hash)
        self.hashed_elements: dict[str, list[str]] = {}  # a unit's static set -> its elements' hashes
        self.shared: dict[str, list[nfmsg.Element]] = {}  # a shared map -> its elements, whole

    def chain_hash(self, name: str) -> str | None:
        return self.chains.get(name)

    def rule_hashes(self, chain: str) -> list[str]:
        return self.rules.get(chain, [])

    def set(self, name: str) -> nfmsg.Obj | None:
        return self.sets.get(name)

    def elements(self, name: str) -> list[nfmsg.Element]:
        return self.shared.get(name, [])

    def element_hashes(self, name: str) -> list[str]:
        if name in self.shared:
            return [element_hash(e) for e in self.shared[name]]
        return self.hashed_elements.get(name, [])

    def object_hash(self, kind: str, name: str) -> str | None:
        found = self.objects.get(name)
        if found is None or found[0] != nfmsg.U32.pack(nfmsg.OBJECT_TYPES[kind]):
            return None
        return found[1]


def read_table_hashes(
    owners: Owners, family: str = TABLE_FAMILY, name: str = TABLE_NAME, sock: socket.socket | None = None
) -> TableHashes:
    """One table of lbweb's, read with a dump of each kind (a dump of elements per static set: the
    elements of dynamic sets are the kernel's state, and anonymous sets count by their handle, see
    :func:`anonymous_hash`; past ``OBJECTS_BY_DUMP`` named objects, those by name, see
    :func:`_owned_objects`); raises NetlinkError."""
    read = TableHashes()
    table_attr = _table_attr(name)
    read.table = nfmsg.find_table(family, name, sock)
    if read.table is None:
        return read
    for set_ in nfmsg.each_object(nfmsg.GETSET, family, table_attr, sock):
        read.sets[set_.name(nfmsg.SET_NAME)] = set_
    for chain in nfmsg.each_object(nfmsg.GETCHAIN, family, table_attr, sock):
        if chain.name(nfmsg.CHAIN_TABLE) == name:
            read.chains[chain.name(nfmsg.CHAIN_NAME)] = _hash(chain.request(nfmsg.GETCHAIN))
    objects = _owned_objects(owners, family, name, read, sock) if len(owners.objects) > OBJECTS_BY_DUMP else None
    if objects is not None:
        read.objects = objects
    else:
        for obj in nfmsg.each_object(nfmsg.GETOBJ, family, table_attr, sock):
            read.objects[obj.name(nfmsg.OBJ_NAME)] = _object_entry(obj)
    read.rules = read_rule_hashes(family, name, read, sock)
    for set_name in [n for n in read.sets if n in owners.sets and n not in owners.dynamic]:
        elements = read_elements(family, name, set_name, sock)
        if set_name in owners.shared:
            read.shared[set_name] = elements
        else:
            read.hashed_elements[set_name] = [element_hash(e) for e in elements]
    return read


def _object_entry(obj: nfmsg.Obj) -> tuple[bytes, str]:
    return obj.get(nfmsg.OBJ_TYPE) or b"", object_hash(obj)


def _owned_objects(
    owners: Owners, family: str, name: str, read: TableHashes, sock: socket.socket | None
) -> dict[str, tuple[bytes, str]] | None:
    """The named objects lbweb wrote (``TableHashes.objects``), each asked for by name; None when the
    table holds others too.

    Why: a dump of named objects costs the square of their number (the kernel walks its list from the
    start for every buffer it fills: 300,000 counters, 9 s), and 10,000 farms of 10 backends have
    ~310,000. Asked for by name they cost ~2 s. What the names cannot show, an object nobody in lbweb
    wrote, the kernel's own count tells: the table's use count is its chains, named sets (not the
    anonymous ones), named objects and flowtables, so when it is more than the chains and named sets
    just read, the objects found and the flowtables, the caller dumps the objects after all (also when
    the table changed meanwhile)."""
    found = {}
    named = ((owners.object_kinds[n], n) for n in owners.objects)
    for data, spans, _answers in nfmsg.each_named_object(family, name, named):  # one lbweb wrote may be gone
        for start, end in spans:
            obj = nfmsg.Obj(data[start:end])
            found[obj.name(nfmsg.OBJ_NAME)] = _object_entry(obj)
    table_attr = _table_attr(name)
    table = nfmsg.find_table(family, name, sock)
    use = table.get(nfmsg.TABLE_USE) if table is not None else None
    flowtables = sum(1 for _ in nfmsg.each_object(nfmsg.GETFLOWTABLE, family, table_attr, sock))
    named_sets = sum(1 for set_ in read.sets.values() if not nfmsg.is_anonymous(set_))
    if use is None or nfmsg.U32.unpack(use)[0] != len(read.chains) + named_sets + len(found) + flowtables:
        return None
    return found


@dataclass
class Reading:
    """lbweb's tables as read from the kernel (``table``: what the records and a repair need of
    ``table inet lbweb``), and every unit's record."""

    present: bool
    owners: Owners
    table: TableHashes
    records: dict[str, Record]
    dsr_tables: dict[tuple[str, str], nfmsg.TableDump]


def lbweb_netdev_tables(sock: socket.socket | None = None) -> list[str]:
    tables = nfmsg.dump_objects(nfmsg.GETTABLE, "netdev", b"", sock)
    return [t.name(nfmsg.TABLE_NAME) for t in tables if t.name(nfmsg.TABLE_NAME).startswith(DSR_PREFIX)]


def read_kernel(units: Mapping[str, UnitObjects], sock: socket.socket | None = None) -> Reading:
    """Read lbweb's tables whole (netlink dumps, no libnftables cache) and make the record of every
    unit lbweb wrote (``units``: what it wrote of each) and of the skeleton."""
    sock = sock or nfmsg.shared_socket()
    owners = owners_of(units)
    view = read_table_hashes(owners, sock=sock)
    records: dict[str, Record] = {key: {} for key in owners.units | set(units)}
    if view.table is not None:
        for key, objects in units.items():
            if not objects.tables:
                records[key] = unit_record(view, objects)
        skeleton = skeleton_record(view)
        for name in view.chains.keys() - owners.chains.keys():  # chains nobody owns
            skeleton.update(_chain_entries(view, name))
        for name, set_ in view.sets.items():
            if name not in owners.sets and not nfmsg.is_anonymous(set_):
                skeleton[f"set {name}"] = set_hash(set_)
        for name, (_kind, found) in view.objects.items():
            if name not in owners.objects:
                skeleton[f"object {name}"] = found
        records[SKELETON] = skeleton
        add_shared_elements(records, view, sorted(owners.shared), owners)
    dsr_tables = {}
    for name in lbweb_netdev_tables(sock):
        table = nfmsg.read_table("netdev", name, None, sock)
        dsr_tables[("netdev", name)] = table
        owner = owners.tables.get(("netdev", name))
        if owner is None:
            records[SKELETON][f"table netdev {name}"] = "present"
        else:
            records[owner] = table_record(table)
    return Reading(view.table is not None, owners, view, records, dsr_tables)


def written_records(dump: nfmsg.TableDump, units: Mapping[str, UnitObjects]) -> dict[str, Record]:
    """The records of ``units``, written whole by one transaction, made from ``dump``: what the scratch
    namespace made of that transaction (``transcribe``), whose objects the batch copied one for one.

    Why: reading a table of 10,000 farms back after a bulk apply took 18 s of its 90 (~700,000 objects;
    the kernel looks every set up by name in a list, and a dump of named objects restarts from the first
    for each buffer), while the scratch namespace holds each transaction's objects anyway, a few hundred
    farms at a time. Same kernel, same messages: a unit's chains, rules, sets, elements and objects read
    from it hash as they do read from the real table (``tests/test_transcribe.py`` compares the two).
    Left out, to be read back from the real table by the caller: a unit whose rules use an anonymous set
    (its record holds the set's handle, which the real table gives it at the commit) and one that owns
    a table of its own (DSR)."""
    owners = owners_of(units)
    view = FullView(dump)
    anonymous = any(nfmsg.is_anonymous(s) for s in dump.sets.values())
    records = {}
    for key, objects in units.items():
        rules = (rule for chain in objects.chains for rule in dump.rules.get(chain, []))
        if objects.tables or (anonymous and any(_uses_anonymous_set(dump, rule) for rule in rules)):
            continue
        records[key] = unit_record(view, objects)
    add_shared_elements(records, view, sorted(owners.shared), owners, only=set(records))
    return records


def _uses_anonymous_set(dump: nfmsg.TableDump, rule: nfmsg.Obj) -> bool:
    return any(nfmsg.is_anonymous(dump.sets.get(name)) for name in nfmsg.rule_set_references(rule))


def probe_records(
    owners: Owners, units: Mapping[str, UnitObjects], maps: Iterable[str], previous: Mapping[str, Record]
) -> dict[str, Record]:
    """The records of a few units just written, read back by name. Elements of the shared ``maps``
    (those the write touched) are read again; the units' entries in the other maps are kept."""
    view = ProbeView()
    records: dict[str, Record] = {}
    for key, objects in units.items():
        if key == SKELETON:
            records[key] = skeleton_record(view)
        elif objects.tables:
            records[key] = {}
            for family, name in objects.tables:
                records[key].update(table_record(nfmsg.read_table(family, name, None, view.sock)))
        else:
            records[key] = unit_record(view, objects)
            kept = {k: v for k, v in previous.get(key, {}).items() if k.startswith("elements ")}
            records[key].update({k: v for k, v in kept.items() if k.removeprefix("elements ") in owners.shared})
    maps = set(maps) & owners.shared
    schedules = {m for m in maps if is_schedules_map(m)}
    if schedules:  # each unit's slot, by key (see read_slot_elements)
        maps -= schedules
        for key, objects in units.items():
            for name in schedules:
                records[key].pop(f"elements {name}", None)
                slot = [k for map_name, k in objects.elements if map_name == name]
                if not slot:
                    continue
                found = read_slot_elements(TABLE_FAMILY, TABLE_NAME, name, slot, view.sock)
                hashes = [element_hash(e) for e in found] if found is not None else ["(missing)"]
                records[key][f"elements {name}"] = sorted(hashes)
    add_shared_elements(records, view, sorted(maps), owners, only=set(units))
    return records


# -- what differs -----------------------------------------------------------------------------


def differences(expected: Record, actual: Record) -> list[str]:
    """What differs between what lbweb wrote and what the kernel holds, in words."""
    found = []
    for key in sorted(expected.keys() | actual.keys()):
        want, have = expected.get(key), actual.get(key)
        if want == have or (key.startswith("elements ") and not want and not have):
            continue
        kind, _, name = key.partition(" ")
        if kind == "rules" and want is not None and have is not None:
            found += _rule_changes(name, want, have)
        elif kind == "elements":
            want_n, have_n = list(want or ()), list(have or ())
            missing = sum(max(0, want_n.count(h) - have_n.count(h)) for h in set(want_n))
            added = sum(max(0, have_n.count(h) - want_n.count(h)) for h in set(have_n))
            parts = [f"{missing} missing"] * bool(missing) + [f"{added} added"] * bool(added)
            found.append(f"elements of {name}: {', '.join(parts)}")
        elif kind == "rules":
            continue  # the chain itself is missing or added: said once, below
        elif want is None:
            found.append(f"{kind} {name} added")
        elif have is None:
            found.append(f"{kind} {name} missing")
        else:
            found.append(f"{kind} {name} changed")
    return found


def _rule_changes(chain: str, want: list[str], have: list[str]) -> list[str]:
    found = []
    matcher = difflib.SequenceMatcher(a=want, b=have, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "delete":
            found.append(f"chain {chain}: rule {_span(i1, i2)} of {len(want)} deleted")
        elif tag == "insert":
            found.append(f"chain {chain}: {j2 - j1} rule(s) added at position {j1 + 1}")
        elif tag == "replace":
            found.append(f"chain {chain}: rule {_span(i1, i2)} of {len(want)} changed")
    return found


def _span(start: int, end: int) -> str:
    return str(start + 1) if end - start == 1 else f"{start + 1}-{end}"


# -- repair -------------------------------------------------------------------------------------


def _attr(kind: int, text: str) -> bytes:
    return netlink.attr(kind, nfmsg.string(text))


def _message(kind: int, what: str, payload: bytes, family: str = TABLE_FAMILY) -> nfmsg.Message:
    return nfmsg.Message(kind, family, 0, payload, what)


def removal_messages(
    reading: Reading,
    owners: Owners,
    rewrite: set[str],
    wanted: Mapping[str, UnitObjects],
    expected: Mapping[str, Record],
) -> tuple[list[nfmsg.Message], set[tuple[str, str]]]:
    """Messages that remove what the kernel holds of the units in ``rewrite`` (as the dump shows it,
    so a missing object is no error), and the objects kept because they are as lbweb wrote them:
    counters and dynamic sets keep their state, and a static set is emptied rather than removed.
    ``wanted`` are the units' new versions (absent: the unit goes)."""
    dump = reading.table
    table = TABLE_NAME
    out: list[nfmsg.Message] = []
    kept: set[tuple[str, str]] = set()
    repair_skeleton = SKELETON in rewrite
    actual = reading.records

    def owner(name: str, names: Mapping[str, str]) -> str | None:
        return names.get(name)

    def unchanged(key: str, entry: str) -> bool:
        want = expected.get(key, {}).get(entry)
        return want is None or want == actual.get(key, {}).get(entry)

    new_chains = {c: k for k, o in wanted.items() for c in o.chains}
    new_sets = {
        n: (k, kind) for k, o in wanted.items() for kind, n in (*o.volatile, *o.objects) if kind in ("set", "map")
    }
    new_objects = {n: (k, kind) for k, o in wanted.items() for kind, n in o.objects if kind in OBJECT_KINDS}

    # 1. elements of the shared maps that jump to a rewritten unit's chains (or that nobody owns)
    for name in sorted(owners.shared):
        gone = [
            e
            for e in dump.elements(name)
            if not nfmsg.is_interval_floor(e)
            and element_owner(e, owners) in rewrite
            and (repair_skeleton or element_owner(e, owners) != SKELETON)
        ]
        if nfmsg.is_interval(dump.sets.get(name)):  # see nfmsg.ascending
            gone = nfmsg.ascending(gone)
        payload = _attr(nfmsg.ELEM_LIST_TABLE, table) + _attr(nfmsg.ELEM_LIST_SET, name)
        for chunk in nfmsg.elements_payloads(gone, adding=False):
            out.append(_message(nfmsg.DELSETELEM, f"delete elements of map {name}", payload + chunk))

    # 2. chains: emptied; removed when no longer wanted or not as lbweb wrote them
    flushed, deleted = [], []
    for name in dump.chains:
        key = owner(name, owners.chains)
        mine = key in rewrite or name in new_chains or (key is None and repair_skeleton)
        if not mine:
            continue
        flushed.append(name)
        unit = key or SKELETON
        if unit == SKELETON and key is not None:  # a base chain
            if not unchanged(SKELETON, f"chain {name}"):
                raise CannotRepair(f"base chain {name} changed")
            continue
        if name not in new_chains or not unchanged(unit, f"chain {name}"):
            deleted.append(name)
    for name in flushed:
        payload = _attr(nfmsg.RULE_TABLE, table) + _attr(nfmsg.RULE_CHAIN, name)
        out.append(_message(nfmsg.DELRULE, f"flush chain {name}", payload))

    # 3. sets: dynamic ones and static ones kept when unchanged (static ones emptied), else removed
    for name, set_ in dump.sets.items():
        if nfmsg.is_anonymous(set_):
            continue
        key = owner(name, owners.sets)
        if key == SKELETON:
            if repair_skeleton and not unchanged(SKELETON, f"set {name}"):
                raise CannotRepair(f"map {name} changed")
            if name in owners.shared:
                kept.add(("map", name))
            continue
        if not (key in rewrite or name in new_sets or (key is None and repair_skeleton)):
            continue
        payload = _attr(nfmsg.SET_TABLE, table) + _attr(nfmsg.SET_NAME, name)
        if name in new_sets and unchanged(key or new_sets[name][0], f"set {name}"):
            kept.add((new_sets[name][1], name))
            if name not in owners.dynamic:
                out.append(_message(nfmsg.DELSETELEM, f"flush set {name}", payload))
        else:
            out.append(_message(nfmsg.DELSET, f"delete set {name}", payload))

    for name in deleted:
        payload = _attr(nfmsg.CHAIN_TABLE, table) + _attr(nfmsg.CHAIN_NAME, name)
        out.insert(len(out), _message(nfmsg.DELCHAIN, f"delete chain {name}", payload))

    # 4. counters and other named objects
    for name, (object_type, _found) in dump.objects.items():
        key = owner(name, owners.objects)
        if not (key in rewrite or name in new_objects or (key is None and repair_skeleton)):
            continue
        if name in new_objects and unchanged(key or new_objects[name][0], f"{new_objects[name][1]} {name}"):
            kept.add((new_objects[name][1], name))
            continue
        payload = _attr(nfmsg.OBJ_TABLE, table) + _attr(nfmsg.OBJ_NAME, name)
        payload += netlink.attr(nfmsg.OBJ_TYPE, object_type or nfmsg.U32.pack(nfmsg.OBJECT_TYPES["counter"]))
        out.append(_message(nfmsg.DELOBJ, f"delete object {name}", payload))

    # 5. DSR tables of units that go, and lbweb tables nobody owns (the others are re-made whole)
    for (family, name), _dump in reading.dsr_tables.items():
        key = owners.tables.get((family, name))
        if (key in rewrite and key not in wanted) or (key is None and repair_skeleton):
            out.append(_message(nfmsg.DELTABLE, f"delete table {family} {name}", _attr(nfmsg.TABLE_NAME, name), family))
    return out, kept


def without_kept(creates: list[dict], kept: set[tuple[str, str]]) -> list[dict]:
    """A unit's creates less the objects that stay in the kernel as they are."""
    out = []
    for command in creates:
        ((verb, body),) = command.items()
        ((kind, obj),) = body.items()
        if verb == "add" and kind not in ("rule", "element", "chain", "table") and (kind, obj.get("name")) in kept:
            continue
        out.append(command)
    return out
