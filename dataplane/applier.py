"""Worker-side service: bring the kernel to what the database says.

Runs only in the Celery worker on queue ``dataplane`` (concurrency 1), the
one process allowed to change the kernel. A task carries at most ids; every
thing else is read here from the database.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import logging
import os
import time
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from django.conf import settings
from django.db import transaction
from django.db.models import F, Max
from django.utils import timezone

import compiler
import compiler.hooks
import compiler.names
import compiler.schedulers
from compiler import carry
from compiler.types import Json
from compiler.units import UnitMap, combined_digest
from farms.choices import L7_MODES, ApplyKindChoices, BackendHealthChoices, FarmModeChoices, FarmSchedulerChoices
from farms.models import ApplyRun, Backend, ConfigGeneration, Farm, KernelFingerprint, KernelUnit, Policy
from farms.specs import Snapshot, farm_spec, farms_queryset, policy_spec, snapshot  # noqa: F401 (re-exported)
from lbweb.db import read_snapshot

from .kernel import drift, links
from .kernel.applier import Kernel
from .kernel.interface import ApplyError, Interface, KernelState
from .kernel.sandbox import IsolatedKernel, writer
from .kernel.transcribe import Untranscribable

log = logging.getLogger("lbweb.dataplane")


def localise(snap: Snapshot) -> Snapshot:
    """Fill in what only this namespace knows: interface and backend MACs (DSR), offload devices."""
    specs = []
    for spec in snap.specs:
        try:
            if spec.mode == FarmModeChoices.DSR and spec.enabled:
                spec = links.resolve_dsr(spec)
            if spec.flow_offload:
                spec = dataclasses.replace(spec, offload_devices=links.forwarding_devices())
        except links.LinkError as exc:
            snap.failures[spec.id] = str(exc)
        specs.append(spec)
    snap.specs = specs
    return snap


def cut_backend_connections(backend_id: int) -> int:
    """Delete the conntrack entries of a backend that went down (unless it came back meanwhile)."""
    from .kernel.conntrack import delete_backend_connections

    backend = Backend.objects.filter(pk=backend_id).first()
    if backend is None or backend.health != BackendHealthChoices.DOWN:
        return 0
    deleted = delete_backend_connections(backend.farm_id, backend.address, backend.port)
    log.info("backend %s of farm %s is down: %d connection(s) cut", backend, backend.farm_id, deleted)
    return deleted


def last_handled_generation() -> int:
    return ApplyRun.objects.aggregate(g=Max("generation"))["g"] or 0


ISOLATED = "isolated, retried when the farm changes: "


def isolated_farms() -> dict[int, str]:
    """Farms the kernel refused, or whose apply crashed the kernel writer, at their current configuration
    (id -> the reason shown). They are left out of every apply and reconcile, and what the kernel held
    of them before stays as it was, until the farm is written again or retried (both move its
    configuration generation): one refused farm costs one failed attempt, not a full rebuild at every
    apply and reconcile that would wipe every farm's persistence entries and counters."""
    rows = Farm.objects.filter(failed_generation__gte=F("config_generation"), apply_error__startswith=ISOLATED)
    return dict(rows.values_list("id", "apply_error"))


def pending_farms() -> bool:
    """Whether a farm waits for an apply (isolated farms wait for a change, not for the worker)."""
    waiting = Farm.objects.exclude(mode__in=L7_MODES).filter(applied_generation__lt=F("config_generation"))
    return waiting.exclude(failed_generation__gte=F("config_generation"), apply_error__startswith=ISOLATED).exists()


def configuration_digest(compiled: dict[str, compiler.UnitRuleset]) -> str:
    """One digest of every unit's, recorded with each apply: the cache's units keep theirs up to date
    (``UnitMap``), so a single change does not hash 10,000 units (~6 ms at 10,000 farms, py-spy)."""
    return combined_digest(compiled)


def left_out(snap: Snapshot, good: list) -> set[int]:
    """The farms of ``snap`` a rebuild did not compile (failed here, isolated, refused)."""
    return {s.id for s in snap.specs} - {s.id for s in good}


def hold(
    compiled: dict[str, compiler.UnitRuleset], isolated: Iterable[int], applied: dict[str, compiler.UnitObjects]
) -> dict[str, compiler.UnitRuleset]:
    """``compiled`` with each isolated farm as the kernel holds it: its last applied version (objects
    only: nothing is sent for it), or nothing when it never went in."""
    keys = {compiler.farm_key(fid) for fid in isolated}
    if not keys:
        return compiled
    names = dict(KernelUnit.objects.filter(key__in=keys).values_list("key", "name"))
    held = {k: u for k, u in compiled.items() if k not in keys}
    for key in sorted(keys):
        if key in applied and key in names:
            held[key] = compiler.UnitRuleset(key, names[key], applied[key])
    return held


def bisect(items: Sequence[Hashable], attempt: Callable[[list], object], error: ApplyError) -> dict[Hashable, str]:
    """Which of ``items`` the kernel refuses (item -> its words), when ``attempt`` of all of them failed
    with ``error``: halves are attempted in turn, and a half that fails is split again, so one bad unit
    among n costs about 2 log2(n) attempts. ``attempt`` of a group that passes must leave it done."""
    refused: dict[Hashable, str] = {}

    def visit(group: list, known: ApplyError | None) -> None:
        if known is None:
            try:
                attempt(group)
                return
            except ApplyError as exc:
                if exc.uncertain:
                    raise
                known = exc
        if len(group) == 1:
            refused[group[0]] = known.message
            return
        middle = len(group) // 2
        visit(group[:middle], None)
        visit(group[middle:], None)

    visit(list(items), error)
    return refused


def ensure_forwarding() -> None:
    """An LB that does not route balances nothing: turn forwarding on in this namespace."""
    if not settings.LBWEB_MANAGE_SYSCTL:
        return
    for path in ("/proc/sys/net/ipv4/ip_forward", "/proc/sys/net/ipv6/conf/all/forwarding"):
        try:
            Path(path).write_text("1\n")
        except OSError as exc:
            log.warning("cannot enable forwarding (%s): %s", path, exc)


def publish_capabilities() -> dict[str, bool]:
    """Probe the kernel (dry runs) and publish what it can do, for the API and the UI."""
    import json

    from farms.capabilities import REDIS_KEY
    from lbweb.redis_client import get_redis

    capabilities = IsolatedKernel().capabilities()
    writer().close()  # a fresh writer for the first task (and for any process that probes without applying)
    try:
        get_redis().set(REDIS_KEY, json.dumps(capabilities))
    except Exception as exc:  # Redis down: the capabilities are only shown, never needed to apply
        log.warning("capabilities not published: %s", exc)
    return capabilities


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


class UnitCache:
    """The worker's memory of compiled units and of what it put in the kernel, so that one change costs
    one farm's compilation, not all of them. A farm is recompiled when its configuration generation moved
    (every write bumps it) or when it balances by least connections (its weights live outside the farm row).
    A full resync empties the cache; it refills from the database.
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.farms: dict[int, tuple[int, compiler.UnitRuleset, frozenset]] = {}
        self.seen: int | None = None  # the configuration generation the farms above are compiled at
        self.uncompiled: set[int] = set()  # farms read at ``seen`` that could not be compiled here
        self.needs: Counter = Counter()  # how many farms of ``farms`` need each hook (compiler.farm_needs)
        self.hooks: tuple[frozenset, dict[str, compiler.UnitRuleset]] = (frozenset(), {})
        # every unit above by key, kept as they change: made anew, 10,000 entries cost ~3 ms a change
        self.units: dict[str, compiler.UnitRuleset] = UnitMap()
        self.policies: dict[int, tuple[int, compiler.UnitRuleset]] = {}
        self.kernel: dict[str, compiler.UnitObjects] | None = None
        # Units whose compiled and applied versions may differ (None: not known, compare them all)
        self.unsettled: set[str] | None = None
        # (ruleset generation id, configuration generation) when the kernel was last known to match
        self.verified: tuple[int, int] | None = None

    def current(self) -> tuple[int, dict[str, compiler.UnitRuleset], dict[int, str], dict[int, str]]:
        """(generation, every unit as the kernel should hold it, farms that could not be compiled here
        and why, isolated farms). The units are the cache's own dict, not a copy: read it, never change it."""
        with read_snapshot():  # one consistent view that keeps no web write waiting (lbweb/db.py)
            generation = ConfigGeneration.current()
            if self.seen is not None and generation < self.seen:  # the database went back: forget it all
                for farm_id in list(self.farms.keys() | self.uncompiled):
                    self._forget(farm_id)
                self.seen = None
            kernel_farms = Farm.objects.exclude(mode__in=L7_MODES)
            dynamic = set(kernel_farms.filter(scheduler=FarmSchedulerChoices.LEASTCONN).values_list("id", flat=True))
            # Changed since the cache was last filled: one query, not a row of every farm to compare
            # (a generation only grows, and every write gives its farms a new one).
            newer = kernel_farms if self.seen is None else kernel_farms.filter(config_generation__gt=self.seen)
            newer_ids = set(newer.values_list("id", flat=True))
            known = self.farms.keys() | self.uncompiled
            # A farm gone (deleted, or now HAProxy's) leaves fewer rows than the farms known and the new
            # ones: only then is every id read (a read of 10,000 rows cost ~5 ms of every change).
            gone: set[int] = set()
            if kernel_farms.count() != len(known) + len(newer_ids - known):
                gone = known - set(kernel_farms.values_list("id", flat=True))
            stale = sorted(dynamic | newer_ids)
            queryset = farms_queryset() if self.seen is None else farms_queryset().filter(id__in=stale)
            # in batches: 10,000 farms' rows with their backends held ~250 MB at once
            specs = [farm_spec(f) for f in queryset.iterator(chunk_size=500)] if stale else []
            policy_rows = dict(Policy.objects.values_list("id", "config_generation"))
            stale_policies = [pid for pid, g in policy_rows.items() if self.policies.get(pid, (None,))[0] != g]
            policies = [policy_spec(p) for p in Policy.objects.filter(id__in=stale_policies)] if stale_policies else []
            isolated = isolated_farms()
        snap = localise(Snapshot(generation, specs, policies))
        for spec in snap.specs:
            self._forget(spec.id)
            if spec.id not in snap.failures:
                needs, unit = compiler.farm_needs(spec), compiler.compile_farm(spec)
                self.farms[spec.id] = (generation, unit, needs)
                self.units[unit.key] = unit
                self.needs.update(needs)
            else:
                self.uncompiled.add(spec.id)
        for policy in policies:
            self.policies[policy.id] = (policy_rows[policy.id], compiler.compile_policy(policy))
            self.units[compiler.policy_key(policy.id)] = self.policies[policy.id][1]
        for farm_id in gone:
            self._forget(farm_id)
        self.seen = generation
        for policy_id in set(self.policies) - set(policy_rows):
            del self.policies[policy_id]
            del self.units[compiler.policy_key(policy_id)]
        self._place_hooks()
        return generation, hold(self.units, isolated, self.applied()), snap.failures, isolated

    def _forget(self, farm_id: int) -> None:
        _generation, _unit, needs = self.farms.pop(farm_id, (None, None, ()))
        self.units.pop(compiler.farm_key(farm_id), None)
        self.needs.subtract(needs)
        self.uncompiled.discard(farm_id)

    def _place_hooks(self) -> None:
        """The hooks the farms need among ``units``, compiled again only when what they need changed
        (the union of every farm's needs, made on each change, cost ~4 ms at 10,000 farms)."""
        needed = frozenset(need for need, count in self.needs.items() if count > 0)
        if needed == self.hooks[0]:
            return
        for key in self.hooks[1]:
            self.units.pop(key, None)
        self.hooks = (needed, compiler.hooks_for(needed))
        self.units.update(self.hooks[1])

    def fill(self, generation: int, specs: list, units: dict[str, compiler.UnitRuleset], failures=()) -> None:
        """Remember the farms a full rebuild compiled (read at ``generation``; ``failures``: the farms it
        could not compile): the next change then compiles its own farm, not all of them again."""
        self.farms = {
            spec.id: (generation, units[compiler.farm_key(spec.id)], compiler.farm_needs(spec))
            for spec in specs
            if compiler.farm_key(spec.id) in units
        }
        self.uncompiled = set(failures)
        self.needs = Counter(need for _g, _u, needs in self.farms.values() for need in needs)
        self.units = UnitMap({unit.key: unit for _g, unit, _n in self.farms.values()})
        self.units.update({unit.key: unit for _g, unit in self.policies.values()})
        self.hooks = (frozenset(), {})
        self._place_hooks()
        self.seen = generation

    def applied(self) -> dict[str, compiler.UnitObjects]:
        """What lbweb last put in the kernel, unit by unit. Change it through :meth:`record_applied` or
        :meth:`replace_applied`."""
        if self.kernel is None:
            self.kernel = {u.key: compiler.UnitObjects.from_json(u.objects_json) for u in KernelUnit.objects.all()}
            self.unsettled = None
        return self.kernel

    def replace_applied(self, everything: dict[str, compiler.UnitObjects]) -> None:
        """The kernel now holds these units and no other (a whole table written)."""
        self.kernel, self.unsettled = dict(everything), None

    def record_applied(self, units: dict[str, compiler.UnitObjects | None]) -> None:
        """The kernel now holds these units as they are here (None: removed); the others are unchanged."""
        mirror = self.applied()
        for key, objects in units.items():
            if objects is None:
                mirror.pop(key, None)
            else:
                mirror[key] = objects
            if self.unsettled is not None:
                self.unsettled.add(key)

    def changed(self, compiled: dict[str, compiler.UnitRuleset]) -> list[str]:
        """``compiler.changed_units`` of the applied units and ``compiled``. When ``compiled`` is the cache's
        own units, only the units that changed on either side since the last call, and those that differed
        then (a unit the kernel refused is tried again), are compared: all 10,000 at every change cost ~5 ms
        of each single change at 10,000 farms (py-spy)."""
        applied = self.applied()
        if compiled is not self.units:
            return compiler.changed_units(applied, compiled)
        if self.unsettled is None:
            found = compiler.changed_units(applied, compiled)
        else:
            found = compiler.changed_units(applied, compiled, self.unsettled | self.units.touched)
        self.units.touched.clear()
        self.unsettled = set(found)
        return found


CACHE = UnitCache()


@dataclass
class Outcome:
    changed: list[str] = field(default_factory=list)
    failed: dict[int, str] = field(default_factory=dict)
    held: set[int] = field(default_factory=set)  # isolated farms: neither applied nor failed anew
    commands: int = 0
    error: str = ""
    writer: str = ""
    drift: list[dict] = field(default_factory=list)
    # Fingerprints read back once the run is recorded (``Applier._read_back``): the units of a bulk change
    # that were not recorded as written, or the whole table after a rebuild. Reading a thousand farms back
    # took 0.7 s of a 4.1 s apply, in which the kernel held the farms and they still showed as pending.
    read_back: list[str] = field(default_factory=list)
    read_all: bool = False
    written_generation: int | None = None  # the kernel's ruleset generation right after lbweb's last write


def cyclic_gc_paused(function: Callable) -> Callable:
    """Run ``function`` with Python's cyclic garbage collector off. Compiling thousands of farms
    allocates millions of objects and no cycles worth collecting, and the collector would scan them
    all again and again: 2.3 times the compile time at 4,000 farms (``bench/compile.py``)."""

    @functools.wraps(function)
    def paused(*args, **kwargs):
        enabled = gc.isenabled()
        gc.disable()
        try:
            return function(*args, **kwargs)
        finally:
            if enabled:
                gc.enable()

    return paused


# The bounds below can be set from the environment (``LBWEB_BULK_UNITS``, ...): for tests that drive the
# real worker through the bulk paths with a handful of farms.
BULK_UNITS = int(os.environ.get("LBWEB_BULK_UNITS", "100"))


def is_bulk(changed: int, total: int) -> bool:
    """A change of more than BULK_UNITS farms and policies that is a quarter of the configuration or more:
    libnftables' cost follows the whole table, lbweb's batch the change, so for most of a small table
    libnftables is the quicker (up to ``LIBNFTABLES_BULK_COMMANDS``); a drift that big is repaired by a
    rebuild of the table, not unit by unit (the repair reads back and removes each unit by itself)."""
    return changed > BULK_UNITS and changed * 4 >= total


BULK_TRANSACTION_COMMANDS = int(os.environ.get("LBWEB_BULK_TRANSACTION_COMMANDS", "20000"))
# A bulk change (``is_bulk``) of at most this many commands goes to libnftables in one transaction:
# 1,000 farms of 10 backends are 99,000 commands (74,000 before the per-backend counter map and the named
# scheduler sets), which the worker applied in 3.1-3.2 s this way (~700 MB summed peak), where transactions of
# lbweb's own batch (``Applier._write_bulk``) took 3.5-3.7 s (bench/RESULTS.md, eighteenth pass; 2.5 s this way
# since the nineteenth, the table read back after the run is recorded). Beyond, libnftables' memory grows with
# the change (~3.2 GB at 10,000 farms), and the change goes in transactions.
LIBNFTABLES_BULK_COMMANDS = int(os.environ.get("LBWEB_LIBNFTABLES_BULK_COMMANDS", "120000"))


def command_count(unit: compiler.UnitRuleset | None, old: compiler.UnitObjects | None) -> int:
    """About how many commands a change of one unit takes: its removal (at most a flush and a delete of
    each chain, a delete of each object and element) and its creation."""
    removal = len(old.chains) * 2 + len(old.objects) + len(old.volatile) + len(old.elements) if old else 0
    return removal + (unit.size if unit else 0)


def _holds_nothing(objects: compiler.UnitObjects) -> bool:
    """A unit with no object in the kernel (a disabled farm): its record is empty, with nothing to read."""
    return not (objects.chains or objects.objects or objects.volatile or objects.elements or objects.tables)


class Prepared(NamedTuple):
    """One transaction made ready: its document, the units it writes, and the context lbweb's batch needs."""

    document: Json
    written: list[str]
    context: list[Json]


def bulk_transactions(
    changed: list[str],
    compiled: dict[str, compiler.UnitRuleset],
    applied: dict[str, compiler.UnitObjects],
    limit: int | None = None,
) -> list[list[str]]:
    """``changed`` split into transactions of whole units, each of ``limit`` commands at most
    (``BULK_TRANSACTION_COMMANDS``; a unit larger than that goes alone).

    The limit comes from the scratch namespace, where libnftables loads each transaction: as an
    unprivileged user it cannot raise its socket's buffer, and refused a batch of 74,000 commands
    (1,000 farms of 10 backends) with "Message too long"; 37,000 went in.
    The order keeps what depends on what: the first transaction takes every unit that goes away and
    every policy and hook that comes or changes (farms match policies' sets, hooks hold the base
    chains), the farms follow, and the policies and hooks that go away come last, once no farm refers
    to them."""
    goes = [k for k in changed if k not in compiled]
    first = [k for k in goes if k.startswith("farm:")] + [
        k for k in changed if k in compiled and not k.startswith("farm:")
    ]
    farms = [k for k in changed if k in compiled and k.startswith("farm:")]
    last = [k for k in goes if not k.startswith("farm:")]

    def size(key: str) -> int:
        return command_count(compiled.get(key), applied.get(key))

    limit = limit or BULK_TRANSACTION_COMMANDS
    groups: list[list[str]] = []
    current: list[str] = list(first)
    budget = sum(size(k) for k in first)
    for key in farms:
        cost = size(key)
        if current and budget + cost > limit:
            groups.append(current)
            current, budget = [], 0
        current.append(key)
        budget += cost
    if last:
        current += last
    if current:
        groups.append(current)
    return groups


class Applier:
    """One apply or reconcile pass; records an ApplyRun and the per-farm outcome."""

    def __init__(self, kernel: Interface | None = None):
        self.kernel: Interface = kernel or IsolatedKernel()

    # -- entry points ---------------------------------------------------------------

    @cyclic_gc_paused
    def apply_pending(self, requested: int | None = None, reason: str = "change") -> ApplyRun | None:
        """Apply what changed since the last apply; a request already covered is skipped."""
        if requested is not None and requested <= last_handled_generation():
            return None
        self._coalesce()
        generation, compiled, failures, isolated = CACHE.current()
        if requested is not None and generation <= last_handled_generation():
            return None
        return self._apply(generation, compiled, failures, set(isolated), reason)

    @cyclic_gc_paused
    def reconcile(self, reason: str = "reconcile") -> ApplyRun | None:
        """Compare the kernel with what lbweb wrote there, unit by unit, and repair the units that drifted.

        Reading the whole table back costs about a second at 10,000 farms, which would hold the
        worker's queue every 30 s. So when the kernel's ruleset generation has not moved since the
        worker last knew the kernel right (its own commit, or a comparison that matched), and no write
        came since, nothing is read. Otherwise lbweb's tables are read as netlink messages and each
        unit's objects compared with the fingerprint kept when it was written (``kernel/drift.py``); only
        the units that differ are removed and written again, in one transaction that keeps their
        counters and dynamic sets (persistence) when these are as lbweb wrote them."""
        generation_id = self.kernel.generation_id()
        if CACHE.verified == (generation_id, ConfigGeneration.current()) and not pending_farms():
            log.info(
                "%s: kernel generation %d unchanged since it was verified; nothing to compare", reason, generation_id
            )
            return None
        expected = load_fingerprints()
        if drift.SKELETON not in expected and not self._take_baseline():
            return self._full(localise(snapshot()), reason=f"{reason}: kernel differs")
        generation, compiled, failures, isolated = CACHE.current()
        report = find_drift(CACHE.applied(), load_fingerprints(), self.kernel)
        if not report.present:
            return self._resync(f"{reason}: table missing")
        if report.units:
            log.warning("%s: the kernel differs from what lbweb wrote: %s", reason, report.summary())
            return self._repair(generation, compiled, failures, set(isolated), report, reason)
        if pending_farms() or failures or generation > last_handled_generation():
            return self._apply(generation, compiled, failures, set(isolated), reason)
        CACHE.verified = (generation_id, generation)
        log.info("%s: the kernel is as lbweb wrote it", reason)
        return None

    def _take_baseline(self) -> bool:
        """A table written before lbweb kept fingerprints: compared the old way (digests, names), and
        when it matches, what it holds now becomes the reference."""
        snap = localise(snapshot())
        compiled = hold(snap.compiled(), isolated_farms(), CACHE.applied())
        try:
            state = self.kernel.observe()
        except ApplyError as exc:  # libnftables cannot even print what the table holds: rebuild it
            log.warning("the kernel's table cannot be read (%s)", exc.message)
            return False
        if not kernel_matches(state, compiled):
            return False
        self._fingerprint_all()
        return True

    # -- internals -------------------------------------------------------------------

    def _apply(
        self, generation: int, compiled: dict, failures: dict[int, str], held: set[int], reason: str
    ) -> ApplyRun:
        if self.kernel.base_digest() != compiler.base_digest():
            return self._resync(f"{reason}: table missing")
        changed = CACHE.changed(compiled)
        outcome = Outcome(changed=changed, failed=dict(failures), held=held)
        started = time.monotonic()
        if not changed:
            return self._record(generation, ApplyKindChoices.NOOP, reason, started, outcome, compiled)
        try:
            self._write_isolating(compiled, changed, outcome)
        except ApplyError as exc:  # the kernel may hold the change or not: rebuild from what it holds
            log.warning("apply outcome unknown (%s); doing a full resync", exc.message)
            return self._resync(f"{reason}: outcome unknown")
        if not outcome.failed and not outcome.error:
            CACHE.verified = (self.kernel.generation_id(), generation)
        return self._record(generation, ApplyKindChoices.INCREMENTAL, reason, started, outcome, compiled)

    def _write_isolating(
        self, compiled: dict[str, compiler.UnitRuleset], changed: list[str], outcome: Outcome, fingerprint: bool = True
    ) -> None:
        """:meth:`_write`; when the kernel refuses it, the units it refuses are found by bisection and
        isolated, and the others written. An uncertain outcome is raised."""
        try:
            self._write(compiled, changed, outcome, fingerprint)
        except ApplyError as exc:
            if exc.uncertain:
                raise
            log.warning("the kernel refused a change of %d unit(s) (%s); finding which", len(changed), exc.message)
            order = sorted(changed, key=lambda k: (k in compiled, not k.startswith("policy"), k))  # removals first
            refused = bisect(order, lambda group: self._write(compiled, group, outcome, fingerprint), exc)
            refused = self._retry_alone(compiled, refused, outcome)
            outcome.changed = [k for k in changed if k not in refused]
            self._isolate(refused, outcome)

    def _write(
        self, compiled: dict[str, compiler.UnitRuleset], keys: list[str], outcome: Outcome, fingerprint: bool = True
    ) -> None:
        """Send the change of ``keys`` as lbweb's own batch, one transaction (a bulk change: several,
        see :meth:`_write_bulk`), and remember what the kernel now holds (``fingerprint``: and what it
        looks like, unless the caller reads the whole table after). A small change is read back at once;
        what a bulk change did not record as it wrote is read once the run is recorded (``_read_back``)."""
        applied = CACHE.applied()
        changed = compiler.changed_units(applied, compiled, keys)
        if not changed:
            return
        if len(changed) <= BULK_UNITS:
            document, written = self._commit(compiled, changed, outcome)
            if fingerprint:
                self._fingerprint_units(written, document)
            return
        commands = sum(command_count(compiled.get(k), applied.get(k)) for k in changed)
        recorded: set[str] = set()
        if is_bulk(len(changed), len(compiled)) and commands <= LIBNFTABLES_BULK_COMMANDS:
            self._commit(compiled, changed, outcome, libnftables=True)  # most of a small table: the quicker
        else:
            recorded = self._write_bulk(compiled, changed, outcome, fingerprint)
        if fingerprint:
            self._fingerprint_rest(changed, recorded, outcome)

    def _commit(
        self,
        compiled: dict[str, compiler.UnitRuleset],
        keys: list[str],
        outcome: Outcome,
        *,
        libnftables: bool = False,
        adding_in_context: bool = True,
    ) -> tuple[Json, list[str]]:
        """One transaction of the change of ``keys``, recorded as applied; (its document, the units it
        changed). ``libnftables``: written by libnftables, not lbweb's batch; ``adding_in_context``: the
        units the change adds are loaded in scratch before it (a bulk transaction leaves them out: their
        own commands define them)."""
        prepared = self._prepare(compiled, keys, adding_in_context=adding_in_context, context=not libnftables)
        self._commit_prepared(compiled, prepared, outcome, libnftables=libnftables)
        return prepared.document, prepared.written

    @staticmethod
    def _prepare(
        compiled: dict[str, compiler.UnitRuleset], keys: list[str], *, adding_in_context: bool, context: bool = True
    ) -> Prepared:
        """The document of one transaction of the change of ``keys`` and, for lbweb's batch, its context."""
        applied = CACHE.applied()
        document, written = compiler.incremental_document(applied, compiled, only=set(keys))
        if not written or not context:
            return Prepared(document, written, [])
        in_context = written if adding_in_context else [k for k in written if k in applied]
        return Prepared(document, written, compiler.incremental_context(compiled, in_context))

    def _commit_prepared(
        self,
        compiled: dict[str, compiler.UnitRuleset],
        prepared: Prepared,
        outcome: Outcome,
        *,
        libnftables: bool = False,
    ) -> None:
        if not prepared.written:
            return
        if libnftables:
            self.kernel.apply(prepared.document)
            outcome.writer = "libnftables"
        else:
            said = self.kernel.apply_incremental(prepared.document, prepared.context)
            # a transaction of disabled farms alone writes nothing ("none"): the run keeps who wrote the others
            outcome.writer = outcome.writer if said == "none" and outcome.writer else said
        outcome.commands += len(prepared.document["nftables"])
        self._store_units(compiled, prepared.written)

    def _write_bulk(
        self, compiled: dict[str, compiler.UnitRuleset], changed: list[str], outcome: Outcome, fingerprint: bool = True
    ) -> set[str]:
        """A change of more than BULK_UNITS units (an import, the first apply of a restored database) that
        libnftables would not take more quickly (``LIBNFTABLES_BULK_COMMANDS``), in transactions of at
        most ``BULK_TRANSACTION_COMMANDS`` commands (``bulk_transactions``), each lbweb's own batch.

        Why not one libnftables transaction, as before: libnftables holds the whole change at once,
        parsed and evaluated, ~3.2 GB for 10,000 farms of 10 backends (``nft -j -f`` of that document
        alone); the worker's processes peaked at 5.2 GB together, 1.25 GB this way (842 MB once the
        writer is ended after it, the pool is Celery's solo one and the read-back keeps hashes). Several libnftables
        transactions cost more than one: before each, libnftables reads every chain, set and counter of
        the table (96 s for 10,000 farms in chunks of 1,000, against 66 s at once). lbweb's own batch
        does not read the table; each transaction is loaded in the scratch namespace alone (the units it
        adds carry their own definitions, so only the units it changes are loaded first as the kernel
        holds them). The price was time: the full apply of those 10,000 farms took 100 s, 80 s through
        libnftables on the same machine (``bench/control_plane.py``); now see bench/RESULTS.md.
        Each transaction holds whole units: a farm is never half written. A refused transaction raises,
        those before it stay written and recorded, and the caller's search for the refused unit finds
        them unchanged. Each transaction is announced to the kernel (``prefetch``) before the one before
        it is committed, so the scratch process loads it while the kernel writer commits the other.

        ``fingerprint``: the units a transaction writes from nothing are announced ``whole``, and the records
        the kernel makes of them as it commits (``Kernel.written_records``) are stored at once; returns
        those units, so the caller reads back only the others (:meth:`_fingerprint_rest`)."""
        recorded: set[str] = set()

        def announce(prepared: Prepared) -> None:
            whole = {}
            if fingerprint:
                applied = CACHE.applied()
                whole = {k: compiled[k].objects for k in prepared.written if k in compiled and k not in applied}
            self.kernel.prefetch(prepared.document, prepared.context, whole)

        try:
            groups = bulk_transactions(changed, compiled, CACHE.applied())
            following = self._prepare(compiled, groups[0], adding_in_context=False) if groups else None
            if following is not None and following.written:
                announce(following)
            for group in [*groups[1:], None]:
                # The next transaction is announced before this one is committed: the kernel writer's
                # scratch process loads it meanwhile. Units of one transaction are in no other, so its
                # document does not depend on this one being recorded first.
                current = following
                following = None if group is None else self._prepare(compiled, group, adding_in_context=False)
                if following is not None and following.written:
                    announce(following)
                self._commit_prepared(compiled, current, outcome)
                if fingerprint and current.document["nftables"]:
                    records = self.kernel.written_records()
                    store_fingerprints(records)
                    recorded |= records.keys()
        finally:  # the processes that wrote it let go of their memory before the worker reads anything back
            self.kernel.release()
        return recorded

    def _retry_alone(self, compiled: dict, refused: dict[str, str], outcome: Outcome) -> dict[str, str]:
        """A unit refused before the rest of its change went in (a port another farm frees in the same
        change) gets one more try alone; a crash is not retried (it comes back with the same input)."""
        left = {}
        for key, message in refused.items():
            if message.startswith("crashed"):
                left[key] = message
                continue
            try:
                self._write(compiled, [key], outcome)
            except ApplyError as exc:
                if exc.uncertain:
                    raise
                left[key] = exc.message
        return left

    def _isolate(self, refused: dict[Hashable, str], outcome: Outcome) -> None:
        """Record refused units: a farm is failed and isolated with the kernel's words (and what they mean
        when a capability is missing); a policy, or a farm already deleted, fails the run."""
        farms = {int(str(k).split(":")[1]): m for k, m in refused.items() if str(k).startswith("farm:")}
        rows = {r["id"]: r for r in Farm.objects.filter(id__in=list(farms)).values("id", "flow_offload", "helper")}
        capabilities = self.kernel.capabilities() if any(not m.startswith("crashed") for m in farms.values()) else {}
        for fid, row in rows.items():
            outcome.failed[fid] = ISOLATED + explain(row["flow_offload"], row["helper"], farms[fid], capabilities)
        others = [f"{k}: {m}" for k, m in refused.items() if not (str(k).startswith("farm:") and _id(k) in rows)]
        if others:
            outcome.error = "\n".join([*others, *(f"farm {fid}: {m}" for fid, m in sorted(outcome.failed.items()))])

    def _repair(
        self,
        generation: int,
        compiled: dict,
        failures: dict[int, str],
        held: set[int],
        report: DriftReport,
        reason: str,
    ) -> ApplyRun:
        """Write again the drifted units (and any unit with a pending change) from what the kernel holds of
        them; a full rebuild when that cannot be done unit by unit."""
        started = time.monotonic()
        # An isolated farm that drifted is not written again (nothing of it can be): it leaves the kernel.
        compiled = {
            k: u for k, u in compiled.items() if not (k in report.units and k.startswith("farm:") and _id(k) in held)
        }
        applied = CACHE.applied()
        rewrite = set(report.units) | set(compiler.changed_units(applied, compiled))
        units = sorted(k for k in rewrite if k != drift.SKELETON)
        expected = load_fingerprints()
        outcome = Outcome(changed=units, failed=dict(failures), held=held, drift=report.as_list())
        try:
            if is_bulk(len(rewrite), len(compiled)):
                raise drift.CannotRepair(f"{len(rewrite)} units drifted")
            wanted = {k: compiled[k].objects for k in units if k in compiled}
            removals, kept = self.kernel.removals(report.reading, rewrite, wanted, expected)
            # DSR units own whole tables, re-made by their own creates (libnftables: lbweb does not transcribe them)
            dsr = [k for k in units if k in compiled and compiled[k].objects.tables]
            inet = [k for k in units if k in compiled and k not in dsr]
            commands = drift.without_kept(compiler.base_commands(), kept) if drift.SKELETON in rewrite else []
            for unit in compiler.ordered({k: compiled[k] for k in inet}):
                commands += drift.without_kept(unit.creates, kept)
            document = compiler.document(commands)
            outcome.writer = self.kernel.repair(removals, document, compiler.incremental_context(compiled, inet))
            if dsr:
                tables = compiler.document([c for k in dsr for c in compiled[k].creates])
                self.kernel.apply(tables)
                outcome.writer = "libnftables" if not removals and not commands else outcome.writer
                document = compiler.document(commands + tables["nftables"])
            outcome.commands = len(removals) + len(document["nftables"])
        except (drift.CannotRepair, Untranscribable, ApplyError) as exc:
            log.warning("drift not repaired unit by unit (%s); rebuilding the table", exc)
            return self._full(localise(snapshot()), reason=f"{reason}: kernel differs", found=outcome.drift)
        self._store_units(compiled, units)
        self._fingerprint_units(rewrite, document, all_maps=drift.SKELETON in rewrite)
        if not outcome.failed:
            CACHE.verified = (self.kernel.generation_id(), generation)
        return self._record(generation, ApplyKindChoices.REPAIR, f"{reason}: drift", started, outcome, compiled)

    def _fingerprint_rest(self, changed: list[str], recorded: set[str], outcome: Outcome) -> None:
        """After a bulk change: the fingerprints of the ``changed`` units not ``recorded`` as they were
        written. A unit removed has none, one that holds nothing has an empty one (nothing is read for
        either); the others are read back once the run is recorded, with one read of the whole table
        (:meth:`_read_back`)."""
        applied = CACHE.applied()
        rest = [k for k in changed if k not in recorded]
        gone = [k for k in rest if k not in applied]
        if gone:
            store_fingerprints({}, removed=gone)
        empty = {k: {} for k in rest if k in applied and _holds_nothing(applied[k])}
        if empty:  # a disabled farm: nothing of it in the kernel, nothing written, so nothing recorded
            store_fingerprints(empty)
        unread = [k for k in rest if k in applied and k not in empty]
        if unread:
            outcome.read_back += unread
            outcome.written_generation = self.kernel.generation_id()

    def _read_back(self, outcome: Outcome) -> None:
        """The fingerprints a bulk change or a rebuild left to take, after its run is recorded: the farms
        are in the kernel once it commits, and show as applied without waiting for lbweb's bookkeeping.

        A fingerprint is what the kernel held right after lbweb wrote it. When the kernel's ruleset moved
        between lbweb's last write and the end of the read (another writer), what was read is not that:
        no fingerprint is kept, and the next reconcile treats those units as drifted (after a rebuild: it
        compares the table with what lbweb compiled) instead of taking someone else's change as lbweb's."""
        if outcome.read_all or outcome.read_back:
            self._fingerprint_all(None if outcome.read_all else outcome.read_back, outcome.written_generation)

    def _fingerprint_all(self, only: list[str] | None = None, written: int | None = None) -> None:
        """After a full write: lbweb's tables read whole, every unit's fingerprint replaced.

        ``only``: after a bulk change, the fingerprints of these units alone (the others keep theirs, so a
        unit that drifted before is still found). One read of the whole table: reading thousands of
        units back one by one (``_fingerprint_units``) took 52 s of a 10,000-farm apply, one table
        read about a second. ``written``: the ruleset generation lbweb's write left; when the kernel's
        differs after the read, nothing read is kept (see :meth:`_read_back`)."""
        try:
            reading = self.kernel.read_units(CACHE.applied())
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

    def _fingerprint_units(self, keys: set[str] | list[str], document: dict, all_maps: bool = False) -> None:
        """After an incremental write: the written units read back by name (their cost, not the table's)."""
        applied = CACHE.applied()
        units = {k: applied[k] for k in keys if k in applied}
        if drift.SKELETON in keys:
            units[drift.SKELETON] = compiler.UnitObjects()
        elements = [body.get("element") for command in document["nftables"] for body in command.values()]
        shared = set(drift.skeleton_objects()[1])
        touched = shared if all_maps else {e["name"] for e in elements if e} & shared
        # Who owns every name is needed only to file the elements of a shared map the write touched; making
        # it walks every unit (~0.1 s at 10,000 farms), which a change inside one farm (a weight) must not pay.
        # (a farm's ranges in a schedules map are read by their keys, owners aside: see drift.read_slot_elements)
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

    def _resync(self, reason: str) -> ApplyRun:
        CACHE.reset()
        return self._full(localise(snapshot()), reason=reason)

    def _coalesce(self) -> None:
        window = settings.LBWEB_APPLY_COALESCE_SECONDS
        last = ApplyRun.objects.order_by("-id").first()
        if last and window > 0:
            finished = last.started + timezone.timedelta(milliseconds=last.duration_ms)
            wait = window - (timezone.now() - finished).total_seconds()
            if wait > 0:
                time.sleep(min(wait, window))

    def _full(self, snap: Snapshot, reason: str, found: list[dict] | None = None, build: bool = True) -> ApplyRun:
        """Rebuild lbweb's table in one transaction, carrying over what the kernel learnt (``carry.py``).
        Isolated farms stay out; farms the kernel refuses now are found, isolated and left out.
        With no table in the kernel and many farms, :meth:`_build` instead (unless ``build`` is false)."""
        CACHE.reset()
        started = time.monotonic()
        isolated = isolated_farms()
        outcome = Outcome(failed=dict(snap.failures), held=set(isolated), drift=found or [])
        stale = self.kernel.dsr_tables()
        good = [s for s in snap.specs if s.id not in outcome.failed and s.id not in isolated]
        listing, counters = self._learnt()
        # No listing also when libnftables cannot print the table: the skeleton's digest tells that the
        # table is really absent (a build deletes the table first, and writes the farms back in steps).
        if build and listing is None and len(good) > BULK_UNITS and self.kernel.base_digest() is None:
            return self._build(snap, good, stale, reason, started, outcome)
        document, carried = carry.carry_over(
            compiler.full_document(good, snap.policies, stale_tables=stale), listing, counters
        )
        try:
            self.kernel.apply(document)
        except ApplyError as exc:
            by_id = {s.id: s for s in good}
            refused = bisect(
                list(by_id),
                lambda ids: self.kernel.check(compiler.full_document([by_id[i] for i in ids], snap.policies)),
                exc,
            )
            self._isolate({compiler.farm_key(fid): message for fid, message in refused.items()}, outcome)
            good = [s for s in good if s.id not in refused]
            plain = compiler.full_document(good, snap.policies, stale_tables=stale)
            document, carried = carry.carry_over(plain, listing, counters)
            try:
                try:
                    self.kernel.apply(document)
                except ApplyError as exc2:
                    if refused:
                        raise
                    log.warning("the rebuild with the carried-over state was refused (%s); without it", exc2.message)
                    document, carried = plain, 0
                    self.kernel.apply(document)
            except ApplyError as exc2:  # the base or the policies fail: nothing changed
                outcome.failed = {s.id: exc2.message for s in snap.specs}
                outcome.error = exc2.message
                return self._record(snap.generation, ApplyKindChoices.FULL, reason, started, outcome, {})
        if carried:
            log.info("%s: %d learnt element(s) and %d counter(s) carried over", reason, carried, len(counters))
        units = compiler.compile_units(good, snap.policies)
        CACHE.fill(snap.generation, good, units, left_out(snap, good))
        outcome.changed = sorted(units)
        outcome.commands = len(document["nftables"])
        outcome.writer = "libnftables"
        self._table_written(outcome, snap.generation)
        self._store_units(units, None)
        return self._record(snap.generation, ApplyKindChoices.FULL, reason, started, outcome, units)

    def _build(
        self, snap: Snapshot, good: list, stale: list[tuple[str, str]], reason: str, started: float, outcome: Outcome
    ) -> ApplyRun:
        """:meth:`_full` when the kernel has no table of lbweb's (boot, or someone deleted it) and there
        are many farms: with nothing to replace at once and nothing learnt to carry over, the skeleton
        goes in alone and the units follow as a bulk change does, in transactions of whole units
        (:meth:`_write_bulk`), so the worker never holds the whole table in libnftables (~3.2 GB for
        10,000 farms of 10 backends). A farm the kernel refuses is isolated as in any change."""
        try:
            self.kernel.apply(compiler.full_document([], [], stale_tables=stale))
        except ApplyError as exc:  # the skeleton fails: nothing changed
            outcome.failed = {s.id: exc.message for s in snap.specs}
            outcome.error = exc.message
            return self._record(snap.generation, ApplyKindChoices.FULL, reason, started, outcome, {})
        self._store_units({}, None)  # none of lbweb's units is in the kernel now
        units = compiler.compile_units(good, snap.policies)
        CACHE.fill(snap.generation, good, units, left_out(snap, good))
        outcome.changed = sorted(units)
        try:
            self._write_isolating(units, outcome.changed, outcome, fingerprint=False)
        except ApplyError as exc:  # part of the table is written, or not: rebuild from what the kernel holds
            log.warning("the build's outcome is unknown (%s); rebuilding the table", exc.message)
            return self._full(localise(snapshot()), reason=f"{reason}: outcome unknown", build=False)
        self._table_written(outcome, snap.generation)
        return self._record(snap.generation, ApplyKindChoices.FULL, reason, started, outcome, units)

    def _table_written(self, outcome: Outcome, generation: int) -> None:
        """After a rebuild (:meth:`_full`, :meth:`_build`): the whole table is read back once the run is
        recorded (:meth:`_read_back`), and the kernel is known to match unless a farm failed."""
        outcome.read_all, outcome.written_generation = True, self.kernel.generation_id()
        if not outcome.failed and not outcome.error:
            CACHE.verified = (outcome.written_generation, generation)

    def _learnt(self) -> tuple[list[dict] | None, dict]:
        """The table as the kernel holds it and its counters, for the rebuild to carry over (nothing
        when it cannot be read: a rebuild must still happen)."""
        try:
            return self.kernel.list_table(), self.kernel.read_counters()
        except (ApplyError, OSError) as exc:
            log.warning("the table's learnt state cannot be read (%s); the rebuild starts it afresh", exc)
            return None, {}

    def _store_units(self, compiled: dict[str, compiler.UnitRuleset], changed: list[str] | None) -> None:
        keys = set(compiled) if changed is None else set(changed)
        rows = [
            KernelUnit(
                key=k, name=compiled[k].name, digest=compiled[k].digest, objects_json=compiled[k].objects.to_json()
            )
            for k in sorted(keys)
            if k in compiled
        ]
        with transaction.atomic():
            if changed is None:
                KernelUnit.objects.exclude(key__in=list(compiled)).delete()
            else:
                KernelUnit.objects.filter(key__in=[k for k in keys if k not in compiled]).delete()
            KernelUnit.objects.bulk_create(
                rows,
                update_conflicts=True,
                unique_fields=["key"],
                update_fields=["name", "digest", "objects_json", "applied_at"],
                batch_size=500,
            )
        if changed is None:
            CACHE.replace_applied({k: u.objects for k, u in compiled.items()})
        else:
            CACHE.record_applied({k: compiled[k].objects if k in compiled else None for k in keys})

    def _record(self, g: int, kind: str, reason: str, started: float, outcome: Outcome, compiled: dict) -> ApplyRun:
        """The run and each farm's outcome, then the fingerprints left to read (:meth:`_read_back`): the
        run's duration is from its start to the kernel holding the change, bookkeeping after it aside."""
        duration_ms = (time.monotonic() - started) * 1000
        failed = outcome.failed
        with transaction.atomic():
            run = ApplyRun.objects.create(
                generation=g,
                kind=kind,
                reason=reason[:40],
                started=timezone.now() - timezone.timedelta(milliseconds=duration_ms),
                duration_ms=duration_ms,
                ok=not failed and not outcome.error,
                error=outcome.error or "\n".join(f"farm {fid}: {msg}" for fid, msg in sorted(failed.items())),
                digest=configuration_digest(compiled),
                farms_changed=len([k for k in outcome.changed if not k.startswith(compiler.names.HOOK_PREFIX)]),
                commands=outcome.commands,
                writer=outcome.writer,
                drift=outcome.drift,
            )
            pending = Farm.objects.exclude(mode__in=L7_MODES).filter(
                config_generation__lte=g, applied_generation__lt=F("config_generation")
            )
            pending.exclude(id__in=[*failed, *outcome.held]).update(applied_generation=g, apply_error="")
            for fid, message in failed.items():
                Farm.objects.filter(id=fid, config_generation__lte=g).update(
                    apply_error=message, failed_generation=g, applied_generation=0
                )
        log.info("%s", run)
        self._read_back(outcome)
        return run


def _id(key: Hashable) -> int:
    return int(str(key).split(":")[1])


def explain(flow_offload: bool, helper: str, message: str, capabilities: dict[str, bool]) -> str:
    """The kernel's words, plus what they mean when a known capability is missing."""
    if flow_offload and not capabilities.get("flowtable", True):
        return (
            "flow offload needs flowtable support in the kernel (CONFIG_NF_FLOW_TABLE), which this kernel "
            f"lacks; turn flow_offload off for this farm. Kernel said: {message}"
        )
    if helper and not capabilities.get(f"helper-{helper}", True):
        return f"the conntrack helper '{helper}' is not available in this kernel. Kernel said: {message}"
    return message
