"""Drift records: what the worker keeps of a unit (the skeleton, a farm, a policy) after writing it.

Why fingerprints of the kernel's own answers: the kernel and libnftables rewrite what they are
given (a set gets flags of its own, a ``ct count`` or a ``jhash`` is stored in the kernel's
form, an anonymous map gets a name like ``__map12``), so comparing the kernel with the
compiler's JSON would see differences everywhere or nowhere. Instead, right after lbweb writes
a unit, it reads that unit back as netlink messages (``read.py``) and keeps a short hash of each of
its objects (:func:`unit_record`); a reconcile later reads the same objects again and compares
hash with hash (``repair.differences``). Everything is normalised the same way both times: handles,
use counts, counter values and the elements of dynamic sets (persistence entries, rate-limit meters,
learnt ports: the kernel's own state) are left out; an anonymous set counts by its definition and
elements, not by its name.

A record is a flat dict: ``"chain farm-web"`` (the chain's definition), ``"rules farm-web"``
(one hash per rule, in order), ``"set persist-web-3-ab12cd"``, ``"elements dispatch4"`` (the
unit's elements of a map, sorted), ``"counter farm-web"``; a DSR unit's names carry its
table (``"chain netdev lbweb-dsr-web:farm"``). Elements of the skeleton's shared maps belong
to the unit whose chain they jump to. Whatever lbweb's tables hold that no unit owns is the
skeleton's, so an extra chain or element is drift too.

No socket here: a record is made from a view of objects already read (``read.py``'s views, or
:class:`FullView` of a dump).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from compiler.hooks import skeleton_objects
from compiler.schedulers import is_schedules_map, schedule_slot
from compiler.units import UnitObjects

from .. import nfmsg

SKELETON = "skeleton"
DSR_PREFIX = "lbweb-"  # lbweb's netdev tables (one per DSR farm)

OBJECT_KINDS = {"counter", "quota", "ct helper", "limit"}

Record = dict[str, Any]


def short_hash(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=8).hexdigest()


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


# -- normalised hashes ----------------------------------------------------------------------


RULE_BODY = (nfmsg.RULE_EXPRESSIONS, nfmsg.RULE_COMPAT, nfmsg.RULE_USERDATA)  # what a rule is, less where it is


def rule_body(rule: nfmsg.Obj) -> bytes:
    return b"".join(whole for kind, whole, _p in rule.attrs if kind in RULE_BODY)


def element_hash(element: nfmsg.Element) -> str:
    return short_hash(element.for_add())


def set_hash(set_: nfmsg.Obj) -> str:
    return short_hash(set_.request(nfmsg.GETSET, dropped={nfmsg.SET_NAME}))


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
    return short_hash(set_.request(nfmsg.GETSET, dropped={nfmsg.SET_NAME}) + (set_.get(SET_HANDLE) or b""))


def rule_hash(body: bytes, view: Any) -> str:
    """A rule's expressions and comment (:func:`rule_body`); anonymous sets by :func:`anonymous_hash`,
    inline counters without their values."""

    def anonymous(match: re.Match) -> bytes:
        return anonymous_hash(view, match.group()[:-1].decode()).encode()

    if b"counter\x00" not in body and b"quota\x00" not in body:  # lbweb writes neither: the usual case
        return short_hash(ANONYMOUS_NAME.sub(anonymous, body))
    out = b""
    for kind, whole, payload in nfmsg.raw_attrs(body):
        if kind != nfmsg.RULE_EXPRESSIONS:
            out += whole
            continue
        for _k, item_whole, expression in nfmsg.raw_attrs(payload):
            parts = list(nfmsg.raw_attrs(expression))
            name = next((p for k, _w, p in parts if k == nfmsg.EXPR_NAME), b"").rstrip(b"\0")
            out += name if name in (b"counter", b"quota") else ANONYMOUS_NAME.sub(anonymous, item_whole)
    return short_hash(out)


def object_hash(obj: nfmsg.Obj) -> str:
    """A counter by its existence (its values move with the packets); other objects by definition."""
    counter = obj.get(nfmsg.OBJ_TYPE) == nfmsg.U32.pack(nfmsg.OBJECT_TYPES["counter"])
    return short_hash(obj.request(nfmsg.GETOBJ, dropped={nfmsg.OBJ_DATA} if counter else ()))


# -- who owns a shared map's element ------------------------------------------------------


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


def slot_elements(elements: Iterable[nfmsg.Element]) -> list[nfmsg.Element]:
    """A farm's elements of its ``schedules-<n>`` map as its record holds them: its ranges' starts and the ends
    no start shares a key with. Between two adjacent ranges the kernel keeps an end element and the next
    start at one key; the end says nothing the start does not (the lookup takes the start), and a request
    for it by key is answered with another range's end, so records leave it out."""
    elements = list(elements)
    starts = {nfmsg.key_value(e) for e in elements if not nfmsg.ends_range(e)}
    return [e for e in elements if not (nfmsg.ends_range(e) and nfmsg.key_value(e) in starts)]


# -- views of objects already read --------------------------------------------------------


class HashingView:
    """What a record takes of each object, for views that hold the objects themselves (``chain``,
    ``rules``, ``set``, ``elements``, ``object``)."""

    def chain_hash(self, name: str) -> str | None:
        chain = self.chain(name)
        return None if chain is None else short_hash(chain.request(nfmsg.GETCHAIN))

    def rule_hashes(self, chain: str) -> list[str]:
        return [rule_hash(body, self) for body in self.rules(chain)]

    def element_hashes(self, name: str) -> list[str]:
        return [element_hash(e) for e in self.elements(name)]

    def object_hash(self, kind: str, name: str) -> str | None:
        obj = self.object(kind, name)
        return None if obj is None else object_hash(obj)


class FullView(HashingView):
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


# -- records ----------------------------------------------------------------------------------


def chain_entries(view: Any, name: str, prefix: str = "") -> Record:
    chain = view.chain_hash(name)
    if chain is None:
        return {}
    return {f"chain {prefix}{name}": chain, f"rules {prefix}{name}": view.rule_hashes(name)}


def unit_record(view: Any, objects: UnitObjects) -> Record:
    """What the kernel holds of one farm or policy of ``table inet lbweb`` (shared-map elements apart)."""
    record: Record = {}
    for name in objects.chains:
        record.update(chain_entries(view, name))
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
        record.update(chain_entries(view, name))
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
        record.update(chain_entries(view, name, prefix))
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


def written_records(dump: nfmsg.TableDump, units: Mapping[str, UnitObjects]) -> dict[str, Record]:
    """The records of ``units``, written whole by one transaction, made from ``dump``: what the scratch
    namespace made of that transaction (``transcribe``), whose objects the batch copied one for one.

    Why: reading a table of 10,000 farms back after a bulk apply took 18 s of its 90 (~700,000 objects;
    the kernel looks every set up by name in a list, and a dump of named objects restarts from the first
    for each buffer), while the scratch namespace holds each transaction's objects anyway, a few hundred
    farms at a time. Same kernel, same messages: a unit's chains, rules, sets, elements and objects read
    from it hash as they do read from the real table (``tests/dataplane/test_transcribe.py`` compares the two).
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
