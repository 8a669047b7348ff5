"""Fingerprints: what the kernel held of each unit right after lbweb wrote it, taken and compared.

After every write the units written are read back (``kernel/drift``) and their records kept as
``KernelFingerprint`` rows (:class:`ReadBack`); a reconcile reads the table again and compares
(:func:`find_drift`). A table lbweb wrote before it kept fingerprints is compared the old way, by
digests, names and dispatch entries (:func:`observe`, :func:`kernel_matches`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.db import transaction

import compiler
import compiler.hooks
import compiler.names
import compiler.schedulers
import compiler.units
from farms.models import KernelFingerprint, KernelUnit

from .kernel import drift
from .kernel.applier import Kernel
from .kernel.interface import Interface, KernelState
from .outcome import Outcome
from .unit_cache import UnitCache

log = logging.getLogger("lbweb.dataplane")


def anchor(unit: compiler.UnitRuleset) -> str | None:
    """Where the kernel carries a unit's digest: its digest chain, or its DSR table."""
    if unit.objects.tables:
        family, name = unit.objects.tables[0]
        return f"{family} {name}"
    if unit.key.startswith("farm:") and unit.objects.chains:
        return compiler.names.digest_chain_name(unit.name)
    return None


def kernel_matches(state: KernelState, compiled: dict[str, compiler.UnitRuleset]) -> bool:
    """True when the kernel's tables carry the compiled configuration's digests, names and dispatch entries.

    The comparison of a table lbweb wrote before it kept fingerprints (``find_drift`` sees more: every
    rule, element and definition); when it holds, that table's fingerprints are taken as they are."""
    if not state.table_present or state.base_digest != compiler.base_digest():
        return False
    expected_digests: dict[str, str] = {}
    expected_elements: set[tuple[str, str]] = set()
    shared = compiler.hooks.shared_maps()  # a farm's own maps (its targets) are compared in its fingerprints
    for unit in compiled.values():
        where = anchor(unit)
        if where:
            expected_digests[where] = unit.digest
        if not set(unit.objects.chains) <= state.chains:
            return False
        if not {name for kind, name in unit.objects.volatile + unit.objects.objects if kind == "set"} <= state.sets:
            return False
        expected_elements |= {(n, compiler.canonical(key)) for n, key in unit.objects.elements if n in shared}
    if state.farm_digests != expected_digests:
        return False
    return state.shared_elements == expected_elements


def observe(kernel: Interface) -> KernelState:
    """Digests, names and dispatch entries of lbweb's tables, as ``kernel`` lists them (the comparison
    of a table lbweb wrote before it kept fingerprints: :func:`kernel_matches`)."""
    items = kernel.list_table()
    state = KernelState()
    if items is None:
        return state
    state.table_present = True
    shared = compiler.hooks.shared_maps()
    for item in items:
        if "chain" in item:
            state.chains.add(item["chain"]["name"])
        elif "set" in item:
            state.sets.add(item["set"]["name"])
        elif "map" in item and item["map"]["name"] in shared:
            for key, _verdict in item["map"].get("elem", []):
                state.shared_elements.add((item["map"]["name"], compiler.canonical(key)))
        elif "rule" in item:
            _read_digest(item["rule"], item["rule"]["chain"], state)
    for family, name in kernel.dsr_tables():
        for item in kernel.list_table(family, name) or []:
            if "rule" in item:
                _read_digest(item["rule"], f"{family} {name}", state)
    return state


def _read_digest(rule: dict, where: str, state: KernelState) -> None:
    comment = rule.get("comment", "")
    if comment.startswith(compiler.hooks.BASE_DIGEST_PREFIX):
        state.base_digest = comment.removeprefix(compiler.hooks.BASE_DIGEST_PREFIX)
    elif comment.startswith(compiler.units.DIGEST_PREFIX):
        state.farm_digests[where] = comment.removeprefix(compiler.units.DIGEST_PREFIX)


def load_fingerprints() -> dict[str, drift.Record]:
    return dict(KernelFingerprint.objects.values_list("key", "record"))


def store_fingerprints(records: dict[str, drift.Record], removed: list[str] = (), replace: bool = False) -> None:
    rows = [KernelFingerprint(key=k, record=r) for k, r in sorted(records.items())]
    with transaction.atomic():
        if replace:
            KernelFingerprint.objects.exclude(key__in=list(records)).delete()
        elif removed:
            KernelFingerprint.objects.filter(key__in=list(removed)).delete()
        KernelFingerprint.objects.bulk_create(
            rows, update_conflicts=True, unique_fields=["key"], update_fields=["record", "written_at"], batch_size=500
        )


@dataclass
class DriftReport:
    """What a comparison of the kernel with lbweb's records found, unit by unit."""

    present: bool
    units: dict[str, list[str]]  # unit key -> what differs
    names: dict[str, str]
    reading: drift.Reading | None = None

    def as_list(self) -> list[dict]:
        return [{"unit": k, "name": self.names.get(k, k), "differences": d} for k, d in sorted(self.units.items())]

    def summary(self) -> str:
        return "; ".join(f"{self.names.get(k, k)}: {', '.join(d)}" for k, d in sorted(self.units.items()))


def find_drift(
    applied: dict[str, compiler.UnitObjects], expected: dict[str, drift.Record], kernel: Interface | None = None
) -> DriftReport:
    """Read lbweb's tables whole and compare every unit with what the kernel held right after lbweb
    wrote it (its fingerprint). A unit lbweb wrote but kept no fingerprint of counts as drifted."""
    reading = (kernel or Kernel()).read_units(applied)
    found = {}
    for key in sorted(set(applied) | {drift.SKELETON}):
        if key not in expected:
            found[key] = ["no fingerprint of what lbweb wrote"]
            continue
        differences = drift.differences(expected[key], reading.records.get(key, {}))
        if differences:
            found[key] = differences
    names = dict(KernelUnit.objects.filter(key__in=list(found)).values_list("key", "name"))
    return DriftReport(reading.present, found, names, reading)


def holds_nothing(objects: compiler.UnitObjects) -> bool:
    """A unit with no object in the kernel (a disabled farm): its record is empty, with nothing to read."""
    return not (objects.chains or objects.objects or objects.volatile or objects.elements or objects.tables)


class ReadBack:
    """The fingerprints of what one Applier writes, taken from ``kernel`` as its units are in ``cache``."""

    def __init__(self, kernel: Interface, cache: UnitCache) -> None:
        self.kernel = kernel
        self.cache = cache

    def units(self, keys: set[str] | list[str], document: dict, all_maps: bool = False) -> None:
        """After an incremental write: the written units read back by name (their cost, not the table's)."""
        applied = self.cache.applied()
        units = {k: applied[k] for k in keys if k in applied}
        if drift.SKELETON in keys:
            units[drift.SKELETON] = compiler.UnitObjects()
        elements = [body.get("element") for command in document["nftables"] for body in command.values()]
        shared = set(compiler.hooks.skeleton_objects()[1])
        touched = shared if all_maps else {e["name"] for e in elements if e} & shared
        # Who owns every name is needed only to file the elements of a shared map the write touched; making
        # it walks every unit (~0.1 s at 10,000 farms), which a change inside one farm (a weight) must not pay.
        # (a farm's ranges in a schedules map are read by their keys, owners aside: see drift.read.read_slot_elements)
        by_owner = {m for m in touched if not compiler.schedulers.is_schedules_map(m)}
        owners = drift.owners_of(applied) if by_owner else drift.Owners(shared=shared)
        previous = dict(KernelFingerprint.objects.filter(key__in=list(units)).values_list("key", "record"))
        try:
            records = self.kernel.probe_records(owners, units, touched, previous)
        except OSError as exc:
            log.warning("fingerprints not taken: %s", exc)
            KernelFingerprint.objects.filter(key__in=list(units)).delete()
            return
        store_fingerprints(records, removed=[k for k in keys if k not in units])

    def rest(self, changed: list[str], recorded: set[str], outcome: Outcome) -> None:
        """After a bulk change: the fingerprints of the ``changed`` units not ``recorded`` as they were
        written. A unit removed has none, one that holds nothing has an empty one (nothing is read for
        either); the others are read back once the run is recorded, with one read of the whole table
        (:meth:`after_run`)."""
        applied = self.cache.applied()
        rest = [k for k in changed if k not in recorded]
        gone = [k for k in rest if k not in applied]
        if gone:
            store_fingerprints({}, removed=gone)
        empty = {k: {} for k in rest if k in applied and holds_nothing(applied[k])}
        if empty:  # a disabled farm: nothing of it in the kernel, nothing written, so nothing recorded
            store_fingerprints(empty)
        unread = [k for k in rest if k in applied and k not in empty]
        if unread:
            outcome.read_back += unread
            outcome.written_generation = self.kernel.generation_id()

    def after_run(self, outcome: Outcome) -> None:
        """The fingerprints a bulk change or a rebuild left to take, after its run is recorded: the farms
        are in the kernel once it commits, and show as applied without waiting for lbweb's bookkeeping.

        A fingerprint is what the kernel held right after lbweb wrote it. When the kernel's ruleset moved
        between lbweb's last write and the end of the read (another writer), what was read is not that:
        no fingerprint is kept, and the next reconcile treats those units as drifted (after a rebuild: it
        compares the table with what lbweb compiled) instead of taking someone else's change as lbweb's."""
        if outcome.read_all or outcome.read_back:
            self.table(None if outcome.read_all else outcome.read_back, outcome.written_generation)

    def table(self, only: list[str] | None = None, written: int | None = None) -> None:
        """After a full write: lbweb's tables read whole, every unit's fingerprint replaced.

        ``only``: after a bulk change, the fingerprints of these units alone (the others keep theirs, so a
        unit that drifted before is still found). One read of the whole table: reading thousands of
        units back one by one (:meth:`units`) took 52 s of a 10,000-farm apply, one table
        read about a second. ``written``: the ruleset generation lbweb's write left; when the kernel's
        differs after the read, nothing read is kept (see :meth:`after_run`)."""
        try:
            reading = self.kernel.read_units(self.cache.applied())
        except OSError as exc:  # the write stands; the next reconcile finds units without fingerprints
            log.warning("fingerprints not taken: %s", exc)
            return
        if written is not None and self.kernel.generation_id() != written:
            log.warning(
                "the kernel's ruleset changed between lbweb's write and its read-back: no fingerprint kept of %s",
                "any unit" if only is None else f"{len(only)} unit(s)",
            )
            store_fingerprints({}, removed=[] if only is None else only, replace=only is None)
            return
        if only is None:
            store_fingerprints(reading.records, replace=True)
            return
        records = {k: reading.records[k] for k in only if k in reading.records}
        store_fingerprints(records, removed=[k for k in only if k not in reading.records])
