"""The database rows in the compiler's words: row -> spec, and one consistent snapshot of them.

Read by the worker (``dataplane/applier.py``) and by the web process (``preview.py``, :func:`farm_traffic`), so
it imports no kernel I/O and nothing of the worker: only the models and the pure compiler (``compiler/``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import compiler
from compiler.spec import BackendSpec, FarmSpec, PolicySpec, SessionSpec
from lbweb.db import read_snapshot

from .choices import L7_MODES, FarmAllDownChoices, FarmSchedulerChoices, FarmStateChoices
from .models import ConfigGeneration, Farm, Policy
from .validation import parse_port_range, session_key_parts


def farm_spec(farm: Farm) -> FarmSpec:
    """The compiler's view of one farm row (backends, policies and sessions prefetched)."""
    leastconn = farm.scheduler == FarmSchedulerChoices.LEASTCONN
    backends = []
    for b in farm.backends.all():
        load = getattr(b, "load", None) if leastconn else None
        backends.append(
            BackendSpec(
                id=b.id,
                address=b.address,
                port=b.port,
                weight=load.weight if load else b.weight,
                state=b.state,
                priority=b.priority,
                healthy=getattr(b, "health", "up") != "down",
                est_connlimit=b.est_connlimit,
                mac=b.mac or None,
                fwmark=b.mark,
                oface=b.oface,
                source_addr=b.source_addr,
            )
        )
    return FarmSpec(
        id=farm.id,
        name=farm.name,
        vip=farm.vip,
        protocol=farm.protocol,
        ports=tuple(farm.port_ranges),
        mode=farm.mode,
        scheduler=farm.scheduler,
        enabled=farm.state == FarmStateChoices.UP,
        backends=tuple(backends),
        sched_param=tuple(farm.sched_param.split()),
        persistence=tuple(farm.persistence.split()),
        persist_ttl=farm.persist_ttl,
        source_addr=farm.source_addr,
        source_ports=parse_port_range(farm.source_ports) if farm.source_ports else None,
        new_rtlimit=farm.new_rtlimit,
        new_rtlimit_unit=farm.new_rtlimit_unit,
        new_rtlimit_burst=farm.new_rtlimit_burst,
        rst_rtlimit=farm.rst_rtlimit,
        rst_rtlimit_unit=farm.rst_rtlimit_unit,
        rst_rtlimit_burst=farm.rst_rtlimit_burst,
        limits_ttl=farm.limits_ttl,
        est_connlimit=farm.est_connlimit,
        limit_verdict=farm.limit_verdict,
        log=farm.log,
        log_forward=farm.log_forward,
        log_output=farm.log_output,
        log_prefix=farm.log_prefix,
        log_rtlimit=farm.log_rtlimit,
        log_rtlimit_unit=farm.log_rtlimit_unit,
        log_drops=farm.log_drops,
        fwmark=farm.mark,
        oface=farm.oface,
        ether_addr=farm.ether_addr,
        helper=farm.helper,
        tcp_strict=farm.tcp_strict,
        intra_connect=farm.intra_connect,
        flow_offload=farm.flow_offload,
        count_bytes=farm.count_bytes,
        interface=farm.interface,
        policies=tuple(policy_spec(p) for p in farm.policies.all()),
        sessions=tuple(
            SessionSpec(client=session_key_parts(s.client, farm), backend_id=s.backend_id)
            for s in farm.static_sessions.all()
        ),
        fallback=fallback_spec(farm),
    )


def farm_traffic(farm: Farm) -> str:
    """Where new connections to ``farm`` go now (FarmTrafficChoices), decided exactly as the compiler decides it."""
    return farm_spec(farm).traffic


def fallback_spec(farm: Farm) -> BackendSpec | None:
    """Where a farm sends new connections while no backend is active, when it has such an address."""
    if farm.when_all_down == FarmAllDownChoices.FALLBACK and farm.fallback_address:
        return BackendSpec(id=0, address=farm.fallback_address, port=farm.fallback_port)
    return None


def policy_spec(policy: Policy) -> PolicySpec:
    return PolicySpec(id=policy.id, name=policy.name, type=policy.type, elements=tuple(policy.element_list))


@dataclass
class Snapshot:
    """A consistent read of the whole configuration and its generation."""

    generation: int
    specs: list[FarmSpec]
    policies: list[PolicySpec]
    failures: dict[int, str] = field(default_factory=dict)  # farms that cannot be compiled here, and why

    def compiled(self) -> dict[str, compiler.UnitRuleset]:
        good = [s for s in self.specs if s.id not in self.failures]
        return compiler.compile_units(good, self.policies)


def farms_queryset():
    """The kernel's farms: HTTP and HTTPS farms are HAProxy's (dataplane/l7/applier.py)."""
    return (
        Farm.objects.exclude(mode__in=L7_MODES)
        .prefetch_related("backends__load", "policies", "static_sessions")
        .order_by("id")
    )


def snapshot() -> Snapshot:
    with read_snapshot():  # every farm read at once: web writes must not wait for it (lbweb/db.py)
        generation = ConfigGeneration.current()
        specs = [farm_spec(f) for f in farms_queryset().iterator(chunk_size=500)]  # not 10,000 farms' rows at once
        policies = [policy_spec(p) for p in Policy.objects.order_by("id")]
    return Snapshot(generation, specs, policies)
