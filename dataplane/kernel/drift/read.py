"""Drift reads: lbweb's tables read back from the kernel as netlink messages, whole or unit by unit.

Two ways, both without libnftables (its cache reads every chain, set and element of the table): the
whole table in a dump of each kind, hashed as it arrives (:func:`read_kernel`, for a reconcile and
after a rebuild), or a few units' objects asked for by name (:func:`probe_records`, after a small
change: its cost, not the table's). Both make the records of ``record.py``.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from compiler.fragments import TABLE_FAMILY, TABLE_NAME
from compiler.schedulers import is_schedules_map
from compiler.units import UnitObjects

from .. import netlink, nfmsg
from .record import (
    DSR_PREFIX,
    RULE_BODY,
    SKELETON,
    HashingView,
    Owners,
    Record,
    add_shared_elements,
    chain_entries,
    element_hash,
    object_hash,
    owners_of,
    rule_body,
    rule_hash,
    set_hash,
    short_hash,
    skeleton_record,
    table_record,
    unit_record,
)
from .repair import removal_messages

OBJECTS_BY_DUMP = 50_000  # more named objects than this are read by name (see _owned_objects)


def _table_attr(table: str) -> bytes:
    return netlink.attr(1, nfmsg.string(table))  # NFTA_{CHAIN,RULE,SET,OBJ,SET_ELEM_LIST}_TABLE


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


class ProbeView(HashingView):
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
            read.chains[chain.name(nfmsg.CHAIN_NAME)] = short_hash(chain.request(nfmsg.GETCHAIN))
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

    def removals(
        self, rewrite: set[str], wanted: Mapping[str, UnitObjects], expected: Mapping[str, Record]
    ) -> tuple[list[nfmsg.Message], set[tuple[str, str]]]:
        """What removes the kernel's version of the units in ``rewrite``, as read here, and the objects kept
        as they are (``repair.removal_messages``; raises ``CannotRepair`` when only a rebuild can do). A
        question about this reading, not the kernel: nothing is read or sent."""
        return removal_messages(self, self.owners, rewrite, wanted, expected)


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
            skeleton.update(chain_entries(view, name))
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
