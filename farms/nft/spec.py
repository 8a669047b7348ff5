"""Plain data the compiler takes: what the operator configured, free of Django.

The service layer turns database rows into these frozen dataclasses; the
compiler turns them into nftables JSON. Nothing here knows about the kernel.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

PROTOCOLS = ("tcp", "udp", "sctp", "all")
MODES = ("snat", "dnat")
SCHEDULERS = ("rr", "weight")


@dataclass(frozen=True)
class BackendSpec:
    """One real server behind a farm."""

    id: int
    address: str
    port: int | None = None
    weight: int = 1
    enabled: bool = True
    healthy: bool = True  # False only when healthd saw it down; "unknown" takes traffic


@dataclass(frozen=True)
class FarmSpec:
    """One virtual service: a VIP, its ports and the backends that serve it."""

    id: int
    name: str
    vip: str
    protocol: str = "tcp"
    ports: tuple[tuple[int, int], ...] = ()
    mode: str = "snat"
    scheduler: str = "rr"
    enabled: bool = True
    backends: tuple[BackendSpec, ...] = field(default_factory=tuple)
    fallback: BackendSpec | None = None  # where new connections go when no backend is active; None: reject

    @property
    def family(self) -> int:
        return ipaddress.ip_address(self.vip).version

    @property
    def mark(self) -> int:
        """The conntrack mark of this farm's connections (its id)."""
        return self.id

    @property
    def active_backends(self) -> tuple[BackendSpec, ...]:
        """The backends that take new connections: enabled by the operator and not seen down by healthd."""
        return tuple(sorted((b for b in self.backends if b.enabled and b.healthy), key=lambda b: b.id))

    @property
    def traffic(self) -> str:
        """Where new connections go: balanced, fallback, rejected, or off (values of FarmTrafficChoices)."""
        if not self.enabled:
            return "off"
        if self.active_backends:
            return "balanced"
        return "fallback" if self.fallback else "rejected"
