"""What the collector needs to know about farms: ids, counter names, marks and backend addresses.

Built from the database (the truth) with the compiler's own naming functions,
so a counter the compiler creates is the counter the collector reads.

The kernel counts a NAT farm's bytes once per packet, by backend and direction (one lookup in the
forward hook, see ``compiler.nat._traffic``); a farm's bytes each way and a backend's bytes both
ways are sums of those (:attr:`FarmInfo.sums`), which ``collector.sampler.add_sums`` adds to a
reading under the names the rest of the collector reads, as if the kernel had counted them itself.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

import compiler
import compiler.names
from compiler.spec import FarmSpec
from farms.choices import BackendStateChoices, FarmModeChoices, FarmStateChoices
from farms.models import ConfigGeneration, Farm
from farms.specs import fallback_spec


@dataclass(frozen=True)
class BackendInfo:
    """One backend as the collector sees it."""

    id: int
    address: bytes  # packed, as conntrack reports it
    port: int | None
    enabled: bool
    new_connections_counter: str
    traffic_counter: str


@dataclass(frozen=True)
class FarmInfo:
    """One farm as the collector sees it."""

    id: int
    name: str
    mark: int
    snat: bool
    enabled: bool
    new_connections_counter: str
    traffic_in_counter: str
    traffic_out_counter: str
    backends: tuple[BackendInfo, ...] = ()
    snat_tuples: int = 0  # SNAT: source address:port pairs available towards one backend (Farm.snat_capacity)
    bytes_counted: bool = True  # Farm.count_bytes: off, the kernel holds no traffic counter of this farm
    # Counters the kernel does not hold, each the sum of the kernel's counters named beside it: a NAT farm's
    # in and out (the first two), then each backend's traffic (see the module's docstring). Empty for a local farm
    # (its kernel counts each direction itself) and for a farm that counts no bytes.
    sums: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def counters(self) -> tuple[str, ...]:
        """Every counter name this farm's figures come from."""
        names = [self.new_connections_counter]
        if self.bytes_counted:
            names += [self.traffic_in_counter, self.traffic_out_counter]
        for backend in self.backends:
            names += [backend.new_connections_counter, *([backend.traffic_counter] if self.bytes_counted else [])]
        return tuple(names)


@dataclass
class FarmIndex:
    """All farms, and the lookups a conntrack census needs."""

    generation: int = -1
    farms: tuple[FarmInfo, ...] = ()
    by_mark: dict[int, FarmInfo] = field(default_factory=dict)
    # (mark, address, port) -> backend id; port None matches a backend that keeps the client's port
    backend_of: dict[tuple[int, bytes, int | None], int] = field(default_factory=dict)

    # Every counter of the kernel's that the farms' figures come from (a reading asks for these alone).
    counter_names: frozenset[str] = frozenset()

    def backend_for(self, mark: int, address: bytes, port: int | None) -> int | None:
        return self.backend_of.get((mark, address, port)) or self.backend_of.get((mark, address, None))


def build_index(farms: list[FarmInfo], generation: int = 0) -> FarmIndex:
    index = FarmIndex(generation=generation, farms=tuple(farms))
    names = set()
    for farm in farms:
        summed = {name for name, _parts in farm.sums}
        names.update(name for name in farm.counters if name not in summed)
        names.update(part for _name, parts in farm.sums for part in parts)
    index.counter_names = frozenset(names)
    for farm in farms:
        index.by_mark[farm.mark] = farm
        for backend in farm.backends:
            index.backend_of[(farm.mark, backend.address, backend.port)] = backend.id
    return index


def farm_info(farm: Farm) -> FarmInfo:
    """The collector's view of one farm row (backends prefetched)."""
    spec = FarmSpec(id=farm.id, name=farm.name, vip=farm.vip)
    chain = compiler.names.farm_chain_name(spec)
    rows = sorted(farm.backends.all(), key=lambda b: b.id)
    backends = tuple(
        BackendInfo(
            id=b.id,
            address=ipaddress.ip_address(b.address).packed,
            port=b.port,
            enabled=b.state == BackendStateChoices.ENABLED,
            new_connections_counter=compiler.names.backend_chain_name(spec, b.id),
            traffic_counter=compiler.names.backend_traffic_counter_name(farm.name, b.id),
        )
        for b in rows
    )
    traffic_in = compiler.names.traffic_counter_name(farm.name, "in")
    traffic_out = compiler.names.traffic_counter_name(farm.name, "out")
    sums: list[tuple[str, tuple[str, ...]]] = []
    if farm.mode != FarmModeChoices.LOCAL and farm.count_bytes:
        # Backends that share an address are counted on the lowest id (the compiler's _traffic): the others'
        # counters stay at zero, so adding every backend's gives the farm's bytes.
        destinations = [b.id for b in rows] + (["fallback"] if fallback_spec(farm) else [])
        for total, direction in ((traffic_in, "in"), (traffic_out, "out")):
            sums.append(
                (
                    total,
                    tuple(compiler.names.backend_traffic_counter_name(farm.name, d, direction) for d in destinations),
                )
            )
        for b in rows:
            both = tuple(compiler.names.backend_traffic_counter_name(farm.name, b.id, d) for d in ("in", "out"))
            sums.append((compiler.names.backend_traffic_counter_name(farm.name, b.id), both))
    return FarmInfo(
        id=farm.id,
        name=farm.name,
        mark=spec.mark,
        snat=farm.mode == "snat",
        enabled=farm.state == FarmStateChoices.UP,
        new_connections_counter=chain,
        traffic_in_counter=traffic_in,
        traffic_out_counter=traffic_out,
        backends=backends,
        snat_tuples=(farm.snat_capacity or {}).get("per_backend", 0),
        sums=tuple(sums),
        bytes_counted=farm.count_bytes,
    )


# NAT and local farms go through conntrack (their mark) and the traffic counters; DSR and stateless farms do not.
MEASURED_MODES = (FarmModeChoices.SNAT, FarmModeChoices.DNAT, FarmModeChoices.LOCAL)


def load_index(current: FarmIndex | None = None) -> FarmIndex:
    """Read the measured farms from the database, unless the configuration generation has not moved."""
    generation = ConfigGeneration.current()
    if current is not None and current.generation == generation:
        return current
    farms = Farm.objects.filter(mode__in=MEASURED_MODES).prefetch_related("backends").order_by("id")
    return build_index([farm_info(f) for f in farms], generation)
