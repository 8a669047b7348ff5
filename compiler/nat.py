"""A NAT farm (``snat``, ``dnat``): its farm chain, a chain per backend, persistence, SNAT, the fallback,
nftlb's marks, the per-backend traffic counters, and the chains that send a reused TCP client port back
to its backend (compiler/README.md says why)."""

from __future__ import annotations

from typing import Any

from compiler.types import Json

from . import fragments as f
from .dispatch import dispatch_keys, service_element
from .guards import farm_guards, guard_chain, refusal
from .hooks import PRIO_FILTER
from .logs import log_statements as _log
from .names import (
    LOG_FORWARD_MAP,
    ROUTE_MARKS,
    TRAFFIC_DIRECTIONS,
    backend_chain_name,
    backend_traffic_counter_name,
    elsewhere_chain_name,
    fallback_chain_name,
    farm_chain_name,
    persist_set_name,
    pick_chain_name,
    ports_set_name,
    reuse_set_name,
    static_set_name,
    traffic_map,
)
from .schedulers import hash_expr, l3_of, nat_scheduler
from .spec import BackendSpec, FarmSpec
from .units import Builder, canonical

REUSE_TTL = 120  # conntrack's TCP TIME_WAIT (nf_conntrack_tcp_timeout_time_wait): how long a reopen can happen
REUSE_SET_SIZE = 262144  # client address . port pairs learnt per backend; when full, new ones are not learnt
REUSE_ALTERNATIVES = 8  # backends tried after the scheduler's pick when another client holds the port there
NUMGEN_SCHEDULERS = ("rr", "weight", "leastconn")  # the others hash the flow: a reused port meets the same backend


def keeps_reused_ports(farm: FarmSpec) -> bool:
    """Whether a client port reused within ``REUSE_TTL`` goes back to its backend.

    NAT keeps the client's source port whenever conntrack knows no other connection on that tuple, and
    conntrack forgets a closed connection's tuple as soon as the client reuses its port (a SYN on a
    TIME_WAIT entry reopens it); the backend, which closed first, still holds that tuple in TIME_WAIT for
    60 s, and answers another client's SYN on it (unrelated sequence number and timestamp) with an ACK of
    the old connection: a reset and a SYN retransmitted. So a SNAT farm whose scheduler is not a hash
    sends a TCP client port reused within ``REUSE_TTL`` back to the backend it went to
    (``reuse-<name>-<id>``: the reopened connection takes the same tuple again, with the same client's
    increasing sequence number and timestamp, which TIME_WAIT accepts), and ``pick-<name>-<id>`` sends a
    new one whose port number another client holds at the scheduler's pick (``ports-<name>-<id>``) to the
    next backend where it is free (``elsewhere-<name>-<id>``), so NAT keeps the port instead of choosing
    one at random that the client's next reuse would not get again.

    Only TCP has TIME_WAIT; persistence already binds a client, and a hash scheduler sends the
    same client port to the same backend by itself.
    """
    return (
        farm.mode == "snat"
        and farm.protocol in ("tcp", "all")
        and not farm.persistence
        and farm.scheduler in NUMGEN_SCHEDULERS
    )


def _persist_key_type(farm: FarmSpec) -> str | list[str]:
    addr = "ipv4_addr" if farm.family == 4 else "ipv6_addr"
    types = {"srcip": addr, "srcport": "inet_service", "srcmac": "ether_addr"}
    parts = [types[name] for name in farm.persistence]
    return parts[0] if len(parts) == 1 else parts


def _restore_mark(farm: FarmSpec, expr: list[Json]) -> list[Json]:
    """The first rule of a chain the scheduler map jumps to: the farm's conntrack mark comes back first."""
    return [f.set_ct_mark(farm.mark), *expr]


def _backend_chain(b: Builder, farm: FarmSpec, backend: BackendSpec) -> None:
    name = backend_chain_name(farm, backend.id)
    b.obj("counter", f.counter(name))
    b.chain(name)
    first = True

    def rule(expr: list[Json]) -> None:
        nonlocal first
        b.rule(name, _restore_mark(farm, expr) if first else expr)
        first = False

    expr: list[Json] = [f.counter_ref(name)]
    if backend.est_connlimit:
        prefix = f"est-connlimit-{farm.name}-{backend.address} "
        refuse = refusal(b, farm, f"bck{backend.id}", prefix, f"{farm_chain_name(farm)}-limit")
        rule([{"ct count": {"val": backend.est_connlimit, "inv": True}}, *refuse])
    packet_mark = farm.fwmark | backend.fwmark
    if packet_mark:  # the connection's first packet is routed right after this chain (see _route_marks)
        expr.append({"mangle": {"key": f.meta("mark"), "value": packet_mark}})
    if farm.persistence:
        expr.append(
            {
                "set": {
                    "op": "update",
                    "elem": hash_expr(farm, farm.persistence),
                    "set": "@" + persist_set_name(farm, backend.id),
                }
            }
        )
    if keeps_reused_ports(farm):
        reuse, held = reuse_set_name(farm, backend.id), ports_set_name(farm, backend.id)
        for set_name, key_type, size in ((reuse, _reuse_key_type(farm), REUSE_SET_SIZE), (held, "inet_service", 65536)):
            b.obj("set", {**f.named_set(set_name, key_type), "flags": ["timeout"], "timeout": REUSE_TTL, "size": size})
        tcp = _tcp_only(farm)
        # A rule of its own: a full set stops the rule it is in (NFT_BREAK), and the DNAT must still happen.
        rule(
            [
                *tcp,
                {"set": {"op": "update", "elem": _reuse_key(farm), "set": "@" + reuse}},
                {"set": {"op": "update", "elem": f.payload("th", "sport"), "set": "@" + held}},
            ],
        )
    nat: Json = {"family": l3_of(farm), "addr": backend.address}
    if backend.port is not None:
        expr.append(f.match(f.meta("l4proto"), farm.protocol))
        nat["port"] = backend.port
    expr.append({"dnat": nat})
    rule(expr)


def _tcp_only(farm: FarmSpec) -> list[Json]:
    """The match that keeps a SNAT port-learning rule to TCP (a farm of protocol ``all`` sees every protocol)."""
    return [] if farm.protocol == "tcp" else [f.match(f.meta("l4proto"), "tcp")]


def _reuse_key(farm: FarmSpec) -> Json:
    return f.concat(f.payload(l3_of(farm), "saddr"), f.payload("th", "sport"))


def _reuse_key_type(farm: FarmSpec) -> list[str]:
    return ["ipv4_addr" if farm.family == 4 else "ipv6_addr", "inet_service"]


def _reuse_rules(b: Builder, farm: FarmSpec, chain: str, backends: tuple[BackendSpec, ...]) -> list[Json]:
    """A TCP client port seen in the last ``REUSE_TTL`` seconds goes back to the backend it went to;
    a new one goes where the scheduler says unless another client holds that port number there:
    then to the next backend where it is free (NAT keeps the port instead of picking one at random,
    which the client's next reuse would not get again). Returns the scheduler's statements."""
    tcp = _tcp_only(farm)
    sport = f.payload("th", "sport")
    for backend in backends:
        lookup = f.match(_reuse_key(farm), "@" + reuse_set_name(farm, backend.id))
        b.rule(chain, [*tcp, lookup, f.jump(backend_chain_name(farm, backend.id))])
    if len(backends) == 1:
        return nat_scheduler(b, farm, chain, backends)
    for i, backend in enumerate(backends):
        pick, other = pick_chain_name(farm, backend.id), elsewhere_chain_name(farm, backend.id)
        b.chain(other)
        following = (backends[i + 1 :] + backends[:i])[:REUSE_ALTERNATIVES]
        for alternative in following:
            free = f.match(sport, "@" + ports_set_name(farm, alternative.id), "!=")
            b.rule(other, [free, f.goto(backend_chain_name(farm, alternative.id))])
        b.rule(other, [f.goto(backend_chain_name(farm, backend.id))])  # held everywhere: NAT picks another port
        b.chain(pick)
        b.rule(pick, _restore_mark(farm, [*tcp, f.match(sport, "@" + ports_set_name(farm, backend.id)), f.goto(other)]))
        b.rule(pick, [f.goto(backend_chain_name(farm, backend.id))])
    return nat_scheduler(b, farm, chain, backends, lambda x: pick_chain_name(farm, x.id))


def _route_marks(b: Builder, farm: FarmSpec) -> None:
    """nftlb's farm and backend marks, as the packet mark of every packet of the farm's connections,
    both ways, so that policy routing (``ip rule fwmark``) sees them as under nftlb and SKUDONET.
    A connection's first packet gets it in its backend's chain; later ones here, before routing,
    by the backend the connection went to (its reply source)."""
    if not (farm.fwmark or any(x.fwmark for x in farm.backends)):
        return
    chain = f"mark-{farm.name}"
    b.chain(chain)
    marks: dict[str, int] = {}
    for backend in sorted(farm.backends, key=lambda x: x.id):
        marks.setdefault(backend.address, farm.fwmark | backend.fwmark)
    if not any(x.fwmark for x in farm.backends):
        value: Any = farm.fwmark
    else:
        source = f.ct(f"{l3_of(farm)} saddr", "reply")
        value = {"map": {"key": source, "data": {"set": [[a, m] for a, m in marks.items() if m]}}}
    b.rule(chain, [{"mangle": {"key": f.meta("mark"), "value": value}}])
    b.element(ROUTE_MARKS, farm.mark, f.jump(chain))


def _persistence_sets(b: Builder, farm: FarmSpec) -> dict[int, list[str]]:
    """Per sticky backend: a set of learnt clients (with the TTL) and, if any, a set of static sessions."""
    key_type = _persist_key_type(farm)
    statics: dict[int, list] = {}
    for session in farm.sessions:
        statics.setdefault(session.backend_id, []).append(_session_key(session.client, farm))
    lookups: dict[int, list[str]] = {}
    for backend in farm.sticky_backends:
        names = []
        if backend.id in statics:
            name = static_set_name(farm, backend.id)
            b.obj("set", f.named_set(name, key_type), volatile=True)
            elems = sorted(statics[backend.id], key=canonical)
            b.creates.append(f.add("element", f.element(name, elems)))
            names.append(name)
        name = persist_set_name(farm, backend.id)
        b.obj("set", {**f.named_set(name, key_type), "flags": ["timeout"], "timeout": farm.persist_ttl})
        names.append(name)
        lookups[backend.id] = names
    return lookups


def _persistence_rules(b: Builder, farm: FarmSpec, chain: str, lookups: dict[int, list[str]]) -> None:
    """Clients already bound to a backend go back to it: static sessions first (they win), then learnt ones."""
    key = hash_expr(farm, farm.persistence)
    static = [(bid, n) for bid, names in lookups.items() for n in names if n.startswith("static-")]
    learnt = [(bid, n) for bid, names in lookups.items() for n in names if not n.startswith("static-")]
    for backend_id, name in static + learnt:
        b.rule(chain, [f.match(key, "@" + name), f.jump(backend_chain_name(farm, backend_id))])


def _session_key(client: tuple, farm: FarmSpec) -> Any:
    return client[0] if len(client) == 1 else f.concat(*client)


def _snat(b: Builder, farm: FarmSpec) -> None:
    """Postrouting of a new connection: nftlb's ``output`` log, then the SNAT of a snat farm."""
    chain = f"snat-{farm.name}"
    b.chain(chain)
    if farm.log_output:
        b.rule(chain, _log(farm, "OUT"))
    if farm.mode != "snat":
        b.element("snat_farms", farm.mark, f.jump(chain))
        return
    ports = farm.source_ports
    for backend in sorted(farm.backends, key=lambda x: x.id):  # nftlb's backend source-addr comes first
        if backend.source_addr:
            own: list[Json] = [f.match(f.payload(l3_of(farm), "daddr"), backend.address)]  # after DNAT: the backend
            if backend.port is not None:
                own += [f.match(f.meta("l4proto"), farm.protocol), f.match(f.payload("th", "dport"), backend.port)]
            b.rule(chain, [*own, {"snat": {"family": l3_of(farm), "addr": backend.source_addr}}])
    expr: list[Json] = []
    if ports:
        expr.append(f.match(f.meta("l4proto"), {"set": ["tcp", "udp", "sctp"]}))
    if farm.source_addr:
        low, _, high = farm.source_addr.partition("-")
        nat: Json = {"family": l3_of(farm), "addr": {"range": [low, high]} if high else low}
        if ports:
            nat["port"] = {"range": list(ports)}
        expr.append({"snat": nat})
    else:
        expr.append({"masquerade": {"port": {"range": list(ports)}} if ports else None})
    b.rule(chain, expr)
    b.element("snat_farms", farm.mark, f.jump(chain))


def _traffic(b: Builder, farm: FarmSpec) -> None:
    """The farm's byte counters, by backend and direction, and their entries in the forward hook's counter map.

    The ``forward`` hook sees every forwarded packet, not only a connection's first, so it holds no chain
    per farm and no rule per backend: one rule per direction and family counts the packet into
    ``traffic4_in``/``traffic6_in`` (``ct direction original``, keyed by ``ip daddr . ct mark``: the
    backend, as DNAT has already rewritten the destination) or ``traffic4_out``/``traffic6_out`` (``ct
    direction reply``, ``ip saddr . ct mark``: the backend, as the reply's source is rewritten only at
    postrouting): one lookup per packet whatever the number of farms and backends. A farm's bytes each way
    are the sum of its backends' (the collector adds them up, :mod:`monitoring.farm_index`). Backends of
    one farm that share an address are counted together, on the lowest id (nft 1.0.6 cannot put ``ct
    proto-src`` in a key).

    Why the packet's address and not the reply tuple's (``ct reply ip saddr``, the same address for the
    farm's packets): two fields rather than three, the address read from the packet, cost a packet about a
    third less of this lookup's excess over the minimal ruleset (bench/runs/PASSES.md, "The per-backend
    accounting's price"). Why a counter map and not conntrack's own accounting: read truthfully (every
    destroy event, for the connections that end between two censuses) it cost short connections more than
    this lookup does (bench/runs/PASSES.md, "Conntrack accounting with its reader").

    Disabled backends are counted too: their established connections still carry traffic. A farm that does
    not count its bytes (``count_bytes`` off) has neither counters nor entries: its packets find no element.
    """
    destinations = [(x.id, x.address) for x in sorted(farm.backends, key=lambda x: x.id)]
    if farm.fallback is not None:
        destinations.append(("fallback", farm.fallback.address))
    seen = set()
    for destination, address in destinations if farm.count_bytes else ():
        for direction in TRAFFIC_DIRECTIONS:
            name = backend_traffic_counter_name(farm.name, destination, direction)
            b.obj("counter", f.counter(name))
            if address not in seen:
                b.element(traffic_map(farm.family, direction), f.concat(address, farm.mark), name)
        seen.add(address)
    if farm.log_forward:  # nftlb's "forward": every forwarded packet of the farm, both ways
        chain = f"logfwd-{farm.name}"
        b.chain(chain)
        b.rule(chain, _log(farm, "FWD"))
        b.element(LOG_FORWARD_MAP, farm.mark, f.jump(chain))


def _fallback_chain(b: Builder, farm: FarmSpec) -> str:
    """Where new connections go while no backend is active (the farm's fallback address)."""
    name = fallback_chain_name(farm)
    fallback = farm.fallback
    b.obj("counter", f.counter(name))
    b.chain(name)
    nat: Json = {"family": l3_of(farm), "addr": fallback.address}
    expr: list[Json] = [f.counter_ref(name)]
    if fallback.port is not None:
        expr.append(f.match(f.meta("l4proto"), farm.protocol))
        nat["port"] = fallback.port
    b.rule(name, [*expr, {"dnat": nat}])
    return name


def nat_farm(b: Builder, farm: FarmSpec) -> None:
    chain = farm_chain_name(farm)
    backends = farm.active_backends
    counters = [chain]
    if farm.policies:
        counters.append(f"{chain}-policy")
    if farm.new_rtlimit or farm.est_connlimit or any(x.est_connlimit for x in farm.backends):
        counters.append(f"{chain}-limit")
    for name in counters:
        b.obj("counter", f.counter(name))
    lookups = _persistence_sets(b, farm) if farm.persistence else {}
    for backend in farm.sticky_backends if farm.persistence else backends:
        _backend_chain(b, farm, backend)
    b.chain(chain)
    b.rule(chain, [f.counter_ref(chain), f.set_ct_mark(farm.mark)])
    farm_guards(b, farm, chain)
    _persistence_rules(b, farm, chain, lookups)
    if backends and keeps_reused_ports(farm):
        tail = _reuse_rules(b, farm, chain, backends)
    elif backends:
        tail = nat_scheduler(b, farm, chain, backends)
    elif farm.fallback is not None:
        tail = [f.jump(_fallback_chain(b, farm))]
    else:  # no active backend and no fallback: refuse at once rather than let the VIP fall through to the host
        tail = [{"reject": {"type": "tcp reset"}} if farm.protocol == "tcp" else {"reject": None}]
    b.rule(chain, tail)
    for map_name, key in dispatch_keys(farm):
        service_element(b, map_name, key, chain)
    if farm.intra_connect:
        for map_name, key in dispatch_keys(farm, "local"):
            service_element(b, map_name, key, chain)
    if farm.mode == "snat" or farm.log_output:
        _snat(b, farm)
    _traffic(b, farm)
    guard_chain(b, farm)
    _route_marks(b, farm)
    if farm.flow_offload:
        table_ft = f"ft-{farm.name}"
        b.obj(
            "flowtable",
            {**f.counter(table_ft), "hook": "ingress", "prio": PRIO_FILTER, "dev": list(farm.offload_devices)},
        )
        offload = f"offload-{farm.name}"
        b.chain(offload)
        b.rule(
            offload,
            [f.match(f.meta("l4proto"), {"set": ["tcp", "udp"]}), {"flow": {"op": "add", "flowtable": "@" + table_ft}}],
        )
        b.element("offload_marks", farm.mark, f.jump(offload))
