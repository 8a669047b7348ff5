"""Route health injection, decided purely: which farms' VIPs this node announces, and why the others are not.

A VIP is announced while its farm can serve on this node, and only then: the farm is up, it did not fail to apply
here, the node's kernel holds it (its chain is in ``table inet lbweb``; for an HTTP farm, HAProxy applied it), and
at least one backend takes new connections. A node drained by the operator announces every VIP with the
GRACEFUL_SHUTDOWN community (RFC 8326) for ``drain_seconds``, so the routers move traffic away first, then
withdraws them all.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from .grammar import GRACEFUL_SHUTDOWN, Community
from .spec import RouteSpec

ANNOUNCED = "announced"
DRAINING = "announced with graceful shutdown (the node is draining)"


@dataclass(frozen=True)
class FarmState:
    """What the worker knows of one farm on this node."""

    name: str
    vip: str
    up: bool  # the operator's state: up, not off
    failed: bool  # its last apply on this node failed
    held: bool  # this node's kernel (or HAProxy) holds it
    active_backends: int  # backends that take new connections
    announce: bool = True  # the farm's BGP setting
    med: int | None = None
    communities: tuple[Community, ...] = ()


def host_route(address: str) -> str:
    ip = ipaddress.ip_address(address)
    return f"{ip}/{ip.max_prefixlen}"


def reason(farm: FarmState) -> str:
    """Why the farm's VIP is withdrawn, or ANNOUNCED (before the node's own drain is taken into account)."""
    if not farm.announce:
        return "withdrawn: the farm is not announced by BGP (its setting)"
    if not farm.up:
        return "withdrawn: the farm is off"
    if farm.failed:
        return "withdrawn: the farm failed to apply on this node"
    if not farm.held:
        return "withdrawn: this node's kernel does not hold the farm yet"
    if farm.active_backends < 1:
        return "withdrawn: no backend takes new connections"
    return ANNOUNCED


def decide(farms: list[FarmState], *, drained: bool, drain_elapsed: float, drain_seconds: int):
    """(routes to announce, {farm name: why}) for every farm. Two farms on one VIP (other ports) make one route,
    announced while either can serve."""
    why: dict[str, str] = {}
    by_prefix: dict[str, RouteSpec] = {}
    for farm in sorted(farms, key=lambda f: f.name):
        text = reason(farm)
        if text == ANNOUNCED and drained:
            text = DRAINING if drain_elapsed < drain_seconds else "withdrawn: the node is drained"
        why[farm.name] = text
        if text.startswith("withdrawn"):
            continue
        prefix = host_route(farm.vip)
        communities = farm.communities + ((GRACEFUL_SHUTDOWN,) if text == DRAINING else ())
        route = RouteSpec(prefix, farm.med, tuple(dict.fromkeys(communities)), text == DRAINING)
        if prefix in by_prefix:  # the first farm by name gives the route its attributes
            continue
        by_prefix[prefix] = route
    routes = sorted(by_prefix.values(), key=lambda r: (r.version, ipaddress.ip_network(r.prefix)))
    return tuple(routes), why
