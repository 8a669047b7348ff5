"""What the cluster's engines are configured from: plain dataclasses, no Django.

The worker builds a :class:`ClusterSpec` from the database (``dataplane.cluster.applier``); the pure generators in
``compiler.cluster.render`` turn it into keepalived's and conntrackd's configuration and into the *plan* that the
transition handler (``dataplane.cluster.transition``) reads at each VRRP event. Keeping the handler off Django and
the database is deliberate: it runs on the failover's critical path, where a slow import or a locked
database would lengthen the time without a master.
"""

from __future__ import annotations

import ipaddress
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class FloatingAddress:
    """An address the master holds and the backup does not: a farm's VIP, a SNAT source, a gateway."""

    address: str  # with its prefix length, e.g. 198.18.2.101/24
    interface: str

    @property
    def ip(self) -> str:
        return str(ipaddress.ip_interface(self.address).ip)

    @property
    def version(self) -> int:
        return ipaddress.ip_interface(self.address).version


@dataclass(frozen=True)
class PersistenceSpec:
    """One persistence farm as the new master rebuilds its entries from the synchronised conntrack table:
    connections marked ``mark`` whose reply comes from a backend's address bind their client to it."""

    farm: str
    mark: int
    ttl: int
    family: int
    sets: tuple[tuple[str, str], ...]  # (backend address, persistence set name)


@dataclass(frozen=True)
class NodeSpec:
    name: str
    priority: int
    address: str  # its own address on the VRRP interface (unicast source and peer)
    sync_address: str  # its own address on the dedicated sync link


@dataclass(frozen=True)
class ClusterSpec:
    """Everything one node's keepalived, conntrackd and transition handler need."""

    local: NodeSpec
    peer: NodeSpec
    vrid: int
    interface: str
    sync_interface: str
    state_dir: str  # the node's cluster directory: configuration, fifo, sockets, journal
    handler: tuple[str, ...]  # argv of the transition handler (keepalived appends the fifo's path)
    management: FloatingAddress | None = None  # keepalived's own VIP: where the operator reaches the master's UI
    vrrp_version: int = 3
    advert_interval: float = 1.0
    auth_pass: str = ""  # VRRPv2 only: RFC 5798 (VRRPv3) has no authentication
    preempt_delay: int = 0  # 0: never take the master role back (nopreempt)
    track_interfaces: tuple[str, ...] = ()
    track_processes: tuple[str, ...] = ()  # "conntrackd" is the one lbweb knows
    addresses: tuple[FloatingAddress, ...] = ()
    persistence: tuple[PersistenceSpec, ...] = ()
    ignore_addresses: tuple[str, ...] = field(default=())  # the nodes' own addresses: never synchronised
    # The classic set-up (keepalived's virtual_ipaddress, the commit in a notify script that runs after them):
    # never used by lbweb itself, only as bench/failover.py's baseline, to show what the ordering is worth.
    vips_by_keepalived: bool = False

    @property
    def conntrackd_conf(self) -> str:
        return f"{self.state_dir}/conntrackd.conf"

    @property
    def conntrackd_socket(self) -> str:
        return f"{self.state_dir}/conntrackd.sock"

    @property
    def keepalived_conf(self) -> str:
        return f"{self.state_dir}/keepalived.conf"

    @property
    def fifo(self) -> str:
        return f"{self.state_dir}/vrrp.fifo"

    @property
    def plan_path(self) -> str:
        return f"{self.state_dir}/plan.json"

    @property
    def journal(self) -> str:
        return f"{self.state_dir}/transitions.jsonl"

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> ClusterSpec:
        data = dict(data)
        data["local"] = NodeSpec(**data["local"])
        data["peer"] = NodeSpec(**data["peer"])
        if data.get("management"):
            data["management"] = FloatingAddress(**data["management"])
        data["addresses"] = tuple(FloatingAddress(**a) for a in data.get("addresses", ()))
        data["persistence"] = tuple(
            PersistenceSpec(**{**p, "sets": tuple(tuple(s) for s in p["sets"])}) for p in data.get("persistence", ())
        )
        for key in ("handler", "track_interfaces", "track_processes", "ignore_addresses"):
            data[key] = tuple(data.get(key, ()))
        return cls(**data)
