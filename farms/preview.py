"""Preview: the exact nftables change an edit would cause, before it is saved.

Both sides are compiled by the pure compiler, with no kernel access: the farm as the database has it
now, and the farm as it would be after the edit. The commands are what the worker's incremental
apply sends for that difference (``compiler.incremental_document``), and the diff compares the two
compiled farms as pretty JSON. What only the worker's namespace knows (DSR MAC addresses, the
interfaces a flowtable hooks) is shown as a ``<placeholder>``.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field

from django.db.models import Count, Max

import compiler
from compiler.ports import parse_ports
from compiler.spec import BackendSpec, FarmSpec, PolicySpec
from compiler.types import Json

from .choices import L7_MODES, FarmModeChoices, FarmStateChoices
from .models import Backend, Farm, Policy
from .specs import farm_spec
from .summary import summarise


@dataclass
class Preview:
    """What saving an edit would send to the kernel."""

    commands: Json  # {"nftables": [...]}: the incremental transaction
    diff: str  # unified diff of the compiled farm, pretty JSON, now -> after
    changed: bool
    notes: list[str] = field(default_factory=list)
    summary: list[str] = field(default_factory=list)  # the change in plain words (farms/summary.py)

    @property
    def command_lines(self) -> str:
        """One command per line: what the kernel receives, in order."""
        return "\n".join(json.dumps(c, separators=(", ", ": ")) for c in self.commands["nftables"])

    def to_json(self) -> Json:
        return {
            "changed": self.changed,
            "summary": self.summary,
            "commands": self.commands,
            "diff": self.diff,
            "notes": self.notes,
        }


def _next_id(model) -> int:
    return (model.objects.aggregate(m=Max("id"))["m"] or 0) + 1


def _localised(spec: FarmSpec, notes: list[str]) -> FarmSpec:
    """Stand-ins for what the worker resolves in its namespace at apply time."""
    if spec.mode == FarmModeChoices.DSR and spec.enabled:
        backends = tuple(b if b.mac else dataclasses.replace(b, mac=f"<MAC of {b.address}>") for b in spec.backends)
        spec = dataclasses.replace(spec, interface_mac=f"<MAC of {spec.interface}>", backends=backends)
        notes.append("MAC addresses in <angle brackets> are resolved by the worker (ARP/ND) when it applies.")
    if spec.flow_offload:
        spec = dataclasses.replace(spec, offload_devices=("<every interface that is up>",))
        notes.append("The flowtable's devices are the appliance's interfaces that are up when the worker applies.")
    return spec


def _spec(farm: Farm, backends: Iterable[Backend], policies: Iterable[Policy], notes: list[str]) -> FarmSpec:
    """The compiler's view of ``farm`` with these backends and policies (saved or not)."""
    candidate = copy.copy(farm)
    candidate._prefetched_objects_cache = {
        "backends": list(backends),
        "policies": list(policies),
        "static_sessions": list(farm.static_sessions.all()) if farm.pk and not farm._state.adding else [],
    }
    return _localised(farm_spec(candidate), notes)


def _with_backends(farm: Farm, backends: Iterable[Backend]) -> Farm:
    """``farm`` (a copy) answering ``farm.backends.all()`` with ``backends``, saved or not."""
    farm._prefetched_objects_cache = {**getattr(farm, "_prefetched_objects_cache", {}), "backends": list(backends)}
    return farm


def _compiled(spec: FarmSpec | None) -> compiler.UnitRuleset | None:
    return compiler.compile_farm(spec) if spec is not None else None


def _pretty(unit: compiler.UnitRuleset | None) -> list[str]:
    if unit is None or not unit.creates:
        return []
    return json.dumps(unit.creates, indent=1).splitlines(keepends=True)


def _others_needs(farm_id: int) -> set:
    """What the other farms need of the hook units (``compiler.farm_needs``), from a few columns each."""
    needs: set = set()
    rows = Farm.objects.exclude(id=farm_id).exclude(mode__in=L7_MODES)
    rows = rows.annotate(backend_count=Count("backends", distinct=True), policy_count=Count("policies", distinct=True))
    fields = ("id", "name", "vip", "protocol", "mode", "state", "tcp_strict", "rst_rtlimit", "intra_connect")
    stateless = []
    counts = ("backend_count", "policy_count")
    for row in rows.values(*fields, "ports", "flow_offload", "count_bytes", "persistence", *counts):
        # A stateless farm's hook lookups follow its backends' ports: its whole spec, below.
        if row["mode"] == FarmModeChoices.STATELESS_DNAT:
            stateless.append(row["id"])
            continue
        backends = (BackendSpec(id=0, address=row["vip"]),) if row["backend_count"] else ()
        spec = FarmSpec(
            id=row["id"],
            name=row["name"],
            vip=row["vip"],
            protocol=row["protocol"],
            ports=tuple(parse_ports(row["ports"])),  # single ports and ranges use different service maps
            mode=row["mode"],
            enabled=row["state"] == FarmStateChoices.UP,
            tcp_strict=row["tcp_strict"],
            rst_rtlimit=row["rst_rtlimit"],
            intra_connect=row["intra_connect"],
            flow_offload=row["flow_offload"],
            count_bytes=row["count_bytes"],
            persistence=tuple(row["persistence"].split()),
            policies=(PolicySpec(id=0, name="any"),) if row["policy_count"] else (),
            backends=backends,
        )
        needs |= compiler.farm_needs(spec)
    for farm in Farm.objects.filter(id__in=stateless).prefetch_related("backends", "policies"):
        needs |= compiler.farm_needs(farm_spec(farm))
    return needs


def http_compare(farm_id: int, old: FarmSpec | None, candidate: Farm | None, notes: list[str]) -> Preview:
    """An HTTP farm's edit: nothing for the kernel; the diff is HAProxy's configuration (l7/specs.py)."""
    from django.conf import settings

    from l7.specs import change_diff

    diff, changed = change_diff(farm_id, candidate, settings.LBWEB_HAPROXY_CONF_DIR)
    notes.append(
        "HTTP farms are served by HAProxy: nothing changes in the kernel; the diff is HAProxy's configuration."
    )
    new = _spec(candidate, candidate.backends.all(), [], []) if candidate is not None else None
    return Preview({"nftables": []}, diff, changed, list(dict.fromkeys(notes)), summarise(old, new))


def _is_http(*farms: Farm | None) -> bool:
    return any(f is not None and f.mode in L7_MODES for f in farms)


def compare(key: str, old: FarmSpec | None, new: FarmSpec | None, notes: list[str]) -> Preview:
    """The incremental commands and the diff between two versions of one farm (None: absent), with the
    hooks that come or go with it (the first SNAT farm brings ``postrouting``, say)."""
    before, after = _compiled(old), _compiled(new)
    old_objects = {key: before.objects} if before is not None else {}
    new_units = {key: after} if after is not None else {}
    others = _others_needs(int(key.split(":")[1]))
    for spec, side in ((old, "old"), (new, "new")):
        hooks = compiler.hooks_for(others | (compiler.farm_needs(spec) if spec is not None else set()))
        if side == "old":
            old_objects.update({k: u.objects for k, u in hooks.items()})
        else:
            new_units.update(hooks)
    document, changed = compiler.incremental_document(old_objects, new_units)
    diff = "".join(difflib.unified_diff(_pretty(before), _pretty(after), "now", "after this change", n=3))
    return Preview(document, diff, bool(changed), list(dict.fromkeys(notes)), summarise(old, new))


def _current_spec(farm: Farm, notes: list[str]) -> FarmSpec:
    return _spec(farm, farm.backends.all(), farm.policies.all(), notes)


def farm_change(farm: Farm | None, values: dict, policies: Iterable[Policy] | None = None) -> Preview:
    """Creating a farm (``farm`` None) or changing its fields (and policies) to ``values``."""
    notes: list[str] = []
    if farm is None:
        candidate = Farm(id=_next_id(Farm))
        notes.append(
            f"A new farm is shown with id {candidate.id}, the id it will most likely get: its conntrack mark is its id."
        )
        old, backends, current_policies = None, [], []
    else:
        candidate = copy.copy(farm)
        old = _current_spec(farm, notes)
        backends, current_policies = list(farm.backends.all()), list(farm.policies.all())
    for name, value in values.items():
        setattr(candidate, name, value)
    chosen = list(policies) if policies is not None else current_policies
    if _is_http(farm, candidate):
        _with_backends(candidate, backends)
        return http_compare(candidate.id, old, candidate, notes)
    new = _spec(candidate, backends, chosen, notes)
    return compare(compiler.farm_key(candidate.id), old, new, notes)


def farm_removal(farm: Farm) -> Preview:
    """Deleting a farm: every object it owns leaves the kernel."""
    notes: list[str] = []
    if _is_http(farm):
        return http_compare(farm.id, _current_spec(farm, notes), None, notes)
    return compare(compiler.farm_key(farm.id), _current_spec(farm, notes), None, notes)


def backend_change(farm: Farm, backend: Backend | None, values: dict) -> Preview:
    """Adding a backend to ``farm`` (``backend`` None) or changing one."""
    notes: list[str] = []
    current = list(farm.backends.all())
    if backend is None:
        candidate = Backend(farm=farm, id=_next_id(Backend))
        notes.append(f"A new backend is shown with id {candidate.id}, the id it will most likely get.")
    else:
        candidate = copy.copy(backend)
    for name, value in values.items():
        setattr(candidate, name, value)
    others = [b for b in current if b.pk != candidate.pk]
    new_backends = sorted([*others, candidate], key=lambda b: b.id)
    policies = list(farm.policies.all())
    old = _current_spec(farm, notes)
    if _is_http(farm):
        return http_compare(farm.id, old, _with_backends(copy.copy(farm), new_backends), notes)
    new = _spec(farm, new_backends, policies, notes)
    return compare(compiler.farm_key(farm.id), old, new, notes)


def backends_change(farm: Farm, backends: Iterable[Backend]) -> Preview:
    """Replacing the farm's backends by ``backends`` at once (the farm page's inline editor): changed rows
    carry their id, new ones none (shown with the ids they will most likely get), missing ones are removed."""
    notes: list[str] = []
    next_id = _next_id(Backend)
    candidates = []
    for backend in backends:
        if backend.pk is None:
            backend = copy.copy(backend)
            backend.id = next_id
            next_id += 1
            notes.append("New backends are shown with the ids they will most likely get.")
        candidates.append(backend)
    old = _current_spec(farm, notes)
    if _is_http(farm):
        return http_compare(farm.id, old, _with_backends(copy.copy(farm), candidates), notes)
    new = _spec(farm, sorted(candidates, key=lambda b: b.id), farm.policies.all(), notes)
    return compare(compiler.farm_key(farm.id), old, new, notes)


def backend_removal(backend: Backend) -> Preview:
    """Removing a backend from its farm."""
    farm = backend.farm
    notes: list[str] = []
    remaining = [b for b in farm.backends.all() if b.pk != backend.pk]
    if _is_http(farm):
        return http_compare(farm.id, _current_spec(farm, notes), _with_backends(copy.copy(farm), remaining), notes)
    new = _spec(farm, remaining, farm.policies.all(), [])
    return compare(compiler.farm_key(farm.id), _current_spec(farm, notes), new, notes)
