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

import json
from collections.abc import Callable
from typing import Any

from compiler.types import Json

from . import fragments as f
from .logs import log_statements
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
    elif all(b.weight == 1 for b in farm.active_backends):  # single values, not intervals
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
    elems, low = [], 0  # every scheduler is weighted, round robin too (as nftlb)
    for b in backends:
        elems.append([f.port_value(low, low + b.weight - 1), b.mac])
        low += b.weight
    return {"map": {"key": make_key(farm, low), "data": {"set": elems}}}


def _out_device(farm: FarmSpec) -> Json | str:
    """nftlb's ``oface``: frames leave by the farm's oface (else its interface), or by the oface of the
    backend they go to when backends sit behind different interfaces."""
    default = farm.oface or farm.interface
    backends = farm.active_backends
    if all((b.oface or default) == default for b in backends):
        return default
    devices = [[b.mac, b.oface or default] for b in backends]
    return {"map": {"key": f.payload("ether", "daddr"), "data": {"set": devices}}}


def _forward(farm: FarmSpec, mac_map: Json) -> list[Json]:
    return [
        f.counter_ref(f"farm-{farm.name}"),
        {"mangle": {"key": f.payload("ether", "saddr"), "value": farm.ether_addr or farm.interface_mac}},
        {"mangle": {"key": f.payload("ether", "daddr"), "value": mac_map}},
        {"fwd": {"dev": _out_device(farm)}},
    ]


def _key_type(farm: FarmSpec) -> str | list[str]:
    address = "ipv4_addr" if farm.family == 4 else "ipv6_addr"
    types = {"srcip": address, "srcport": "inet_service", "srcmac": "ether_addr"}
    parts = [types[name] for name in farm.persistence]
    return parts[0] if len(parts) == 1 else parts


def _persistence(farm: FarmSpec, table: str, chain: str, creates: list[Json]) -> list[Json]:
    """nftlb's DSR persistence, in the farm's netdev table: a client (the persistence key) goes back to
    the backend it went to, static sessions first; every frame of the client refreshes its entry. One
    set per backend (libnftables 1.0's JSON cannot update a map from the packet path), and one chain per
    backend that records the client and forwards the frame. Returns the scheduler's rule."""
    l3 = "ip" if farm.family == 4 else "ip6"
    key = f.field_expr(l3, farm.persistence)
    statics: dict[int, list] = {}
    for session in farm.sessions:
        client = session.client[0] if len(session.client) == 1 else f.concat(*session.client)
        statics.setdefault(session.backend_id, []).append(client)
    sticky = [b for b in farm.sticky_backends if b.mac]
    lookups: list[Json] = []
    learnt: list[Json] = []
    for backend in sticky:
        persist, static, target = f"persist-{backend.id}", f"static-{backend.id}", f"be-{backend.id}"
        timeout = {"flags": ["timeout"], "timeout": farm.persist_ttl, "size": 65535}
        creates.append(f.add("set", _ref(table, name=persist, type=_key_type(farm), **timeout)))
        creates.append(f.add("chain", _ref(table, name=target)))
        forward = [
            f.counter_ref(f"farm-{farm.name}"),
            {"set": {"op": "update", "elem": key, "set": "@" + persist}},
            {"mangle": {"key": f.payload("ether", "saddr"), "value": farm.ether_addr or farm.interface_mac}},
            {"mangle": {"key": f.payload("ether", "daddr"), "value": backend.mac}},
            {"fwd": {"dev": backend.oface or farm.oface or farm.interface}},
        ]
        creates.append(f.add("rule", {**_ref(table, chain=target), "expr": forward}))
        if backend.id in statics:
            creates.append(f.add("set", _ref(table, name=static, type=_key_type(farm))))
            elements = sorted(statics[backend.id], key=lambda e: json.dumps(e, sort_keys=True))
            creates.append(f.add("element", _ref(table, name=static, elem=elements)))
            lookups.append([f.match(key, "@" + static), {"goto": {"target": target}}])
        learnt.append([f.match(key, "@" + persist), {"goto": {"target": target}}])
    for expr in lookups + learnt:
        creates.append(f.add("rule", {**_ref(table, chain=chain), "expr": expr}))
    active = [b for b in farm.active_backends if b.mac]
    elems, low = [], 0
    for b in active:
        elems.append([f.port_value(low, low + b.weight - 1), {"goto": {"target": f"be-{b.id}"}}])
        low += b.weight
    return [f.vmap(_hash_key(farm, low), {"set": elems})]


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
    if farm.protocol == "all":  # nftlb's "all": TCP, UDP and SCTP, never ICMP
        match.append(f.match(f.meta("l4proto"), {"set": ["tcp", "udp", "sctp"]}))
    else:
        match.append(f.match(f.meta("l4proto"), farm.protocol))
    if farm.protocol == "udp" or (farm.protocol == "all" and farm.ports):  # later fragments carry no port
        later = [*match, _fragmented(l3, first_too=False), f.jump(chain)]
        creates.append(f.add("rule", {**_ref(table, chain="ingress"), "expr": later}))
    if farm.ports:
        match.append(f.match(f.payload("th", "dport"), {"set": [f.port_value(lo, hi) for lo, hi in farm.ports]}))
    creates.append(f.add("rule", {**_ref(table, chain="ingress"), "expr": [*match, f.jump(chain)]}))
    if farm.log:  # nftlb's "input" log of a DSR farm: every frame to the VIP, at ingress
        creates.append(f.add("rule", {**_ref(table, chain=chain), "expr": log_statements(farm, "IN")}))
    if farm.active_backends:
        if _needs_fragment_rule(farm):
            fragments = [_fragmented(l3, first_too=True), *_forward(farm, _mac_map(farm, _fragment_key))]
            creates.append(f.add("rule", {**_ref(table, chain=chain), "expr": fragments}))
        sticky = farm.persistence
        expr = _persistence(farm, table, chain, creates) if sticky else _forward(farm, _mac_map(farm))
    else:
        expr = [f.counter_ref(f"farm-{farm.name}"), {"drop": None}]
    rule = {**_ref(table, chain=chain), "expr": expr}
    creates.append(f.add("rule", rule))
    digest = digest_of([COMPILER_VERSION, creates])
    rule["comment"] = DIGEST_PREFIX + digest
    objects = UnitObjects(tables=(("netdev", table),), digest=digest)
    return UnitRuleset(key, farm.name, objects, creates)
