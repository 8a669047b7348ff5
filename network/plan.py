"""The network as the worker applies it: plain data (no Django), built from the database by
``network/selectors.py``, applied by ``dataplane/network/kernel.py``, written as files by ``network/networkd.py``.

The plan the worker applied last is kept (``NetworkSettings.applied_plan``): what lbweb added before
and is no longer wanted (an address, a route, a VLAN or bond it created) is what it removes; anything
else on the machine is not lbweb's and stays.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class InterfacePlan:
    name: str
    kind: str  # ethernet, vlan, bond
    enabled: bool = True
    mtu: int | None = None
    parent: str | None = None
    vlan_id: int | None = None
    bond_mode: str = ""
    bond: str | None = None  # the bond this interface is a member of
    addresses: tuple[str, ...] = ()

    @property
    def created_by_lbweb(self) -> bool:
        return self.kind in ("vlan", "bond")


@dataclass(frozen=True)
class RoutePlan:
    destination: str
    gateway: str | None = None
    interface: str | None = None
    metric: int = 0

    @property
    def family(self) -> int:
        return 6 if ":" in self.destination else 4


@dataclass(frozen=True)
class Plan:
    interfaces: tuple[InterfacePlan, ...] = ()
    routes: tuple[RoutePlan, ...] = ()
    dns: tuple[str, ...] = ()
    domains: tuple[str, ...] = ()
    ntp: tuple[str, ...] = ()
    generation: int = 0
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def interface(self, name: str) -> InterfacePlan | None:
        return next((i for i in self.interfaces if i.name == name), None)

    def ordered(self) -> list[InterfacePlan]:
        """Bonds and Ethernet first, then what runs on them (VLANs): the order of creation."""
        rank = {"bond": 0, "ethernet": 1, "vlan": 2}
        return sorted(self.interfaces, key=lambda i: (rank.get(i.kind, 3), i.name))

    def to_json(self) -> dict[str, Any]:
        return {
            "interfaces": [dataclasses.asdict(i) for i in self.interfaces],
            "routes": [dataclasses.asdict(r) for r in self.routes],
            "dns": list(self.dns),
            "domains": list(self.domains),
            "ntp": list(self.ntp),
            "generation": self.generation,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Plan:
        data = data or {}
        return cls(
            interfaces=tuple(
                InterfacePlan(**{**i, "addresses": tuple(i.get("addresses", ()))}) for i in data.get("interfaces", [])
            ),
            routes=tuple(RoutePlan(**r) for r in data.get("routes", [])),
            dns=tuple(data.get("dns", ())),
            domains=tuple(data.get("domains", ())),
            ntp=tuple(data.get("ntp", ())),
            generation=data.get("generation", 0),
        )
