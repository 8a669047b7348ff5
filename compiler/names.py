"""The names of lbweb's chains, sets, maps and counters in its table, and the keys of its units.

One place for them: the worker reads the kernel back by these names (drift, counters) and the collector
turns counter names into a farm's figures, so a name changed here changes for all three."""

from __future__ import annotations

from .spec import FarmSpec, PolicySpec
from .units import digest_of

TRAFFIC_DIR_MAP = "traffic_dir"  # ct mark . ct direction -> a local farm's in/out counter
LOCAL_IN, LOCAL_OUT = "local-in", "local-out"  # local farms' traffic counters: filter input and output hooks
HOOK_PREFIX = "hook:"
ROUTE_MARKS = "route_marks"
LOG_FORWARD_MAP = "log_forward_marks"  # ct mark -> the farm's chain that logs every forwarded packet


def farm_chain_name(farm: FarmSpec) -> str:
    return farm_chain_name_of(farm.name)


def digest_chain_name(name: str) -> str:
    """The chain that carries a farm's digest, and nothing else (see ``Builder.finish``)."""
    return f"digest-{name}"


def guard_chain_name(farm: FarmSpec) -> str:
    """The chain every client packet of the farm passes (policies, tcp-strict, reset limit, persistence refresh)."""
    return f"guard-{farm.name}"


def farm_chain_name_of(name: str) -> str:
    return f"farm-{name}"


def backend_chain_name(farm: FarmSpec, backend_id: int | str) -> str:
    return f"be-{farm.name}-{backend_id}"


def fallback_chain_name(farm: FarmSpec) -> str:
    return backend_chain_name(farm, "fallback")


def traffic_counter_name(farm_name: str, direction: str) -> str:
    """Bytes of one farm in one direction: ``in`` (client to backend) or ``out`` (backend to client).
    A local farm's own counter; a NAT farm's is the sum of its backends' (:func:`backend_traffic_counter_name`)."""
    return f"traffic-{direction}-{farm_name}"


def backend_traffic_counter_name(farm_name: str, backend_id: int | str, direction: str | None = None) -> str:
    """Bytes of one backend (``fallback``: the farm's fallback address): the kernel counts each
    ``direction`` on its own; without one, the name of their sum, which the collector adds up. The
    direction comes last, so no farm name (which may hold ``-``) makes two of these names alike."""
    name = f"traffic-be-{farm_name}-{backend_id}"
    return f"{name}-{direction}" if direction else name


# A counter's direction -> the ct direction it counts and the packet's field that holds the backend's address there
TRAFFIC_DIRECTIONS = {"in": ("original", "daddr"), "out": ("reply", "saddr")}


def traffic_map(family: int, direction: str) -> str:
    """The backend's address . ct mark -> the backend's counter for ``direction`` (``in``: the packets of the
    connection's original direction, keyed by their destination; ``out``: the replies, by their source)."""
    return f"traffic{family}_{direction}"


def hook_key(chain: str) -> str:
    return f"{HOOK_PREFIX}{chain}"


def dispatch_map_name(family: int, ranged: bool, prefix: str = "dispatch") -> str:
    """A service map: exact keys (one port) in a hash map, port ranges in an interval map of their own.

    A hash lookup costs the same whatever the number of farms; an interval map keyed by a
    concatenation (the kernel's pipapo) costs in proportion to its elements. So a farm of single ports
    (the usual case) never meets an interval map, and only farms with ranges pay for one."""
    return f"{prefix}{family}_ranges" if ranged else f"{prefix}{family}"


def policy_set_name(policy: PolicySpec, family: int) -> str:
    return f"policy-{policy.name}-v{family}"


def persist_set_name(farm: FarmSpec, backend_id: int) -> str:
    """Dynamic persistence entries of one backend; the name changes when the persistence settings do."""
    definition = digest_of([farm.persistence, farm.persist_ttl, farm.family])[:6]
    return f"persist-{farm.name}-{backend_id}-{definition}"


def reuse_set_name(farm: FarmSpec, backend_id: int) -> str:
    """Client address . port pairs that went to one backend of a SNAT farm in the last ``REUSE_TTL`` seconds."""
    return f"reuse-{farm.name}-{backend_id}"


def ports_set_name(farm: FarmSpec, backend_id: int) -> str:
    """TCP source port numbers that went to one backend of a SNAT farm in the last ``REUSE_TTL`` seconds."""
    return f"ports-{farm.name}-{backend_id}"


def pick_chain_name(farm: FarmSpec, backend_id: int) -> str:
    return f"pick-{farm.name}-{backend_id}"


def elsewhere_chain_name(farm: FarmSpec, backend_id: int) -> str:
    return f"elsewhere-{farm.name}-{backend_id}"


def static_set_name(farm: FarmSpec, backend_id: int) -> str:
    return f"static-{farm.name}-{backend_id}"


def farm_key(farm_id: int) -> str:
    return f"farm:{farm_id}"


def policy_key(policy_id: int) -> str:
    return f"policy:{policy_id}"
