"""Reads of the network settings: the plan the worker applies, and the worker's published view."""

from __future__ import annotations

import json
from typing import Any

from lbweb import redis_keys

from .models import Interface, NetworkSettings, Route, split_list
from .plan import InterfacePlan, Plan, RoutePlan

OBSERVED_KEY = redis_keys.NETWORK_OBSERVED


def current_plan() -> Plan:
    settings = NetworkSettings.load()
    interfaces = tuple(
        InterfacePlan(
            name=i.name,
            kind=i.kind,
            enabled=i.enabled,
            mtu=i.mtu,
            parent=i.parent.name if i.parent_id else None,
            vlan_id=i.vlan_id,
            bond_mode=i.bond_mode,
            bond=i.bond.name if i.bond_id else None,
            addresses=tuple(sorted(a.address for a in i.addresses.all())),
        )
        for i in Interface.objects.select_related("parent", "bond").prefetch_related("addresses")
    )
    routes = tuple(
        RoutePlan(r.destination, r.gateway or None, r.interface.name if r.interface_id else None, r.metric)
        for r in Route.objects.select_related("interface")
    )
    return Plan(
        interfaces=interfaces,
        routes=routes,
        dns=tuple(split_list(settings.dns_servers)),
        domains=tuple(split_list(settings.search_domains)),
        ntp=tuple(split_list(settings.ntp_servers)),
        generation=settings.generation,
    )


def observed() -> dict[str, Any] | None:
    """The interfaces, addresses and routes as the worker last read them from the kernel (None: not yet)."""
    from lbweb.redis_client import get_redis

    try:
        raw = get_redis().get(OBSERVED_KEY)
    except Exception:  # Redis down: the page shows the configuration without the live view
        return None
    return json.loads(raw) if raw else None
