"""The worker's unit cache: compiled units and what lbweb put in the kernel, kept across applies.

One change must cost one farm's compilation, not all of them: the cache keeps every farm's and
policy's compiled unit by the configuration generation it was compiled at, and a mirror of the
``KernelUnit`` rows (what the kernel holds, unit by unit). It belongs to whoever keeps it alive: the
worker keeps one per process (``tasks.worker_cache``), so it outlives each task's Applier; a test
makes its own. One cache for one kernel: the mirror is read from the rows once and then follows the
writes made through it, so a second cache writing the same kernel would miss them. A full resync
empties it; it refills from the database.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from django.db import transaction

import compiler
from compiler.units import UnitMap
from farms.choices import L7_MODES, FarmSchedulerChoices
from farms.models import ConfigGeneration, Farm, KernelUnit, Policy
from farms.specs import Snapshot, farm_spec, farms_queryset, policy_spec
from lbweb.db import read_snapshot

from .isolation import isolated_farms
from .localise import localise


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


class UnitCache:
    """The worker's memory of compiled units and of what it put in the kernel, so that one change costs
    one farm's compilation, not all of them. A farm is recompiled when its configuration generation moved
    (every write bumps it) or when it balances by least connections (its weights live outside the farm row).
    A full resync empties the cache (:meth:`reset`); it refills from the database.
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

    def store_applied(self, compiled: dict[str, compiler.UnitRuleset], changed: list[str] | None) -> None:
        """The kernel now holds ``compiled``'s version of the ``changed`` units (None: of every unit, and
        no other): the ``KernelUnit`` rows say so, and so does the mirror (:meth:`applied`)."""
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
            self.replace_applied({k: u.objects for k, u in compiled.items()})
        else:
            self.record_applied({k: compiled[k].objects if k in compiled else None for k in keys})

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
