"""What BIRD is configured from: plain dataclasses, no Django. The worker builds a :class:`BgpSpec` from the
database and the kernel (``dataplane.bgp.applier``); ``compiler.bgp.routes`` decides which VIPs it announces, and
``compiler.bgp.render`` writes BIRD's file."""

from __future__ import annotations

from dataclasses import dataclass

from .grammar import Community


@dataclass(frozen=True)
class PeerSpec:
    """One router lbweb peers with. ``key`` names BIRD's protocol (``peerKEY``): the row's id, never typed."""

    key: int
    address: str
    asn: int
    password: str = ""
    hold_time: int = 9
    keepalive_time: int = 3
    multihop: int = 0  # 0: a directly connected router
    bfd: bool = True
    source_address: str = ""  # empty: the address the route to the peer leaves by


@dataclass(frozen=True)
class RouteSpec:
    """A VIP announced as a host route, with its farm's MED and communities."""

    prefix: str  # 198.18.100.1/32 or 2001:2:0:100::1/128
    med: int | None = None
    communities: tuple[Community, ...] = ()
    graceful_shutdown: bool = False  # the node is draining: GRACEFUL_SHUTDOWN is added before the withdrawal

    @property
    def version(self) -> int:
        return 6 if ":" in self.prefix else 4


@dataclass(frozen=True)
class BgpSpec:
    """Everything one node's BIRD needs."""

    router_id: str
    local_asn: int
    peers: tuple[PeerSpec, ...] = ()
    routes: tuple[RouteSpec, ...] = ()
    bfd_interval_ms: int = 100
    bfd_multiplier: int = 3
