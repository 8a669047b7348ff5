"""Plain data the compiler takes: what the operator configured, free of Django.

The service layer turns database rows into these frozen dataclasses; the
compiler turns them into nftables JSON. Nothing here knows about the kernel.
Attribute names follow nftlb where one exists (``sched_param``,
``persist_ttl``, ``new_rtlimit``, ``est_connlimit``, ...).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

# The protocol each conntrack helper tracks: the compiler's ct helper objects, the worker's capability
# probe and the models' validation all read it here. The choices offered (with their labels) are
# farms.choices.HelperChoices; tests/test_vocabulary.py keeps the two the same set.
HELPER_PROTOCOL = {
    "ftp": "tcp",
    "pptp": "tcp",
    "irc": "tcp",
    "h323": "tcp",
    "tftp": "udp",
    "snmp": "udp",
    "amanda": "udp",
    "sip": "udp",
}


@dataclass(frozen=True)
class BackendSpec:
    """One real server behind a farm.

    ``state``: ``enabled`` takes new connections; ``drain`` takes none except
    from clients already bound to it by persistence; ``disabled`` takes none.
    Established connections always continue: conntrack holds their NAT.
    """

    id: int
    address: str
    port: int | None = None
    weight: int = 1
    state: str = "enabled"
    priority: int = 1
    healthy: bool = True
    est_connlimit: int = 0
    mac: str | None = None

    @property
    def mark(self) -> int:
        """The packet mark persistence maps store for this backend (its id)."""
        return self.id

    @property
    def eligible(self) -> bool:
        return self.healthy and self.state == "enabled"

    @property
    def sticky(self) -> bool:
        """Still reachable through an existing persistence entry."""
        return self.healthy and self.state in ("enabled", "drain")


@dataclass(frozen=True)
class PolicySpec:
    """A shared deny or allow list of addresses and CIDRs."""

    id: int
    name: str
    type: str = "deny"  # deny | allow
    elements: tuple[str, ...] = ()

    def elements_of(self, family: int) -> tuple[str, ...]:
        return tuple(e for e in self.elements if ipaddress.ip_network(e, strict=False).version == family)


@dataclass(frozen=True)
class SessionSpec:
    """A static persistence entry: this client always goes to this backend."""

    client: tuple  # the persistence key's parts: ("198.18.0.2",), ("198.18.0.2", 40000), ("02:00:00:00:00:01",)
    backend_id: int


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
    sched_param: tuple[str, ...] = ()
    persistence: tuple[str, ...] = ()
    persist_ttl: int = 60
    source_addr: str = ""  # SNAT: an address or a range "a-b"; empty = masquerade
    source_ports: tuple[int, int] | None = None
    new_rtlimit: int = 0  # new connections per second per source address (0: off)
    new_rtlimit_burst: int = 0
    rst_rtlimit: int = 0  # TCP resets per second towards the farm (0: off)
    est_connlimit: int = 0  # established connections of the whole farm (0: off)
    limit_verdict: str = "drop"  # drop | reject
    log: bool = False
    log_prefix: str = ""
    log_rtlimit: int = 10
    helper: str = ""
    tcp_strict: bool = False
    intra_connect: bool = False
    flow_offload: bool = False
    offload_devices: tuple[str, ...] = ()
    interface: str = ""  # DSR: the LB's interface on the backends' segment
    interface_mac: str = ""  # DSR: that interface's MAC (resolved by the worker)
    policies: tuple[PolicySpec, ...] = ()
    sessions: tuple[SessionSpec, ...] = ()

    @property
    def family(self) -> int:
        return ipaddress.ip_address(self.vip).version

    @property
    def mark(self) -> int:
        """The conntrack mark of this farm's connections (its id)."""
        return self.id

    @property
    def active_backends(self) -> tuple[BackendSpec, ...]:
        """The backends the scheduler picks from: eligible ones of the best (lowest) priority present."""
        eligible = [b for b in self.backends if b.eligible]
        if not eligible:
            return ()
        best = min(b.priority for b in eligible)
        return tuple(sorted((b for b in eligible if b.priority == best), key=lambda b: b.id))

    @property
    def sticky_backends(self) -> tuple[BackendSpec, ...]:
        return tuple(sorted((b for b in self.backends if b.sticky), key=lambda b: b.id))

    @property
    def traffic(self) -> str:
        """Where new connections go: balanced, fallback, rejected, or off (values of FarmTrafficChoices)."""
        if not self.enabled:
            return "off"
        if self.active_backends:
            return "balanced"
        return "fallback" if self.fallback else "rejected"
