"""FakeKernel: nf_tables in memory, for testing the Applier's logic without root and without a kernel.

In the spirit of knftables' ``Fake``: it takes the same libnftables JSON documents as the real
kernel and keeps tables, chains, rules, sets, maps, elements and named objects in dicts. Every write is
one transaction (all of it or nothing) and moves the ruleset generation, and it refuses what the kernel
refuses in the ways the Applier meets: a rule in a missing chain or naming a missing set, chain or
counter, a delete of something absent, a chain deleted while it still has rules or something jumps to
it, a set or chain redefined. Drift is read and repaired through the same interface as the real kernel
(``interface.Interface``): records with the same keys as ``drift.py``'s, hashes of its own objects.

What it does not do: evaluate packets, or know every way a real kernel refuses a rule. A test makes it
refuse what it needs with :meth:`FakeKernel.refuse` (the kernel's words), crash with
:meth:`FakeKernel.crash_on` (as the kernel writer dies), lose an answer with :meth:`lose_answer`, change
behind lbweb's back with :meth:`tamper`, and count or learn with :meth:`count` and :meth:`learn`.
The real-kernel tests (test_dataplane, test_transcribe, test_drift, test_containment) stay the proof
that what is written moves packets; this one makes the Applier's choices fast to test.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from compiler import canonical
from compiler.fragments import TABLE_FAMILY, TABLE_NAME
from compiler.hooks import BASE_CHAIN, BASE_DIGEST_PREFIX, shared_maps, skeleton_objects
from compiler.schedulers import schedule_slot
from compiler.units import DIGEST_PREFIX, UnitObjects

from . import drift
from .interface import ApplyError, CounterValue, Json, KernelState

OBJECT_KINDS = ("counter", "quota", "ct helper", "limit", "flowtable")
SET_KINDS = ("set", "map")
STATE = {"packets", "bytes", "elem", "handle"}  # what is not a definition
WHERE = {"family", "table", "handle"}  # what is not a rule's body

NOENT = "Error: Could not process rule: No such file or directory"
BUSY = "Error: Could not process rule: Device or resource busy"
EXISTS = "Error: Could not process rule: File exists"


def _hash(value: Any) -> str:
    return hashlib.blake2b(canonical(value).encode(), digest_size=8).hexdigest()


def _definition(body: Json) -> Json:
    return {k: v for k, v in body.items() if k not in STATE | WHERE}


def _element_key(element: Any) -> str:
    """The key of one element as a document gives it: a value, a [key, data] pair, or {"elem": {"val"...}}."""
    if isinstance(element, dict) and "elem" in element:
        element = element["elem"].get("val")
    if isinstance(element, list) and len(element) == 2:
        element = element[0]
    return canonical(element)


def _references(value: Any, found: dict[str, set[str]]) -> dict[str, set[str]]:
    """The chains (jump, goto), sets ("@name") and counters ({"counter": "name"}) a rule or element names."""
    if isinstance(value, str) and value.startswith("@"):
        found["set"].add(value[1:])
    elif isinstance(value, list):
        for item in value:
            _references(item, found)
    elif isinstance(value, dict):
        for key, item in value.items():
            if key in ("jump", "goto") and isinstance(item, dict) and "target" in item:
                found["chain"].add(item["target"])
            elif key == "counter" and isinstance(item, str):
                found["counter"].add(item)
            else:
                _references(item, found)
    return found


def references(value: Any) -> dict[str, set[str]]:
    return _references(value, {"chain": set(), "set": set(), "counter": set()})


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


@dataclass
class Table:
    chains: dict[str, Json] = field(default_factory=dict)  # name -> definition
    rules: dict[str, list[Json]] = field(default_factory=dict)  # chain -> rule bodies, in order
    sets: dict[str, Json] = field(default_factory=dict)  # name -> definition (with "kind": set or map)
    elements: dict[str, dict[str, Any]] = field(default_factory=dict)  # set -> key -> element as written
    objects: dict[tuple[str, str], Json] = field(default_factory=dict)  # (kind, name) -> body

    def uses(self) -> dict[str, set[str]]:
        """What every rule and map element of this table names."""
        found = {"chain": set(), "set": set(), "counter": set()}
        for rules in self.rules.values():
            for rule in rules:
                _references(rule.get("expr"), found)
        for elements in self.elements.values():
            for element in elements.values():
                if isinstance(element, list):
                    _references(element[1], found)
        return found


@dataclass
class Call:
    """One call into the fake, for tests to count attempts and see who wrote what."""

    method: str
    commands: list[Json] = field(default_factory=list)
    writer: str = ""
    ok: bool = True


class FakeKernel:
    """An in-memory :class:`interface.Interface`."""

    def __init__(self, capabilities: Mapping[str, bool] | None = None) -> None:
        self.tables: dict[tuple[str, str], Table] = {}
        self.generation = 1
        self.calls: list[Call] = []
        self._capabilities = dict(capabilities or {})
        self._refusals: list[tuple[str, str]] = []
        self._crashes: list[str] = []
        self._lose_answers = 0
        self._whole: dict[int, tuple[Json, Mapping[str, UnitObjects]]] = {}  # id(document) -> announced whole units
        self._written: dict[str, drift.Record] = {}

    # -- what a test arranges ----------------------------------------------------------------

    def refuse(self, needle: str, message: str = "Error: Could not process rule: Operation not supported") -> None:
        """Refuse, with the kernel's ``message``, every transaction with a command that contains ``needle``."""
        self._refusals.append((needle, message))

    def crash_on(self, needle: str) -> None:
        """Die as the kernel writer does on an input with ``needle`` (libnftables' stack smashing)."""
        self._crashes.append(needle)

    def lose_answer(self, times: int = 1) -> None:
        """The next ``times`` writes are committed, but their answer is lost (the outcome is uncertain)."""
        self._lose_answers = times

    def tamper(self, document: Json) -> None:
        """A change by someone else (``nft`` by hand): committed as it is, generation moved."""
        self._commit(document, "tamper")

    def count(self, name: str, packets: int, octets: int) -> None:
        """Traffic through a named counter (the packet path moves no generation)."""
        self.tables[(TABLE_FAMILY, TABLE_NAME)].objects[("counter", name)].update(packets=packets, bytes=octets)

    def learn(self, set_name: str, value: Any, timeout: int = 3600, expires: int = 3000) -> None:
        """An element the packet path added to a set with timeouts (a persistence entry)."""
        element = {"elem": {"val": value, "timeout": timeout, "expires": expires}}
        self.tables[(TABLE_FAMILY, TABLE_NAME)].elements[set_name][_element_key(element)] = element

    def writes(self) -> list[Call]:
        return [c for c in self.calls if c.method in ("apply", "apply_incremental", "repair")]

    # -- interface: writes -------------------------------------------------------------------

    def check(self, document: Json) -> None:
        call = Call("check", document.get("nftables", []))
        self.calls.append(call)
        try:
            self._run(copy.deepcopy(self.tables), document.get("nftables", []), document)
        except ApplyError:
            call.ok = False
            raise

    def apply(self, document: Json) -> None:
        if document.get("nftables"):
            self._commit(document, "apply", writer="libnftables")

    def release(self) -> None:
        self.calls.append(Call("release"))

    def prefetch(self, document: Json, context: list[Json], whole: Mapping[str, UnitObjects] | None = None) -> int:
        """Nothing to start ahead here: recorded, so a test sees which changes were announced. The units
        announced ``whole`` are recorded when the change is committed (as the real kernel writer does)."""
        self.calls.append(Call("prefetch", document.get("nftables", [])))
        if whole:
            self._whole[id(document)] = (document, dict(whole))
        return len(self.calls)

    def written_records(self) -> dict[str, drift.Record]:
        self.calls.append(Call("written_records"))
        written, self._written = self._written, {}
        return written

    def apply_incremental(self, document: Json, context: list[Json]) -> str:
        if not document.get("nftables"):
            return "none"
        # what lbweb cannot transcribe (flowtables, DSR's netdev tables) goes through libnftables
        untranscribable = any(
            "flowtable" in body or body.get("table", {}).get("family") == "netdev"
            for command in document["nftables"]
            for body in command.values()
        )
        writer = "libnftables" if untranscribable else "netlink"
        self._commit(document, "apply_incremental", writer=writer)
        announced, whole = self._whole.pop(id(document), (None, {}))
        if announced is document and writer == "netlink":
            self._written.update(self._records_of(whole))
        return writer

    def _records_of(self, units: Mapping[str, UnitObjects]) -> dict[str, drift.Record]:
        table = self._ours()
        records = {key: _unit_record(table, objects) for key, objects in units.items() if not objects.tables}
        owners = drift.owners_of(units)
        _add_shared_elements(records, table, sorted(owners.shared), owners, set(records))
        return records

    def repair(self, removals: list[Any], document: Json, context: list[Json]) -> str:
        self._commit({"nftables": [*removals, *document.get("nftables", [])]}, "repair", writer="netlink")
        return "netlink"

    def _commit(self, document: Json, method: str, writer: str = "") -> None:
        commands = document.get("nftables", [])
        call = Call(method, commands, writer)
        self.calls.append(call)
        text = canonical(commands)
        for needle in self._crashes:
            if needle in text:
                call.ok = False
                raise ApplyError("crashed: the kernel writer died by SIGABRT during libnftables commit", document)
        tables = copy.deepcopy(self.tables)
        try:
            self._run(tables, commands, document)
        except ApplyError:
            call.ok = False
            raise
        self.tables = tables
        self.generation += 1
        if self._lose_answers and method != "tamper":
            self._lose_answers -= 1
            raise ApplyError("netlink batch: no answer", document, uncertain=True)

    # -- interface: reads --------------------------------------------------------------------

    def generation_id(self) -> int:
        return self.generation

    def _ours(self) -> Table | None:
        return self.tables.get((TABLE_FAMILY, TABLE_NAME))

    def base_digest(self) -> str | None:
        table = self._ours()
        for rule in table.rules.get(BASE_CHAIN, []) if table else []:
            comment = rule.get("comment", "")
            if comment.startswith(BASE_DIGEST_PREFIX):
                return comment.removeprefix(BASE_DIGEST_PREFIX)
        return None

    def list_table(self, family: str = TABLE_FAMILY, name: str = TABLE_NAME) -> list[Json] | None:
        table = self.tables.get((family, name))
        if table is None:
            return None
        where = {"family": family, "table": name}
        items: list[Json] = [{"table": {"family": family, "name": name}}]
        items += [{"chain": {**where, "name": n, **d}} for n, d in table.chains.items()]
        for n, d in table.sets.items():
            body = {**where, "name": n, **{k: v for k, v in d.items() if k != "kind"}}
            items.append({d["kind"]: {**body, "elem": list(table.elements.get(n, {}).values())}})
        items += [{kind: {**where, "name": n, **b}} for (kind, n), b in table.objects.items()]
        items += [{"rule": {**where, "chain": c, **r}} for c, rules in table.rules.items() for r in rules]
        return items

    def read_counters(self, names: Collection[str] | None = None) -> dict[str, CounterValue]:
        table = self._ours()
        if table is None:
            return {}
        wanted = None if names is None else set(names)
        return {
            n: CounterValue(b.get("packets", 0), b.get("bytes", 0))
            for (k, n), b in table.objects.items()
            if k == "counter" and (wanted is None or n in wanted)
        }

    def dsr_tables(self) -> list[tuple[str, str]]:
        return sorted(k for k in self.tables if k[0] == "netdev" and k[1].startswith(drift.DSR_PREFIX))

    def capabilities(self) -> dict[str, bool]:
        self.calls.append(Call("capabilities"))
        return dict(self._capabilities)

    def observe(self) -> KernelState:
        state = KernelState()
        table = self._ours()
        if table is None:
            return state
        state.table_present = True
        shared = shared_maps()
        state.chains = set(table.chains)
        state.sets = {n for n, d in table.sets.items() if d["kind"] == "set"}
        for name in shared:
            for key in table.elements.get(name, {}):
                state.shared_elements.add((name, key))
        for chain, rules in table.rules.items():
            for rule in rules:
                comment = rule.get("comment", "")
                if comment.startswith(BASE_DIGEST_PREFIX):
                    state.base_digest = comment.removeprefix(BASE_DIGEST_PREFIX)
                elif comment.startswith(DIGEST_PREFIX):
                    state.farm_digests[chain] = comment.removeprefix(DIGEST_PREFIX)
        for family, name in self.dsr_tables():
            for rules in self.tables[(family, name)].rules.values():
                for rule in rules:
                    if rule.get("comment", "").startswith(DIGEST_PREFIX):
                        state.farm_digests[f"{family} {name}"] = rule["comment"].removeprefix(DIGEST_PREFIX)
        return state

    # -- interface: drift ----------------------------------------------------------------------

    def read_units(self, units: Mapping[str, UnitObjects]) -> drift.Reading:
        self.calls.append(Call("read_units"))
        owners = drift.owners_of(units)
        records: dict[str, drift.Record] = {key: {} for key in owners.units | set(units)}
        table = self._ours()
        if table is not None:
            for key, objects in units.items():
                if not objects.tables:
                    records[key] = _unit_record(table, objects)
            skeleton = _skeleton_record(table)
            for name in table.chains.keys() - owners.chains.keys():
                skeleton.update(_chain_entries(table, name))
            for name, definition in table.sets.items():
                if name not in owners.sets:
                    skeleton[f"set {name}"] = _hash(definition)
            for (_kind, name), body in table.objects.items():
                if name not in owners.objects:
                    skeleton[f"object {name}"] = _hash(_definition(body))
            records[drift.SKELETON] = skeleton
            _add_shared_elements(records, table, sorted(owners.shared), owners)
        dsr = {}
        for family, name in self.dsr_tables():
            dsr[(family, name)] = copy.deepcopy(self.tables[(family, name)])
            owner = owners.tables.get((family, name))
            if owner is None:
                records[drift.SKELETON][f"table {family} {name}"] = "present"
            else:
                records[owner] = _table_record(family, name, self.tables[(family, name)])
        return drift.Reading(table is not None, owners, copy.deepcopy(table), records, dsr)

    def probe_records(
        self,
        owners: drift.Owners,
        units: Mapping[str, UnitObjects],
        maps: Iterable[str],
        previous: Mapping[str, drift.Record],
    ) -> dict[str, drift.Record]:
        table = self._ours() or Table()
        records: dict[str, drift.Record] = {}
        for key, objects in units.items():
            if key == drift.SKELETON:
                records[key] = _skeleton_record(table)
            elif objects.tables:
                records[key] = {}
                for family, name in objects.tables:
                    if (family, name) in self.tables:
                        records[key].update(_table_record(family, name, self.tables[(family, name)]))
            else:
                records[key] = _unit_record(table, objects)
                kept = {k: v for k, v in previous.get(key, {}).items() if k.startswith("elements ")}
                records[key].update({k: v for k, v in kept.items() if k.removeprefix("elements ") in owners.shared})
        # a schedules-<n> map's elements go by their slot, whoever the caller knew to own what (as drift's probe)
        slots = {int(k.split(":", 1)[1]): k for k in units if k.startswith("farm:")}
        owners = dataclasses.replace(owners, slots={**owners.slots, **slots})
        _add_shared_elements(records, table, sorted(set(maps) & owners.shared), owners, only=set(units))
        return records

    def removals(
        self,
        reading: drift.Reading,
        rewrite: set[str],
        wanted: Mapping[str, UnitObjects],
        expected: Mapping[str, drift.Record],
    ) -> tuple[list[Json], set[tuple[str, str]]]:
        """The same choices as ``drift.removal_messages``, as JSON commands on this fake's reading."""
        table: Table = reading.table or Table()
        owners, actual = reading.owners, reading.records
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
        for (family, name), _table in reading.dsr_tables.items():
            key = owners.tables.get((family, name))
            if (key in rewrite and key not in wanted) or (key is None and repair_skeleton):
                out.append({"delete": {"table": {"family": family, "name": name}}})
        return out, kept

    # -- the transaction -----------------------------------------------------------------------

    def _run(self, tables: dict[tuple[str, str], Table], commands: list[Json], document: Json) -> None:
        for command in commands:
            text = canonical(command)
            for needle, message in self._refusals:
                if needle in text:
                    raise ApplyError(f"{message}\n{_words(command)}", document)
            ((verb, body),) = command.items()
            ((kind, obj),) = body.items()
            try:
                _execute(tables, verb, kind, obj)
            except _Refused as exc:
                raise ApplyError(f"{exc.message}\n{_words(command)}", document) from None


class _Refused(Exception):
    def __init__(self, message: str):
        self.message = message


def _words(command: Json) -> str:
    ((verb, body),) = command.items()
    ((kind, obj),) = body.items()
    return f"{verb} {kind} {obj.get('family', '')} {obj.get('table', '')} {obj.get('name', obj.get('chain', ''))}"


def _execute(tables: dict[tuple[str, str], Table], verb: str, kind: str, obj: Json) -> None:
    if kind == "table":
        where = (obj["family"], obj["name"])
        if verb in ("add", "create"):
            if verb == "create" and where in tables:
                raise _Refused(EXISTS)
            tables.setdefault(where, Table())
        elif verb in ("delete", "destroy"):
            if where not in tables and verb == "delete":
                raise _Refused(NOENT)
            tables.pop(where, None)
        elif verb == "flush" and where in tables:
            table = tables[where]
            table.rules = {c: [] for c in table.rules}
            table.elements = {s: {} for s in table.elements}
        return
    table = tables.get((obj["family"], obj["table"]))
    if table is None:
        raise _Refused(NOENT)
    if kind == "chain":
        _chain(table, verb, obj)
    elif kind == "rule":
        _rule(table, verb, obj)
    elif kind in SET_KINDS:
        _set(table, verb, kind, obj)
    elif kind == "element":
        _element(table, verb, obj)
    elif kind in OBJECT_KINDS:
        _object(table, verb, kind, obj)
    else:
        raise _Refused(f"Error: the fake kernel does not know '{verb} {kind}'")


def _chain(table: Table, verb: str, obj: Json) -> None:
    name, definition = obj["name"], _definition({k: v for k, v in obj.items() if k != "name"})
    if verb in ("add", "create"):
        if name in table.chains and (verb == "create" or table.chains[name] != definition):
            raise _Refused(EXISTS)
        table.chains.setdefault(name, definition)
        table.rules.setdefault(name, [])
    elif verb == "flush":
        if name not in table.chains:
            raise _Refused(NOENT)
        table.rules[name] = []
    elif verb in ("delete", "destroy"):
        if name not in table.chains:
            if verb == "delete":
                raise _Refused(NOENT)
            return
        if table.rules[name] or name in table.uses()["chain"]:
            raise _Refused(BUSY)
        del table.chains[name], table.rules[name]


def _rule(table: Table, verb: str, obj: Json) -> None:
    chain = obj["chain"]
    if chain not in table.chains:
        raise _Refused(NOENT)
    if verb not in ("add", "insert"):
        raise _Refused(f"Error: the fake kernel does not know '{verb} rule'")
    named = references(obj.get("expr"))
    if not named["chain"] <= table.chains.keys() or not named["set"] <= table.sets.keys():
        raise _Refused(NOENT)
    if not named["counter"] <= {n for k, n in table.objects if k == "counter"}:
        raise _Refused(NOENT)
    body = {k: v for k, v in obj.items() if k not in WHERE | {"chain"}}
    if verb == "insert":
        table.rules[chain].insert(0, body)
    else:
        table.rules[chain].append(body)


def _set(table: Table, verb: str, kind: str, obj: Json) -> None:
    name = obj["name"]
    if verb in ("add", "create"):
        definition = {"kind": kind, **_definition({k: v for k, v in obj.items() if k != "name"})}
        if name in table.sets and (verb == "create" or table.sets[name] != definition):
            raise _Refused(EXISTS)
        table.sets.setdefault(name, definition)
        elements = table.elements.setdefault(name, {})
        for element in obj.get("elem", []):
            elements[_element_key(element)] = element
    elif verb == "flush":
        if name not in table.sets:
            raise _Refused(NOENT)
        table.elements[name] = {}
    elif verb in ("delete", "destroy"):
        if name not in table.sets:
            if verb == "delete":
                raise _Refused(NOENT)
            return
        if name in table.uses()["set"]:
            raise _Refused(BUSY)
        del table.sets[name], table.elements[name]


def _element(table: Table, verb: str, obj: Json) -> None:
    name = obj["name"]
    if name not in table.sets:
        raise _Refused(NOENT)
    elements = table.elements[name]
    for element in obj.get("elem", []):
        key = _element_key(element)
        if verb in ("add", "create"):
            if verb == "create" and key in elements:
                raise _Refused(EXISTS)
            named = references(element[1] if isinstance(element, list) else None)
            if not named["chain"] <= table.chains.keys():
                raise _Refused(NOENT)
            elements[key] = element
        elif verb in ("delete", "destroy"):
            if key not in elements and verb == "delete":
                raise _Refused(NOENT)
            elements.pop(key, None)


def _object(table: Table, verb: str, kind: str, obj: Json) -> None:
    where = (kind, obj["name"])
    if verb in ("add", "create"):
        if where in table.objects and verb == "create":
            raise _Refused(EXISTS)
        body = {k: v for k, v in obj.items() if k not in WHERE | {"name"}}
        table.objects.setdefault(where, body)
    elif verb in ("delete", "destroy"):
        if where not in table.objects:
            if verb == "delete":
                raise _Refused(NOENT)
            return
        if kind == "counter" and obj["name"] in table.uses()["counter"]:
            raise _Refused(BUSY)
        del table.objects[where]
    elif verb == "reset" and where in table.objects:
        table.objects[where].update(packets=0, bytes=0)


# -- records, with the keys drift.py gives them -----------------------------------------------------


def _chain_entries(table: Table, name: str, prefix: str = "") -> drift.Record:
    if name not in table.chains:
        return {}
    return {
        f"chain {prefix}{name}": _hash(table.chains[name]),
        f"rules {prefix}{name}": [_hash(rule) for rule in table.rules[name]],
    }


def _unit_record(table: Table, objects: UnitObjects) -> drift.Record:
    record: drift.Record = {}
    for name in objects.chains:
        record.update(_chain_entries(table, name))
    for kind, name in (*objects.volatile, *objects.objects):
        if kind in SET_KINDS:
            if name in table.sets:
                record[f"set {name}"] = _hash(table.sets[name])
                if (kind, name) in objects.volatile:
                    record[f"elements {name}"] = sorted(_hash(e) for e in table.elements[name].values())
        elif kind in OBJECT_KINDS and (kind, name) in table.objects:
            record[f"{kind} {name}"] = _hash(_definition(table.objects[(kind, name)]))
    return record


def _skeleton_record(table: Table) -> drift.Record:
    chains, maps = skeleton_objects()
    record: drift.Record = {}
    for name in chains:
        record.update(_chain_entries(table, name))
    for name in maps:
        if name in table.sets:
            record[f"set {name}"] = _hash(table.sets[name])
    return record


def _table_record(family: str, name: str, table: Table) -> drift.Record:
    prefix = f"{family} {name}:"
    record: drift.Record = {f"table {family} {name}": "present"}
    for chain in table.chains:
        record.update(_chain_entries(table, chain, prefix))
    for set_name, definition in table.sets.items():
        record[f"set {prefix}{set_name}"] = _hash(definition)
        record[f"elements {prefix}{set_name}"] = sorted(_hash(e) for e in table.elements[set_name].values())
    for (_kind, object_name), body in table.objects.items():
        record[f"object {prefix}{object_name}"] = _hash(_definition(body))
    return record


def _add_shared_elements(
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
                by_unit.setdefault(owner, []).append(_hash(element))
        for owner, hashes in by_unit.items():
            records.setdefault(owner, {})[f"elements {name}"] = sorted(hashes)
