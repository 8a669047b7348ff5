"""The hook units and the skeleton.

A base chain costs every packet through its hook, so each is a unit of its own (``hook:<chain>``) that
exists while some farm needs it, with only the rules those farms need. The skeleton is what is always
there and costs no packet anything: the shared maps farms add their elements to, and ``base``, the chain
that carries the skeleton's digest."""

from __future__ import annotations

from collections.abc import Callable, Collection

from compiler.ports import merge_ranges
from compiler.types import Json

from . import fragments as f
from .dispatch import EVERY_PORT, dispatch_keys, is_ranged
from .names import (
    LOCAL_IN,
    LOCAL_OUT,
    LOG_FORWARD_MAP,
    ROUTE_MARKS,
    TRAFFIC_DIR_MAP,
    TRAFFIC_DIRECTIONS,
    dispatch_map_name,
    hook_key,
    traffic_map,
)
from .schedulers import SHARDS, schedule_chain_name, schedules_map_name
from .spec import FarmSpec
from .stateless import stateless_replies_map, stateless_reply_keys
from .units import COMPILER_VERSION, Builder, UnitRuleset, digest_of

BASE_DIGEST_PREFIX = "lbweb-base:"
BASE_CHAIN = "base"  # a chain no packet reaches, whose one rule carries the skeleton's digest
PRIO_RAW = -300
PRIO_GUARD = -150
PRIO_DSTNAT = -100
PRIO_FILTER = 0
PRIO_SRCNAT = 100


def _dispatch_rules(prefix: str, wanted: Collection[tuple[int, bool]] | None = None) -> list[list[Json]]:
    """The lookups of one family of service maps: the (family, ranged) pairs of ``wanted``, or all four.
    The exact map comes first; a packet it finds goes to its farm and meets no further lookup."""
    rules = []
    for family, proto in ((4, "ip"), (6, "ip6")):
        key = f.concat(f.payload(proto, "daddr"), f.meta("l4proto"), f.payload("th", "dport"))
        for ranged in (False, True):
            if wanted is None or (family, ranged) in wanted:
                rules.append([f.vmap(key, "@" + dispatch_map_name(family, ranged, prefix))])
    return rules


def _service_maps(name: Callable[[int, bool], str], key_types: tuple[str, ...]) -> list[Json]:
    """The exact (hash) and the ranges (interval) map of one kind, for both families."""
    return [
        f.add("map", f.named_map(name(family, ranged), [addr, *key_types], "verdict", ["interval"] if ranged else None))
        for family, addr in ((4, "ipv4_addr"), (6, "ipv6_addr"))
        for ranged in (False, True)
    ]


def _services(prefix: str) -> list[Json]:
    return _service_maps(
        lambda family, ranged: dispatch_map_name(family, ranged, prefix), ("inet_proto", "inet_service")
    )


def _base_parts() -> tuple[list[Json], list[Json], str]:
    cmds: list[Json] = [*_services("dispatch"), *_services("local"), *_services("guard"), *_services("stateless")]
    for protocol in ("udp", "tcp"):
        replies = _service_maps(
            lambda family, ranged, p=protocol: stateless_replies_map(family, p, ranged), ("inet_service",)
        )
        cmds += replies
    cmds += [
        f.add("map", f.named_map("snat_farms", "mark", "verdict")),
        f.add("map", f.named_map("offload_marks", "mark", "verdict")),
        f.add("map", f.named_map(TRAFFIC_DIR_MAP, ["mark", "ct_dir"], "counter")),
        *(
            f.add("map", f.named_map(traffic_map(family, direction), [address, "mark"], "counter"))
            for family, address in ((4, "ipv4_addr"), (6, "ipv6_addr"))
            for direction in TRAFFIC_DIRECTIONS
        ),
        f.add("map", f.named_map(LOG_FORWARD_MAP, "mark", "verdict")),
        f.add("map", f.named_map(ROUTE_MARKS, "mark", "verdict")),
        *(f.add("map", f.named_map(schedules_map_name(n), "mark", "mark", ["interval"])) for n in SHARDS),
        f.add("chain", f.chain(BASE_CHAIN)),
    ]
    rules = [f.rule(BASE_CHAIN, [{"return": None}])]
    return cmds, rules, digest_of([COMPILER_VERSION, cmds, rules])


def farm_needs(farm: FarmSpec) -> frozenset[tuple]:
    """What of the hook units one farm needs: the worker keeps this beside each compiled farm, so
    the hooks follow a change without every farm's specification at hand."""
    if not farm.enabled or farm.mode not in ("snat", "dnat", "stlsdnat", "local"):
        return frozenset()
    ranges = {is_ranged(name) for name, _key in dispatch_keys(farm)}  # which of the service maps it uses
    if farm.mode == "stlsdnat":
        needs = {("stateless", farm.family, ranged) for ranged in ranges}
        needs |= {("stateless_port", lo, hi) for lo, hi in farm.ports or EVERY_PORT}
        for backend in farm.active_backends:
            for name, _key in stateless_reply_keys(farm, backend):
                needs.add(("stateless_replies", farm.family, farm.protocol, is_ranged(name)))
        return frozenset(needs)
    # Somewhere the forward hook's counter map sends the farm's packets, unless the farm does not count its bytes.
    counted = farm.count_bytes and (bool(farm.backends) or farm.fallback is not None)
    if farm.mode == "local":
        needs = {("local_traffic",)} if farm.count_bytes else set()
    else:
        needs = {("forward", farm.family, counted)}
    needs.add(("prerouting",))  # the NAT hook and the shared schedule chains (see _schedule_chains)
    if farm.policies or farm.tcp_strict or farm.rst_rtlimit or (farm.persistence and farm.sticky_backends):
        needs |= {("guard", farm.family, ranged) for ranged in ranges}  # the farm has a guard chain (see guard_chain)
    if farm.intra_connect:
        needs |= {("output", farm.family, ranged) for ranged in ranges}
    if farm.flow_offload:
        needs.add(("offload",))
    if farm.mode == "snat":
        needs.add(("postrouting",))
    if farm.fwmark or any(x.fwmark for x in farm.backends):
        needs.add(("route_marks",))
    if farm.log_forward:
        needs.add(("log_forward",))
    return frozenset(needs)


def compile_hooks(farms: list[FarmSpec]) -> dict[str, UnitRuleset]:
    """The base chains the farms need, each a unit of its own (see the module's docstring).

    A hook no farm needs is not there at all: packets do not traverse it.
    """
    return hooks_for(set().union(*(farm_needs(x) for x in farms)))


def hooks_for(needs: Collection[tuple]) -> dict[str, UnitRuleset]:
    """The hook units for the union of the farms' :func:`farm_needs`."""
    hooks: dict[str, tuple[str, str, int, list[list[Json]]]] = {}
    if ("prerouting",) in needs:
        hooks["prerouting"] = ("nat", "prerouting", PRIO_DSTNAT, _dispatch_rules("dispatch"))
    guard = {(n[1], n[2]) for n in needs if n[0] == "guard"}
    if guard or ("route_marks",) in needs:
        rules = []
        if ("route_marks",) in needs:  # nftlb's marks: every packet of a marked farm, before routing
            rules.append([f.vmap(f.ct("mark"), "@" + ROUTE_MARKS)])  # first: the guard lookups end the hook
        rules += _dispatch_rules("guard", guard)
        hooks["guard"] = ("filter", "prerouting", PRIO_GUARD, rules)
    stateless = {(n[1], n[2]) for n in needs if n[0] == "stateless"}
    if stateless:
        ports = _stateless_ports([n[1:] for n in needs if n[0] == "stateless_port"])
        rules = [[*ports, *rule] for rule in _dispatch_rules("stateless", stateless)]
        replies = {n[1:] for n in needs if n[0] == "stateless_replies"}
        for family, proto in ((4, "ip"), (6, "ip6")):
            for protocol in ("udp", "tcp"):
                for ranged in (False, True):
                    if (family, protocol, ranged) in replies:
                        key = f.concat(f.payload(proto, "saddr"), f.payload(protocol, "sport"))
                        protocol_match = f.match(f.meta("l4proto"), protocol)
                        rules.append(
                            [protocol_match, f.vmap(key, "@" + stateless_replies_map(family, protocol, ranged))]
                        )
        hooks["stateless"] = ("filter", "prerouting", PRIO_RAW, rules)
    local = {(n[1], n[2]) for n in needs if n[0] == "output"}
    if local:
        hooks["output"] = ("nat", "output", PRIO_DSTNAT, _dispatch_rules("local", local))
    rules = []
    if ("log_forward",) in needs:
        rules.append([f.vmap(f.ct("mark"), "@" + LOG_FORWARD_MAP)])  # nftlb's "forward" log
    if ("offload",) in needs:
        rules.append([f.vmap(f.ct("mark"), "@offload_marks")])  # offloaded flows leave the hook from here on
    for family, proto in ((4, "ip"), (6, "ip6")):
        if ("forward", family, True) in needs:
            for direction, (ct_direction, field) in TRAFFIC_DIRECTIONS.items():
                key = f.concat(f.payload(proto, field), f.ct("mark"))
                count = f.counter_map_ref(key, traffic_map(family, direction))
                rules.append([f.match(f.ct("direction"), ct_direction), count])
    if rules:
        hooks["forward"] = ("filter", "forward", PRIO_FILTER, rules)
    if ("postrouting",) in needs:
        hooks["postrouting"] = ("nat", "postrouting", PRIO_SRCNAT, [[f.vmap(f.ct("mark"), "@snat_farms")]])
    if ("local_traffic",) in needs:  # local farms' bytes: each packet counted once, where it meets its socket
        count = f.counter_map_ref(f.concat(f.ct("mark"), f.ct("direction")), TRAFFIC_DIR_MAP)
        hooks[LOCAL_IN] = ("filter", "input", PRIO_FILTER, [[f.match(f.ct("direction"), "original"), count]])
        hooks[LOCAL_OUT] = ("filter", "output", PRIO_FILTER, [[f.match(f.ct("direction"), "reply"), count]])
    units = {}
    for chain, (type_, hook, prio, rules) in hooks.items():
        b = Builder()
        b.creates.append(f.add("chain", f.base_chain(chain, type_=type_, hook=hook, prio=prio)))
        b.chains.append(chain)
        for expr in rules:
            b.rule(chain, expr)
        if chain == "stateless":
            _defragment(b)
        if chain == "prerouting":
            _schedule_chains(b)
        units[hook_key(chain)] = b.finish(hook_key(chain), chain, None)
    return units


STATELESS_PORTS_MAX = 256  # port ranges of stateless farms the raw hook tests before its lookup, at most


def _stateless_ports(ranges: Collection[tuple[int, int]]) -> list[Json]:
    """The match that comes before the ``stateless`` hook's dispatch lookups: the destination port is one
    a stateless farm serves. Every answer of a backend meets the dispatch lookup before the lookup that
    finds it, and its destination is the client's port: this one comparison (a set of ports when farms
    serve several) ends that miss sooner than the concatenated key's hash. No match at all when the farms
    serve every port, or more ranges than ``STATELESS_PORTS_MAX`` (an anonymous set the hook unit would
    carry whole into every change of it): the lookup alone then decides, as it always does in the end."""
    merged = merge_ranges(ranges)
    if merged == list(EVERY_PORT) or len(merged) > STATELESS_PORTS_MAX:
        return []
    values = [f.port_value(lo, hi) for lo, hi in merged]
    return [f.match(f.payload("th", "dport"), values[0] if len(values) == 1 else {"set": values})]


def _schedule_chains(b: Builder) -> None:
    """The chains ``schedule-<n>`` whose one rule looks up ``schedules-<n>`` (see shared_pick_base), in the
    ``prerouting`` hook unit rather than the skeleton: a ct expression anywhere in the table makes the
    kernel track every packet of the namespace, and a table of stateless farms alone needs none. Every
    farm that jumps to one is a NAT or local farm, which needs the hook unit."""
    for n in SHARDS:
        b.chain(schedule_chain_name(n))
        pick = {"map": {"key": f.ct("mark"), "data": "@" + schedules_map_name(n)}}
        b.rule(schedule_chain_name(n), [f.set_ct_mark(pick)])


DEFRAG_CHAIN = "stateless-defrag"


def _defragment(b: Builder) -> None:
    """A chain nothing jumps to, whose rules hold a ``tproxy`` statement per family: creating it makes the
    kernel register IP defragmentation in the namespace (``nf_defrag_ipv4_enable``, ``..._ipv6_``), so
    fragments are whole before the raw hook rewrites a stateless farm's datagrams (a fragment has no
    port to match). Not a ct expression, which registers conntrack too: every packet of the namespace
    would then pay for a conntrack lookup that a table of stateless farms alone never uses (the farms'
    datagrams are ``notrack``). NAT farms get both from their NAT statements. No packet ever evaluates
    these rules (tproxy is valid in prerouting only, and the chain is never reached)."""
    b.chain(DEFRAG_CHAIN)
    for family in ("ip", "ip6"):
        b.rule(DEFRAG_CHAIN, [f.match(f.meta("l4proto"), "udp"), {"tproxy": {"family": family, "port": 1}}])


def base_commands() -> list[Json]:
    """The skeleton every farm plugs into; its digest rides on the first rule."""
    cmds, rules, digest = _base_parts()
    rules[0]["comment"] = BASE_DIGEST_PREFIX + digest
    return cmds + [f.add("rule", r) for r in rules]


def base_digest() -> str:
    return _base_parts()[2]


def skeleton_objects() -> tuple[list[str], list[str]]:
    """The skeleton's base chains and its maps, by name."""
    cmds = _base_parts()[0]
    chains = [c["add"]["chain"]["name"] for c in cmds if "chain" in c["add"]]
    maps = [c["add"]["map"]["name"] for c in cmds if "map" in c["add"]]
    return chains, maps


def shared_maps() -> set[str]:
    """The skeleton's maps, where farms own elements."""
    return {c["add"]["map"]["name"] for c in _base_parts()[0] if "map" in c.get("add", {})}
