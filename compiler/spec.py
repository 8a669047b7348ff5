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
# farms.choices.HelperChoices; tests/repo/test_vocabulary.py keeps the two the same set.
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
# Every protocol a helper tracks (the kernel's SIP helper follows TCP too): a farm for all protocols gets one
# ct helper object per protocol here, and a TCP farm may use SIP.
HELPER_PROTOCOLS = {helper: (protocol,) for helper, protocol in HELPER_PROTOCOL.items()} | {"sip": ("udp", "tcp")}


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
    fwmark: int = 0  # nftlb's backend mark: ORed with the farm's into the packet mark (policy routing)
    oface: str = ""  # DSR: the interface towards this backend when it is not the farm's
    source_addr: str = ""  # SNAT: this backend's own source address (nftlb's backend source-addr)

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
    mode: str = "snat"  # snat | dnat | dsr | stlsdnat | local (nftlb's: a service on the appliance itself)
    scheduler: str = "rr"
    enabled: bool = True
    backends: tuple[BackendSpec, ...] = field(default_factory=tuple)
    fallback: BackendSpec | None = None  # where new connections go when no backend is active; None: reject
    sched_param: tuple[str, ...] = ()
    persistence: tuple[str, ...] = ()
    persist_ttl: int = 60
    source_addr: str = ""  # SNAT: an address or a range "a-b"; empty = masquerade
    source_ports: tuple[int, int] | None = None
    new_rtlimit: int = 0  # new connections per new_rtlimit_unit per source address (0: off)
    new_rtlimit_unit: str = "second"
    new_rtlimit_burst: int = 0
    rst_rtlimit: int = 0  # TCP resets per rst_rtlimit_unit per source address (0: off)
    rst_rtlimit_unit: str = "second"
    rst_rtlimit_burst: int = 0
    limits_ttl: int = 120  # seconds a source stays in a per-client rate meter
    est_connlimit: int = 0  # established connections per source address (0: off), as nftlb
    limit_verdict: str = "drop"  # drop | reject
    log: bool = False  # nftlb "input": new connections as they arrive
    log_forward: bool = False  # nftlb "forward": every forwarded packet of the farm, both ways
    log_output: bool = False  # nftlb "output": new connections as they leave for the backend
    log_prefix: str = ""  # nftlb's TYPE-FNAME (IN-/FWD-/OUT-<farm>) when empty
    log_rtlimit: int = 10  # 0: every line (nftlb's default)
    log_rtlimit_unit: str = "second"
    log_drops: bool = True  # log what limits and policies drop (nftlb's verdict "log drop")
    fwmark: int = 0  # nftlb's farm mark: the packet mark of the farm's connections, for policy routing
    oface: str = ""  # DSR: the interface frames leave by (empty: the farm's interface)
    ether_addr: str = ""  # DSR: the source MAC of forwarded frames (empty: the interface's own)
    helper: str = ""
    tcp_strict: bool = False
    intra_connect: bool = False
    flow_offload: bool = False
    count_bytes: bool = True  # each backend's bytes counted on every packet (the forward hook's counter map)
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
    def priority_level(self) -> int:
        """The highest priority value that takes new connections, computed as nftlb does it.

        Start at 1; every backend of the current level that cannot take connections raises the level
        by one, and the new level is checked the same way. So a priority-2 backend comes in as soon
        as one priority-1 backend is out, not only when all of them are.
        """
        level = 1
        while True:
            out = sum(1 for b in self.backends if b.priority == level and not b.eligible)
            if not out:
                return level
            level += out

    @property
    def active_backends(self) -> tuple[BackendSpec, ...]:
        """The backends the scheduler picks from: eligible ones whose priority is within the level."""
        level = self.priority_level
        return tuple(sorted((b for b in self.backends if b.eligible and b.priority <= level), key=lambda b: b.id))

    @property
    def sticky_backends(self) -> tuple[BackendSpec, ...]:
        return tuple(sorted((b for b in self.backends if b.sticky), key=lambda b: b.id))

    @property
    def traffic(self) -> str:
        """Where new connections go: balanced, fallback, rejected, local, or off (values of FarmTrafficChoices)."""
        if not self.enabled:
            return "off"
        if self.mode == "local":  # to the appliance's own socket on the VIP: no backend to choose
            return "local"
        if self.active_backends:
            return "balanced"
        return "fallback" if self.fallback else "rejected"
