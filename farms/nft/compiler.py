"""Pure compiler: farm specs in, deterministic nftables JSON out.

Layout of the one table lbweb owns (``table inet lbweb``):

* ``prerouting`` (nat, dstnat) looks every new connection up in a verdict map
  keyed by ``daddr . l4proto . dport`` (``dispatch4``/``dispatch6``) or by
  ``daddr`` alone for protocol ``all`` (``dispatch4_any``/``dispatch6_any``)
  and jumps to the farm's chain: one lookup whatever the number of farms.
* ``farm-<name>`` counts the connection, sets the farm's conntrack mark and
  picks a backend with ``numgen`` through an anonymous verdict map.
* ``be-<name>-<id>`` counts and DNATs to one backend.
* ``postrouting`` (nat, srcnat) masquerades connections whose ct mark is in
  ``snat_marks`` (farms in SNAT mode) and nothing else.
* ``traffic`` (filter, forward) sees every packet, not only the first one of
  a connection: one lookup of the ct mark in ``traffic_marks`` jumps to the
  farm's ``traffic-<name>`` chain, which counts bytes and packets into
  ``traffic-in-<name>`` (client to backend) or ``traffic-out-<name>``
  (backend to client) by ct direction, and into ``traffic-be-<name>-<id>``
  for the backend the connection was sent to (its reply source address).
  The ``farm-``/``be-`` counters in the nat chains count new connections.

Every farm's objects are listed in a :class:`FarmRuleset` so that a change
can replace one farm without touching the others, and each farm chain's
rule carries ``lbweb:<digest>`` so the kernel itself tells which version of
a farm it runs.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from . import fragments as f
from .spec import FarmSpec

COMPILER_VERSION = "1"
DIGEST_PREFIX = "lbweb:"
BASE_DIGEST_PREFIX = "lbweb-base:"
PRIO_DSTNAT = -100
PRIO_SRCNAT = 100
PRIO_FILTER = 0
TRAFFIC_MAP = "traffic_marks"

Json = dict[str, Any]


def canonical(document: Any) -> str:
    """The one serialisation used for digests and for byte-identical output."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"))


def digest_of(document: Any) -> str:
    return hashlib.sha256(canonical(document).encode()).hexdigest()[:16]


def farm_chain_name(farm: FarmSpec) -> str:
    return f"farm-{farm.name}"


def backend_chain_name(farm: FarmSpec, backend_id: int) -> str:
    return f"be-{farm.name}-{backend_id}"


def traffic_chain_name(farm: FarmSpec) -> str:
    return traffic_chain_name_of(farm.name)


def traffic_chain_name_of(farm_name: str) -> str:
    return f"traffic-{farm_name}"


def traffic_counter_name(farm_name: str, direction: str) -> str:
    """Bytes of one farm in one direction: ``in`` (client to backend) or ``out`` (backend to client)."""
    return f"traffic-{direction}-{farm_name}"


def backend_traffic_counter_name(farm_name: str, backend_id: int) -> str:
    """Bytes of one backend, both directions."""
    return f"traffic-be-{farm_name}-{backend_id}"


def dispatch_map_name(family: int, protocol: str) -> str:
    return f"dispatch{family}_any" if protocol == "all" else f"dispatch{family}"


@dataclass(frozen=True)
class FarmObjects:
    """The kernel objects one farm owns: what must be removed to remove it."""

    chains: tuple[str, ...] = ()
    counters: tuple[str, ...] = ()
    dispatch: tuple[tuple[str, Any], ...] = ()
    snat_mark: int | None = None
    traffic_mark: int | None = None
    digest: str = ""

    def to_json(self) -> Json:
        return {
            "chains": list(self.chains),
            "counters": list(self.counters),
            "dispatch": [[name, key] for name, key in self.dispatch],
            "snat_mark": self.snat_mark,
            "traffic_mark": self.traffic_mark,
            "digest": self.digest,
        }

    @classmethod
    def from_json(cls, data: Json) -> FarmObjects:
        return cls(
            chains=tuple(data.get("chains", ())),
            counters=tuple(data.get("counters", ())),
            dispatch=tuple((name, key) for name, key in data.get("dispatch", ())),
            snat_mark=data.get("snat_mark"),
            traffic_mark=data.get("traffic_mark"),
            digest=data.get("digest", ""),
        )


@dataclass(frozen=True)
class FarmRuleset:
    """A compiled farm: its objects and the commands that create them."""

    farm_id: int
    name: str
    objects: FarmObjects
    creates: list[Json] = field(default_factory=list)

    @property
    def digest(self) -> str:
        return self.objects.digest


def _dispatch_keys(farm: FarmSpec) -> tuple[tuple[str, Any], ...]:
    map_name = dispatch_map_name(farm.family, farm.protocol)
    if farm.protocol == "all":
        return ((map_name, farm.vip),)
    return tuple((map_name, f.concat(farm.vip, farm.protocol, f.port_value(lo, hi))) for lo, hi in farm.ports)


def _backend_rule(farm: FarmSpec, backend) -> list[Json]:
    nat: Json = {"family": "ip" if farm.family == 4 else "ip6", "addr": backend.address}
    expr: list[Json] = [f.counter_ref(backend_chain_name(farm, backend.id))]
    if backend.port is not None:
        expr.append(f.match(f.meta("l4proto"), farm.protocol))
        nat["port"] = backend.port
    expr.append({"dnat": nat})
    return expr


def _scheduler_map(farm: FarmSpec) -> Json:
    backends = farm.active_backends
    if farm.scheduler == "weight":
        total = sum(b.weight for b in backends)
        elems, low = [], 0
        for b in backends:
            high = low + b.weight - 1
            elems.append([f.port_value(low, high), f.jump(backend_chain_name(farm, b.id))])
            low = high + 1
        return f.vmap(f.numgen("random", total), {"set": elems})
    elems = [[i, f.jump(backend_chain_name(farm, b.id))] for i, b in enumerate(backends)]
    return f.vmap(f.numgen("inc", len(backends)), {"set": elems})


def _traffic_rules(farm: FarmSpec) -> list[list[Json]]:
    """Count every packet of the farm by direction, then by backend (ports first: they are the narrower match).

    Disabled backends are counted too: their established connections still carry traffic.
    """
    directions = {d: traffic_counter_name(farm.name, d) for d in ("in", "out")}
    rules = [[f.counter_map(f.ct("direction"), {"original": directions["in"], "reply": directions["out"]})]]
    address_key = "ip saddr" if farm.family == 4 else "ip6 saddr"
    for b in sorted(farm.backends, key=lambda b: (b.port is None, b.id)):
        expr: list[Json] = []
        if b.port is not None:
            expr.append(f.match(f.meta("l4proto"), farm.protocol))
        expr.append(f.match(f.ct(address_key, "reply"), b.address))
        if b.port is not None:
            expr.append(f.match(f.ct("proto-src", "reply"), b.port))
        expr += [f.counter_ref(backend_traffic_counter_name(farm.name, b.id)), {"return": None}]
        rules.append(expr)
    return rules


def compile_farm(farm: FarmSpec) -> FarmRuleset:
    """Compile one farm; a disabled farm owns nothing in the kernel."""
    if not farm.enabled:
        return FarmRuleset(farm.id, farm.name, FarmObjects(digest=digest_of(["off", COMPILER_VERSION])))
    farm_chain = farm_chain_name(farm)
    backends = farm.active_backends
    be_chains = [backend_chain_name(farm, b.id) for b in backends]
    traffic_chain = traffic_chain_name(farm)
    traffic_counters = [traffic_counter_name(farm.name, d) for d in ("in", "out")]
    traffic_counters += [
        backend_traffic_counter_name(farm.name, b.id) for b in sorted(farm.backends, key=lambda b: b.id)
    ]
    counters = [farm_chain, *be_chains, *traffic_counters]
    dispatch = _dispatch_keys(farm)
    snat_mark = farm.mark if farm.mode == "snat" else None

    creates: list[Json] = [f.add("counter", f.counter(name)) for name in counters]
    creates += [f.add("chain", f.chain(name)) for name in [farm_chain, *be_chains, traffic_chain]]
    creates += [
        f.add("rule", f.rule(name, _backend_rule(farm, b))) for name, b in zip(be_chains, backends, strict=True)
    ]
    head = [f.counter_ref(farm_chain), f.set_ct_mark(farm.mark)]
    # No enabled backend: drop instead of letting the VIP fall through to the host.
    tail = _scheduler_map(farm) if backends else {"drop": None}
    farm_rule = f.rule(farm_chain, [*head, tail])
    creates.append(f.add("rule", farm_rule))
    for map_name, key in dispatch:
        creates.append(f.add("element", f.element(map_name, [[key, f.jump(farm_chain)]])))
    if snat_mark is not None:
        creates.append(f.add("element", f.element("snat_marks", [snat_mark])))
    creates += [f.add("rule", f.rule(traffic_chain, expr)) for expr in _traffic_rules(farm)]
    creates.append(f.add("element", f.element(TRAFFIC_MAP, [[farm.mark, f.jump(traffic_chain)]])))

    digest = digest_of([COMPILER_VERSION, creates])
    farm_rule["comment"] = DIGEST_PREFIX + digest
    objects = FarmObjects(
        chains=(farm_chain, *be_chains, traffic_chain),
        counters=tuple(counters),
        dispatch=dispatch,
        snat_mark=snat_mark,
        traffic_mark=farm.mark,
        digest=digest,
    )
    return FarmRuleset(farm.id, farm.name, objects, creates)


def _dispatch_rules() -> list[list[Json]]:
    rules = []
    for family, proto in ((4, "ip"), (6, "ip6")):
        key = f.concat(f.payload(proto, "daddr"), f.meta("l4proto"), f.payload("th", "dport"))
        rules.append([f.vmap(key, "@" + dispatch_map_name(family, "tcp"))])
    for family, proto in ((4, "ip"), (6, "ip6")):
        rules.append([f.vmap(f.payload(proto, "daddr"), "@" + dispatch_map_name(family, "all"))])
    return rules


def _base_parts() -> tuple[list[Json], list[Json], str]:
    cmds: list[Json] = [
        f.add(
            "map",
            f.named_map(
                "dispatch4",
                ["ipv4_addr", "inet_proto", "inet_service"],
                "verdict",
                ["interval"],
            ),
        ),
        f.add(
            "map",
            f.named_map(
                "dispatch6",
                ["ipv6_addr", "inet_proto", "inet_service"],
                "verdict",
                ["interval"],
            ),
        ),
        f.add("map", f.named_map("dispatch4_any", "ipv4_addr", "verdict")),
        f.add("map", f.named_map("dispatch6_any", "ipv6_addr", "verdict")),
        f.add("set", f.named_set("snat_marks", "mark")),
        f.add("map", f.named_map(TRAFFIC_MAP, "mark", "verdict")),
        f.add(
            "chain",
            f.base_chain("prerouting", type_="nat", hook="prerouting", prio=PRIO_DSTNAT),
        ),
        f.add(
            "chain",
            f.base_chain("postrouting", type_="nat", hook="postrouting", prio=PRIO_SRCNAT),
        ),
        f.add("chain", f.base_chain("traffic", type_="filter", hook="forward", prio=PRIO_FILTER)),
    ]
    rules = [f.rule("prerouting", expr) for expr in _dispatch_rules()]
    rules.append(f.rule("postrouting", [f.match(f.ct("mark"), "@snat_marks"), {"masquerade": None}]))
    rules.append(f.rule("traffic", [f.vmap(f.ct("mark"), "@" + TRAFFIC_MAP)]))
    return cmds, rules, digest_of([COMPILER_VERSION, cmds, rules])


def base_commands() -> list[Json]:
    """The skeleton every farm plugs into; its digest rides on the first rule."""
    cmds, rules, digest = _base_parts()
    rules[0]["comment"] = BASE_DIGEST_PREFIX + digest
    return cmds + [f.add("rule", r) for r in rules]


def base_digest() -> str:
    return _base_parts()[2]


def document(commands: list[Json]) -> Json:
    return {"nftables": commands}


def full_document(farms: list[FarmSpec]) -> Json:
    """Everything from nothing, in one transaction: boot and drift repair."""
    cmds = [
        f.add("table", f.table()),
        f.delete("table", f.table()),
        f.add("table", f.table()),
    ]
    cmds += base_commands()
    for farm in sorted(farms, key=lambda x: x.id):
        cmds += compile_farm(farm).creates
    return document(cmds)


def removal_commands(old: FarmObjects, keep_chains: set[str], keep_counters: set[str]) -> list[Json]:
    """Unhook one farm's applied objects; chains and counters still wanted are emptied, not deleted.

    Keeping a counter that the new ruleset names again keeps its figures.
    """
    cmds = [f.delete("element", f.element(map_name, [key])) for map_name, key in old.dispatch]
    if old.snat_mark is not None:
        cmds.append(f.delete("element", f.element("snat_marks", [old.snat_mark])))
    if old.traffic_mark is not None:
        cmds.append(f.delete("element", f.element(TRAFFIC_MAP, [old.traffic_mark])))
    cmds += [f.flush("chain", f.chain(name)) for name in old.chains]
    cmds += [f.delete("chain", f.chain(name)) for name in old.chains if name not in keep_chains]
    cmds += [f.delete("counter", f.counter(name)) for name in old.counters if name not in keep_counters]
    return cmds


def changed_farms(old: dict[int, FarmObjects], new: dict[int, FarmRuleset]) -> list[int]:
    def digest(side: dict, fid: int) -> str | None:
        return side[fid].digest if fid in side else None

    return sorted(fid for fid in set(old) | set(new) if digest(old, fid) != digest(new, fid))


def incremental_document(old: dict[int, FarmObjects], new: dict[int, FarmRuleset]) -> tuple[Json, list[int]]:
    """Commands for the farms whose digest changed, and those farm ids.

    Only the changed farms' chains, counters and map elements are named, so
    every other farm (and every established connection) is left alone.
    All removals come first, so a renamed farm or a port moved between farms
    is re-added within the same transaction.
    """
    changed = changed_farms(old, new)
    keep_chains = {c for fid in changed if fid in new for c in new[fid].objects.chains}
    keep_counters = {c for fid in changed if fid in new for c in new[fid].objects.counters}
    cmds: list[Json] = []
    for fid in changed:
        if fid in old:
            cmds += removal_commands(old[fid], keep_chains, keep_counters)
    for fid in changed:
        if fid in new:
            cmds += new[fid].creates
    return document(cmds), changed
