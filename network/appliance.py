"""What the appliance itself holds: its interfaces and its own addresses, for validation in the web process.

The kernel's side is the network view the worker publishes in Redis (``dataplane/network/applier.py``
``publish``: when it starts, after every network apply, and at every reconcile, i.e. every
``LBWEB_RECONCILE_SECONDS``), read here with a cache of ``CACHE_SECONDS`` as ``farms/capabilities.py``
reads the kernel's capabilities. The web never reads the kernel (import contracts), and it would not be
the same reading: the farms apply to the worker's kernel, and the web and the worker need not share a
network namespace (the tests run the worker in the lab's LB namespace; /sys would list the web's own
interfaces, and /proc has no plain list of IPv4 addresses).

Nothing published yet (no worker has run, Redis down): an interface name is checked for its syntax only
and accepted, and the appliance's own addresses are those the database knows (a cluster's management
address and its nodes'). Refusing every interface while the worker starts or is down would block every
edit and import that names one; a name the kernel lacks is then refused by the apply, which isolates that
farm and says why on it. The view may also be up to a reconcile old: a message that refuses a name says
which interfaces the worker read, and when.
"""

from __future__ import annotations

import contextlib
import ipaddress
import time
from dataclasses import dataclass

from . import selectors

CACHE_SECONDS = 5  # an import of 1,000 farms reads Redis once, not 1,000 times


@dataclass(frozen=True)
class Published:
    """The worker's last reading: interface names, and each address (no prefix) with the interface holding it."""

    interfaces: frozenset[str]
    addresses: dict[str, str]
    read_at: str


_cache: tuple[float, Published | None] | None = None


def forget() -> None:
    """Drop this process's copy (tests: each one's worker publishes its own namespace)."""
    global _cache
    _cache = None


def published() -> Published | None:
    """The worker's last reading of the interfaces and their addresses, or None when there is none."""
    global _cache
    now = time.monotonic()
    if _cache is not None and now - _cache[0] < CACHE_SECONDS:
        return _cache[1]
    view = selectors.observed()
    if not view:
        return None  # not published yet: asked again next time, so the first publication counts at once
    links = view.get("links") or []
    addresses = {}
    for link in links:
        for address in link.get("addresses") or []:
            addresses[str(ipaddress.ip_interface(address).ip)] = link["name"]
    value = Published(frozenset(link["name"] for link in links), addresses, view.get("read_at") or "")
    _cache = (now, value)
    return value


def interface_names() -> frozenset[str] | None:
    """Every interface the appliance has or is about to have: the kernel's (as published) and those its network
    settings make (a VLAN or a bond the worker has not created yet). None while nothing is published."""
    from .models import Interface

    view = published()
    if view is None:
        return None
    return view.interfaces | set(Interface.objects.values_list("name", flat=True))


def missing_interface(name: str) -> str | None:
    """Why ``name`` (a syntactically valid interface name) cannot be used: the appliance has no such
    interface. None when it has, or while the worker has published nothing (module docstring)."""
    known = interface_names()
    if known is None or name in known:
        return None
    view = published()
    when = f" at {view.read_at[:19].replace('T', ' ')} UTC" if view and view.read_at else ""
    return (
        f"This appliance has no interface '{name}': it has {', '.join(sorted(known))} (as the worker read them"
        f"{when}, and those the network settings make)."
    )


def own_addresses() -> dict[str, str]:
    """The appliance's own addresses, each with where it is: the published interfaces' and, in a cluster, its
    management address and the nodes' own. A cluster's floating farm addresses (each farm's VIP, the extra
    addresses) are the farms' and not the appliance's: keepalived's handler puts them on the master only, so
    the master and the backup decide alike."""
    from cluster.models import Cluster, Node
    from farms.models import Farm

    view = published()
    found = dict(view.addresses) if view else {}
    cluster = Cluster.objects.filter(pk=1, enabled=True).first()
    if cluster is not None:
        floating = set(Farm.objects.values_list("vip", flat=True))
        floating |= {str(ipaddress.ip_interface(address).ip) for address, _ in _extra(cluster)}
        for address in floating:
            found.pop(address, None)
        for node in Node.objects.all():
            found[node.address] = f"node {node.name}'s address"
            found[node.sync_address] = f"node {node.name}'s sync address"
        with contextlib.suppress(ValueError):  # refused by the cluster's own validation
            found[str(ipaddress.ip_interface(cluster.management_address).ip)] = "the cluster's management address"
    return found


def _extra(cluster) -> list[tuple[str, str]]:
    try:
        return cluster.floating_extra()
    except ValueError:
        return []  # refused by the cluster's own validation
