"""The fake kernel's drift records, with the keys ``drift.record`` gives them, hashes of its own objects.

What the real kernel makes from netlink messages the fake makes from its tables' JSON: a unit's record
(:func:`unit_record`), the skeleton's, a DSR table's, the shared maps' elements filed under the unit they
jump or count for, and a reading (:class:`FakeReading`) whose removals are JSON commands.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

from compiler import canonical
from compiler.fragments import TABLE_FAMILY, TABLE_NAME
from compiler.hooks import skeleton_objects
from compiler.schedulers import schedule_slot
from compiler.units import UnitObjects

from .. import drift
from ..interface import Json
from .table import OBJECT_KINDS, SET_KINDS, Table, definition_of, references


def short_hash(value: Any) -> str:
    return hashlib.blake2b(canonical(value).encode(), digest_size=8).hexdigest()


def verdict_chain(element: Any) -> str | None:
    if isinstance(element, list) and len(element) == 2:
        targets = references(element[1])["chain"]
        return next(iter(targets)) if targets else None
    return None


def element_owner(element: Any, owners: drift.Owners) -> str:
    """As ``drift.element_owner``: the owner of the chain a verdict jumps to, or of the counter an
    object-map element names, or of the ``schedules-<n>`` slot a backend's id is kept in."""
    chain = verdict_chain(element)
    if chain is not None:
        return owners.chains.get(chain, drift.SKELETON)
    if isinstance(element, list) and len(element) == 2 and isinstance(element[1], str):
        return owners.objects.get(element[1], drift.SKELETON)
    if isinstance(element, list) and len(element) == 2 and isinstance(element[1], int):
        key = element[0]["range"][0] if isinstance(element[0], dict) else element[0]
        if isinstance(key, int):
            return owners.slots.get(schedule_slot(key), drift.SKELETON)
    return drift.SKELETON


class FakeReading(drift.Reading):
    """A ``drift.Reading`` of the fake's tables (``table``: a copy of its ``Table``), whose removals are
    JSON commands for :meth:`FakeKernel.repair`."""

    def removals(
        self, rewrite: set[str], wanted: Mapping[str, UnitObjects], expected: Mapping[str, drift.Record]
    ) -> tuple[list[Json], set[tuple[str, str]]]:
        """The same choices as ``drift.removal_messages``, as JSON commands on what was read."""
        table: Table = self.table or Table()
        owners, actual = self.owners, self.records
        repair_skeleton = drift.SKELETON in rewrite
        out: list[Json] = []
        kept: set[tuple[str, str]] = set()

        def ref(**body: Any) -> Json:
            return {"family": TABLE_FAMILY, "table": TABLE_NAME, **body}

        def unchanged(key: str, entry: str) -> bool:
            want = expected.get(key, {}).get(entry)
            return want is None or want == actual.get(key, {}).get(entry)

        new_chains = {c: k for k, o in wanted.items() for c in o.chains}
        new_sets = {
            n: (k, kind) for k, o in wanted.items() for kind, n in (*o.volatile, *o.objects) if kind in SET_KINDS
        }
        new_objects = {n: (k, kind) for k, o in wanted.items() for kind, n in o.objects if kind in OBJECT_KINDS}

        for name in sorted(owners.shared):
            gone = []
            for element in table.elements.get(name, {}).values():
                owner = element_owner(element, owners)
                if owner in rewrite and (repair_skeleton or owner != drift.SKELETON):
                    gone.append(element)
            if gone:
                out.append({"delete": {"element": ref(name=name, elem=[e[0] for e in gone])}})
        deleted = []
        for name in table.chains:
            key = owners.chains.get(name)
            if not (key in rewrite or name in new_chains or (key is None and repair_skeleton)):
                continue
            out.append({"flush": {"chain": ref(name=name)}})
            unit = key or drift.SKELETON
            if unit == drift.SKELETON and key is not None:
                if not unchanged(drift.SKELETON, f"chain {name}"):
                    raise drift.CannotRepair(f"base chain {name} changed")
                continue
            if name not in new_chains or not unchanged(unit, f"chain {name}"):
                deleted.append(name)
        for name, definition in table.sets.items():
            key = owners.sets.get(name)
            if key == drift.SKELETON:
                if repair_skeleton and not unchanged(drift.SKELETON, f"set {name}"):
                    raise drift.CannotRepair(f"map {name} changed")
                if name in owners.shared:
                    kept.add(("map", name))
                continue
            if not (key in rewrite or name in new_sets or (key is None and repair_skeleton)):
                continue
            if name in new_sets and unchanged(key or new_sets[name][0], f"set {name}"):
                kept.add((new_sets[name][1], name))
                if name not in owners.dynamic:
                    out.append({"flush": {definition["kind"]: ref(name=name)}})
            else:
                out.append({"delete": {definition["kind"]: ref(name=name)}})
        out += [{"delete": {"chain": ref(name=name)}} for name in deleted]
        for kind, name in table.objects:
            key = owners.objects.get(name)
            if not (key in rewrite or name in new_objects or (key is None and repair_skeleton)):
                continue
            if name in new_objects and unchanged(key or new_objects[name][0], f"{new_objects[name][1]} {name}"):
                kept.add((new_objects[name][1], name))
                continue
            out.append({"delete": {kind: ref(name=name)}})
        for (family, name), _table in self.dsr_tables.items():
            key = owners.tables.get((family, name))
            if (key in rewrite and key not in wanted) or (key is None and repair_skeleton):
                out.append({"delete": {"table": {"family": family, "name": name}}})
        return out, kept


def chain_entries(table: Table, name: str, prefix: str = "") -> drift.Record:
    if name not in table.chains:
        return {}
    return {
        f"chain {prefix}{name}": short_hash(table.chains[name]),
        f"rules {prefix}{name}": [short_hash(rule) for rule in table.rules[name]],
    }


def unit_record(table: Table, objects: UnitObjects) -> drift.Record:
    record: drift.Record = {}
    for name in objects.chains:
        record.update(chain_entries(table, name))
    for kind, name in (*objects.volatile, *objects.objects):
        if kind in SET_KINDS:
            if name in table.sets:
                record[f"set {name}"] = short_hash(table.sets[name])
                if (kind, name) in objects.volatile:
                    record[f"elements {name}"] = sorted(short_hash(e) for e in table.elements[name].values())
        elif kind in OBJECT_KINDS and (kind, name) in table.objects:
            record[f"{kind} {name}"] = short_hash(definition_of(table.objects[(kind, name)]))
    return record


def skeleton_record(table: Table) -> drift.Record:
    chains, maps = skeleton_objects()
    record: drift.Record = {}
    for name in chains:
        record.update(chain_entries(table, name))
    for name in maps:
        if name in table.sets:
            record[f"set {name}"] = short_hash(table.sets[name])
    return record


def table_record(family: str, name: str, table: Table) -> drift.Record:
    prefix = f"{family} {name}:"
    record: drift.Record = {f"table {family} {name}": "present"}
    for chain in table.chains:
        record.update(chain_entries(table, chain, prefix))
    for set_name, definition in table.sets.items():
        record[f"set {prefix}{set_name}"] = short_hash(definition)
        record[f"elements {prefix}{set_name}"] = sorted(short_hash(e) for e in table.elements[set_name].values())
    for (_kind, object_name), body in table.objects.items():
        record[f"object {prefix}{object_name}"] = short_hash(definition_of(body))
    return record


def add_shared_elements(
    records: dict[str, drift.Record],
    table: Table,
    maps: Iterable[str],
    owners: drift.Owners,
    only: set[str] | None = None,
) -> None:
    for name in maps:
        for key in only or ():
            records.setdefault(key, {}).pop(f"elements {name}", None)
        by_unit: dict[str, list[str]] = {}
        for element in table.elements.get(name, {}).values():
            owner = element_owner(element, owners)
            if only is None or owner in only:
                by_unit.setdefault(owner, []).append(short_hash(element))
        for owner, hashes in by_unit.items():
            records.setdefault(owner, {})[f"elements {name}"] = sorted(hashes)
