"""Direct server return at layer 2: the LB rewrites the destination MAC at netdev ingress and sends the
frame back out of the same interface; backends hold the VIP on loopback and answer the client directly.

Each DSR farm owns one table, ``table netdev lbweb-dsr-<farm>``, whose base chain hooks ingress of the
farm's interface. Owning a whole table makes a DSR change one ``delete table`` + ``add table`` inside
the transaction, touching no other farm. A TCP farm must hash (a flow always meets the same backend,
there is no conntrack to remember it); UDP may also use round robin or weights.

A UDP datagram larger than the path MTU arrives in fragments, and only the first carries the ports.
Later fragments of UDP to the VIP are therefore let in without a port match, and
every fragment of a datagram is sent to one backend, chosen from fields all fragments carry (the
farm's own hash when it uses only such fields). The backend reassembles the datagram.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from farms.types import Json

from . import fragments as f
from .spec import FarmSpec
from .units import COMPILER_VERSION, DIGEST_PREFIX, UnitObjects, UnitRuleset, digest_of

HASH_SEED = 0x6C627765
# Hash fields every fragment of a datagram carries; the ports are only in the first fragment.
WHOLE_DATAGRAM_FIELDS = {"srcip", "dstip", "srcmac", "dstmac"}


def table_name(farm: FarmSpec) -> str:
    return f"lbweb-dsr-{farm.name}"


def tables_of(unit: UnitRuleset) -> list[tuple[str, str]]:
    return list(unit.objects.tables)


def _ref(table: str, **extra: Any) -> Json:
    return {"family": "netdev", "table": table, **extra}


def _hash_fields(farm: FarmSpec) -> tuple[str, ...]:
    return farm.sched_param or ("srcip", "srcport")


def _hash_key(farm: FarmSpec, total: int) -> Json:
    l3 = "ip" if farm.family == 4 else "ip6"
    if farm.scheduler == "symhash":
        return {"symhash": {"mod": total, "offset": 0}}
    if farm.scheduler == "hash":
        expr = f.field_expr(l3, _hash_fields(farm))
        return {"jhash": {"mod": total, "seed": HASH_SEED, "offset": 0, "expr": expr}}
    return f.numgen("inc" if farm.scheduler == "rr" else "random", total)


def _fragment_key(farm: FarmSpec, total: int) -> Json:
    """Pick a backend from what every fragment of a datagram carries: the same one for all of them."""
    if farm.family == 4:
        expr = f.concat(f.payload("ip", "saddr"), f.payload("ip", "id"))
    elif farm.scheduler == "rr" or all(b.weight == 1 for b in farm.active_backends):
        # nft 1.0.6 cannot hash the fragment header's id; the flow label is in every fragment too ...
        expr = f.concat(f.payload("ip6", "saddr"), f.payload("ip6", "flowlabel"))
    else:  # ... but it refuses a hashed flow label as the key of an interval (weighted) map
        expr = f.payload("ip6", "saddr")
    return {"jhash": {"mod": total, "seed": HASH_SEED, "offset": 0, "expr": expr}}


def _needs_fragment_rule(farm: FarmSpec) -> bool:
    """Per-packet and port-based choices would split a fragmented datagram (a hash of addresses would not).
    TCP and SCTP connections avoid IP fragments (path MTU discovery) and must stay on their hashed backend."""
    if farm.protocol not in ("udp", "all"):
        return False
    return not (farm.scheduler == "hash" and set(_hash_fields(farm)) <= WHOLE_DATAGRAM_FIELDS)


def _fragmented(l3: str, *, first_too: bool) -> Json:
    """Fragments of a datagram (``first_too``: the first one as well, which alone carries the ports)."""
    if l3 == "ip":
        return f.match({"&": [f.payload("ip", "frag-off"), 0x3FFF if first_too else 0x1FFF]}, 0, "!=")
    if first_too:
        return f.match({"exthdr": {"name": "frag"}}, True)
    return f.match({"exthdr": {"name": "frag", "field": "frag-off"}}, 0, "!=")


def _mac_map(farm: FarmSpec, make_key: Callable[[FarmSpec, int], Json] = _hash_key) -> Json:
    backends = farm.active_backends
    if farm.scheduler == "rr":
        return {
            "map": {
                "key": make_key(farm, len(backends)),
                "data": {"set": [[i, b.mac] for i, b in enumerate(backends)]},
            }
        }
    elems, low = [], 0
    for b in backends:
        elems.append([f.port_value(low, low + b.weight - 1), b.mac])
        low += b.weight
    return {"map": {"key": make_key(farm, low), "data": {"set": elems}}}


def _forward(farm: FarmSpec, mac_map: Json) -> list[Json]:
    return [
        f.counter_ref(f"farm-{farm.name}"),
        {"mangle": {"key": f.payload("ether", "saddr"), "value": farm.interface_mac}},
        {"mangle": {"key": f.payload("ether", "daddr"), "value": mac_map}},
        {"fwd": {"dev": farm.interface}},
    ]


def compile_farm(farm: FarmSpec, key: str) -> UnitRuleset:
    table = table_name(farm)
    l3 = "ip" if farm.family == 4 else "ip6"
    chain = "farm"
    ingress = {
        "name": "ingress",
        "type": "filter",
        "hook": "ingress",
        "dev": farm.interface,
        "prio": -500,
        "policy": "accept",
    }
    creates: list[Json] = [
        f.add("table", {"family": "netdev", "name": table}),
        f.delete("table", {"family": "netdev", "name": table}),
        f.add("table", {"family": "netdev", "name": table}),
        f.add("counter", _ref(table, name=f"farm-{farm.name}")),
        f.add("chain", _ref(table, **ingress)),
        f.add("chain", _ref(table, name=chain)),
    ]
    match = [f.match(f.payload(l3, "daddr"), farm.vip)]
    if farm.protocol != "all":
        match.append(f.match(f.meta("l4proto"), farm.protocol))
        if farm.protocol == "udp":  # later fragments carry no port: they follow their first one (below)
            later = [*match, _fragmented(l3, first_too=False), f.jump(chain)]
            creates.append(f.add("rule", {**_ref(table, chain="ingress"), "expr": later}))
        match.append(f.match(f.payload("th", "dport"), {"set": [f.port_value(lo, hi) for lo, hi in farm.ports]}))
    creates.append(f.add("rule", {**_ref(table, chain="ingress"), "expr": [*match, f.jump(chain)]}))
    if farm.active_backends:
        if _needs_fragment_rule(farm):
            fragments = [_fragmented(l3, first_too=True), *_forward(farm, _mac_map(farm, _fragment_key))]
            creates.append(f.add("rule", {**_ref(table, chain=chain), "expr": fragments}))
        expr = _forward(farm, _mac_map(farm))
    else:
        expr = [f.counter_ref(f"farm-{farm.name}"), {"drop": None}]
    rule = {**_ref(table, chain=chain), "expr": expr}
    creates.append(f.add("rule", rule))
    digest = digest_of([COMPILER_VERSION, creates])
    rule["comment"] = DIGEST_PREFIX + digest
    objects = UnitObjects(tables=(("netdev", table),), digest=digest)
    return UnitRuleset(key, farm.name, objects, creates)
