"""A stateless farm (``stlsdnat``): UDP or TCP rewritten both ways in the raw hook, with no conntrack entry."""

from __future__ import annotations

from typing import Any

from compiler.types import Json

from . import fragments as f
from .dispatch import EVERY_PORT, dispatch_keys, service_element
from .logs import log_statements as _log
from .names import backend_chain_name, farm_chain_name
from .schedulers import l3_of, scheduler_map
from .spec import BackendSpec, FarmSpec
from .units import Builder


def stateless_replies_map(family: int, protocol: str, ranged: bool = False) -> str:
    """Where a stateless farm's backends' answers are recognised: by source address and port, per protocol;
    single ports in a hash map, ranges in an interval map (see :func:`dispatch_map_name`)."""
    name = f"stateless_replies{family}" if protocol == "udp" else f"stateless_{protocol}_replies{family}"
    return f"{name}_ranges" if ranged else name


def stateless_reply_keys(farm: FarmSpec, backend: BackendSpec) -> list[tuple[str, Any]]:
    """The (map, key) pairs by which one backend's answers are recognised."""
    sources = [(backend.port, backend.port)] if backend.port is not None else list(farm.ports or EVERY_PORT)
    return [
        (stateless_replies_map(farm.family, farm.protocol, lo != hi), f.concat(backend.address, f.port_value(lo, hi)))
        for lo, hi in sources
    ]


def stateless_farm(b: Builder, farm: FarmSpec) -> None:
    """UDP or TCP rewritten both ways in the raw hook: no conntrack entry, no NAT table.

    No counter: nothing reads a stateless farm's packets (the collector measures the farms conntrack
    sees; the dashboard and the API say a stateless farm is not measured), and a datagram paid about 1 %
    for the farm's and its backend's named counters (bench/runs/PASSES.md). When no backend has a port of
    its own, the pick rewrites the destination from a map of the backends' addresses in the farm chain's
    own rule, as one would write it by hand: a datagram meets no backend chain. A backend with a port
    needs two rewrites from one pick, so then the pick ``goto``-s the backend's chain (the farm chain's
    last rule: a packet has nothing to come back to), which rewrites both."""
    chain = farm_chain_name(farm)
    l3, l4 = l3_of(farm), farm.protocol  # udp or tcp: both rewritten both ways, as nftlb does
    backends = farm.active_backends
    portless = all(backend.port is None for backend in backends)
    for backend in backends:
        if not portless:
            name = backend_chain_name(farm, backend.id)
            b.chain(name)
            expr = [{"mangle": {"key": f.payload(l3, "daddr"), "value": backend.address}}]
            if backend.port is not None:
                expr.append({"mangle": {"key": f.payload(l4, "dport"), "value": backend.port}})
            b.rule(name, expr)
        reply = f"reply-{farm.name}-{backend.id}"
        b.chain(reply)
        # The appliance's own conversations with the backend (a health check, say) keep their addresses:
        # the FIB test is the rule's first match, so an answer to a client costs one rule, not two.
        local = f.match({"fib": {"result": "type", "flags": ["daddr"]}}, "local", "!=")
        back = [local, {"notrack": None}, {"mangle": {"key": f.payload(l3, "saddr"), "value": farm.vip}}]
        if backend.port is not None:
            back.append({"mangle": {"key": f.payload(l4, "sport"), "value": (farm.ports or EVERY_PORT)[0][0]}})
        b.rule(reply, back)
        for map_name, key in stateless_reply_keys(farm, backend):
            service_element(b, map_name, key, reply)
    b.chain(chain)
    if not backends:
        pick = [{"drop": None}]
    elif portless:
        addresses = scheduler_map(farm, backends, lambda backend: backend.address)
        pick = [{"mangle": {"key": f.payload(l3, "daddr"), "value": _data_map(addresses)}}]
    else:
        pick = [_goto_backends(scheduler_map(farm, backends))]
    if farm.log:  # nftlb's "input": every packet to the VIP (a stateless farm has no connections)
        b.rule(chain, [{"notrack": None}])
        b.rule(chain, _log(farm, "IN"))
        b.rule(chain, pick)
    else:  # one rule: every packet of the farm pays for one rule's evaluation, not two
        b.rule(chain, [{"notrack": None}, *pick])
    for map_name, key in dispatch_keys(farm, "stateless"):
        service_element(b, map_name, key, chain)


def _goto_backends(pick: Json) -> Json:
    """A scheduler's verdict map whose elements ``goto`` their backend's chain instead of jumping to it."""
    data = pick["vmap"]["data"]
    elements = [[key, f.goto(verdict["jump"]["target"])] for key, verdict in data["set"]]
    return f.vmap(pick["vmap"]["key"], {**data, "set": elements})


def _data_map(pick: Json) -> Json:
    """A scheduler's verdict map made with each backend's address as its "target": the same keys, mapped to
    the addresses themselves (an expression whose value a ``mangle`` writes)."""
    data = pick["vmap"]["data"]
    elements = [[key, verdict["jump"]["target"]] for key, verdict in data["set"]]
    return {"map": {"key": pick["vmap"]["key"], "data": {**data, "set": elements}}}
