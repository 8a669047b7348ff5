"""Direct server return at layer 2: the LB rewrites the destination MAC at netdev ingress and sends the
frame back out of the same interface; backends hold the VIP on loopback and answer the client directly.

Each DSR farm owns one table, ``table netdev lbweb-dsr-<farm>``, whose base chain hooks ingress of the
farm's interface. Owning a whole table makes a DSR change one ``delete table`` + ``add table`` inside
the transaction, touching no other farm. A TCP farm must hash (a flow always meets the same backend,
there is no conntrack to remember it); UDP may also use round robin or weights.
"""

from __future__ import annotations

from typing import Any

from . import fragments as f
from .spec import FarmSpec
from .units import COMPILER_VERSION, DIGEST_PREFIX, UnitObjects, UnitRuleset, digest_of

HASH_SEED = 0x6C627765
Json = dict[str, Any]


def table_name(farm: FarmSpec) -> str:
    return f"lbweb-dsr-{farm.name}"


def tables_of(unit: UnitRuleset) -> list[tuple[str, str]]:
    return list(unit.objects.tables)


def _ref(table: str, **extra: Any) -> Json:
    return {"family": "netdev", "table": table, **extra}


def _hash_key(farm: FarmSpec, total: int) -> Json:
    l3 = "ip" if farm.family == 4 else "ip6"
    source = {
        "srcip": f.payload(l3, "saddr"),
        "dstip": f.payload(l3, "daddr"),
        "srcport": f.payload("th", "sport"),
        "dstport": f.payload("th", "dport"),
        "srcmac": f.payload("ether", "saddr"),
        "dstmac": f.payload("ether", "daddr"),
    }
    if farm.scheduler == "symhash":
        return {"symhash": {"mod": total, "offset": 0}}
    if farm.scheduler == "hash":
        parts = [source[name] for name in (farm.sched_param or ("srcip", "srcport"))]
        expr = parts[0] if len(parts) == 1 else f.concat(*parts)
        return {"jhash": {"mod": total, "seed": HASH_SEED, "offset": 0, "expr": expr}}
    return f.numgen("inc" if farm.scheduler == "rr" else "random", total)


def _mac_map(farm: FarmSpec) -> Json:
    backends = farm.active_backends
    if farm.scheduler == "rr":
        return {
            "map": {
                "key": _hash_key(farm, len(backends)),
                "data": {"set": [[i, b.mac] for i, b in enumerate(backends)]},
            }
        }
    elems, low = [], 0
    for b in backends:
        elems.append([f.port_value(low, low + b.weight - 1), b.mac])
        low += b.weight
    return {"map": {"key": _hash_key(farm, low), "data": {"set": elems}}}


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
        ports = [f.port_value(lo, hi) for lo, hi in farm.ports]
        match += [f.match(f.meta("l4proto"), farm.protocol), f.match(f.payload("th", "dport"), {"set": ports})]
    creates.append(f.add("rule", {**_ref(table, chain="ingress"), "expr": [*match, f.jump(chain)]}))
    if farm.active_backends:
        tail = [
            {"mangle": {"key": f.payload("ether", "saddr"), "value": farm.interface_mac}},
            {"mangle": {"key": f.payload("ether", "daddr"), "value": _mac_map(farm)}},
            {"fwd": {"dev": farm.interface}},
        ]
    else:
        tail = [{"drop": None}]
    rule = {**_ref(table, chain=chain), "expr": [{"counter": f"farm-{farm.name}"}, *tail]}
    creates.append(f.add("rule", rule))
    digest = digest_of([COMPILER_VERSION, creates])
    rule["comment"] = DIGEST_PREFIX + digest
    objects = UnitObjects(tables=(("netdev", table),), digest=digest)
    return UnitRuleset(key, farm.name, objects, creates)
