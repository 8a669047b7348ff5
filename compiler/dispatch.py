"""Where a packet finds its farm: the farm's keys in the service maps (``daddr . l4proto . dport`` -> a
``goto`` to its chain). NAT, local and stateless farms and the hook units share these keys."""

from __future__ import annotations

from typing import Any

from . import fragments as f
from .names import dispatch_map_name
from .spec import FarmSpec
from .units import Builder

ALL_PROTOCOLS = ("tcp", "udp", "sctp")  # nftlb's protocol "all": these three, never ICMP or the others
EVERY_PORT = ((0, 65535),)


def farm_protocols(farm: FarmSpec) -> tuple[str, ...]:
    return ALL_PROTOCOLS if farm.protocol == "all" else (farm.protocol,)


def dispatch_keys(farm: FarmSpec, prefix: str = "dispatch") -> list[tuple[str, Any]]:
    """One key per protocol and port range; no ports (nftlb: empty virtual-ports) is every port.
    Single ports go to the exact map, ranges to the interval map (see :func:`dispatch_map_name`)."""
    return [
        (dispatch_map_name(farm.family, lo != hi, prefix), f.concat(farm.vip, proto, f.port_value(lo, hi)))
        for proto in farm_protocols(farm)
        for lo, hi in farm.ports or EVERY_PORT
    ]


def is_ranged(map_name: str) -> bool:
    return map_name.endswith("_ranges")


def service_element(b: Builder, map_name: str, key: Any, chain: str) -> None:
    """A service map's entry: ``goto`` the farm's chain, so that the hook's later lookups are not
    evaluated for a packet already found (its verdict is the chain's, then the hook's policy)."""
    b.element(map_name, key, f.goto(chain))
