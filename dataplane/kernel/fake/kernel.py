"""FakeKernel: nf_tables in memory, for testing the Applier's logic without root and without a kernel.

In the spirit of knftables' ``Fake``: it takes the same libnftables JSON documents as the real
kernel and keeps tables, chains, rules, sets, maps, elements and named objects in dicts (``table.py``).
Every write is one transaction (all of it or nothing) and moves the ruleset generation, and it refuses
what the kernel refuses in the ways the Applier meets. Drift is read and repaired through the same
interface as the real kernel (``interface.Interface``): records with the same keys as ``drift``'s,
hashes of its own objects, and a reading whose removals are JSON commands (``records.py``).

What it does not do: evaluate packets, or know every way a real kernel refuses a rule. A test makes it
lack a capability (``FakeKernel(capabilities={"flowtable": False})``: what needs it is refused, and the
dry runs of ``capabilities.probe`` find it missing), refuse what it needs with :meth:`FakeKernel.refuse`
(the kernel's words), crash with :meth:`FakeKernel.crash_on` (as the kernel writer dies), lose an
answer with :meth:`lose_answer`, change behind lbweb's back with :meth:`tamper`, and count or learn
with :meth:`count` and :meth:`learn`. The real-kernel tests (test_dataplane, test_transcribe,
test_drift, test_containment) stay the proof that what is written moves packets; this one makes the
Applier's choices fast to test.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from compiler import canonical
from compiler.fragments import TABLE_FAMILY, TABLE_NAME
from compiler.hooks import BASE_CHAIN, BASE_DIGEST_PREFIX
from compiler.units import UnitObjects

from .. import drift
from ..interface import ApplyError, CounterValue, Json
from .records import (
    FakeReading,
    add_shared_elements,
    chain_entries,
    short_hash,
    skeleton_record,
    table_record,
    unit_record,
)
from .table import NOT_SUPPORTED, Refused, Table, definition_of, element_key, execute, words


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

    def refuse(self, needle: str, message: str = NOT_SUPPORTED) -> None:
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
        self.tables[(TABLE_FAMILY, TABLE_NAME)].elements[set_name][element_key(element)] = element

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
        records = {key: unit_record(table, objects) for key, objects in units.items() if not objects.tables}
        owners = drift.owners_of(units)
        add_shared_elements(records, table, sorted(owners.shared), owners, set(records))
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

    # -- interface: drift ----------------------------------------------------------------------

    def read_units(self, units: Mapping[str, UnitObjects]) -> drift.Reading:
        self.calls.append(Call("read_units"))
        owners = drift.owners_of(units)
        records: dict[str, drift.Record] = {key: {} for key in owners.units | set(units)}
        table = self._ours()
        if table is not None:
            for key, objects in units.items():
                if not objects.tables:
                    records[key] = unit_record(table, objects)
            skeleton = skeleton_record(table)
            for name in table.chains.keys() - owners.chains.keys():
                skeleton.update(chain_entries(table, name))
            for name, definition in table.sets.items():
                if name not in owners.sets:
                    skeleton[f"set {name}"] = short_hash(definition)
            for (_kind, name), body in table.objects.items():
                if name not in owners.objects:
                    skeleton[f"object {name}"] = short_hash(definition_of(body))
            records[drift.SKELETON] = skeleton
            add_shared_elements(records, table, sorted(owners.shared), owners)
        dsr = {}
        for family, name in self.dsr_tables():
            dsr[(family, name)] = copy.deepcopy(self.tables[(family, name)])
            owner = owners.tables.get((family, name))
            if owner is None:
                records[drift.SKELETON][f"table {family} {name}"] = "present"
            else:
                records[owner] = table_record(family, name, self.tables[(family, name)])
        return FakeReading(table is not None, owners, copy.deepcopy(table), records, dsr)

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
                records[key] = skeleton_record(table)
            elif objects.tables:
                records[key] = {}
                for family, name in objects.tables:
                    if (family, name) in self.tables:
                        records[key].update(table_record(family, name, self.tables[(family, name)]))
            else:
                records[key] = unit_record(table, objects)
                kept = {k: v for k, v in previous.get(key, {}).items() if k.startswith("elements ")}
                records[key].update({k: v for k, v in kept.items() if k.removeprefix("elements ") in owners.shared})
        # a schedules-<n> map's elements go by their slot, whoever the caller knew to own what (as drift's probe)
        slots = {int(k.split(":", 1)[1]): k for k in units if k.startswith("farm:")}
        owners = dataclasses.replace(owners, slots={**owners.slots, **slots})
        add_shared_elements(records, table, sorted(set(maps) & owners.shared), owners, only=set(units))
        return records

    # -- the transaction -----------------------------------------------------------------------

    def _run(self, tables: dict[tuple[str, str], Table], commands: list[Json], document: Json) -> None:
        for command in commands:
            text = canonical(command)
            for needle, message in self._refusals:
                if needle in text:
                    raise ApplyError(f"{message}\n{words(command)}", document)
            ((verb, body),) = command.items()
            ((kind, obj),) = body.items()
            try:
                self._supported(tables, verb, kind, obj)
                execute(tables, verb, kind, obj)
            except Refused as exc:
                raise ApplyError(f"{exc.message}\n{words(command)}", document) from None

    def _supported(self, tables: dict[tuple[str, str], Table], verb: str, kind: str, obj: Json) -> None:
        """Refuse what needs a capability this fake was made without (``capabilities={"flowtable": False}``),
        as a kernel without it does: a flowtable, a conntrack helper, reject in a nat chain. What the
        Applier asks of it (``capabilities.probe``) is found the real kernel's way, by dry runs."""
        if verb not in ("add", "create", "insert"):
            return
        needed = None
        if kind == "flowtable":
            needed = "flowtable"
        elif kind == "ct helper":
            needed = f"helper-{obj.get('type')}"
        elif kind == "rule" and any("reject" in expression for expression in obj.get("expr", [])):
            table = tables.get((obj["family"], obj["table"]))
            chain = table.chains.get(obj["chain"], {}) if table else {}
            needed = "reject-nat" if chain.get("type") == "nat" else None
        if needed is not None and not self._capabilities.get(needed, True):
            raise Refused(NOT_SUPPORTED)
