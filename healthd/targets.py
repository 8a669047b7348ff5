"""What healthd probes, read from the database: one target per backend of every farm that is up."""

from __future__ import annotations

from farms.choices import FarmStateChoices, HealthCheckTypeChoices
from farms.models import ConfigGeneration, Farm, HealthCheck

from .probes import CheckSpec, Target


def check_spec(check: HealthCheck) -> CheckSpec:
    """The daemon's plain copy of a farm's (effective) health check."""
    return CheckSpec(
        type=check.type,
        interval=check.interval,
        timeout=check.timeout,
        rise=check.rise,
        fall=check.fall,
        http_method=check.http_method,
        http_path=check.http_path,
        http_statuses=tuple(check.status_ranges),
        http_body=check.http_body,
        http_host=check.http_host,
        tls_verify=check.tls_verify,
        udp_send=check.udp_send,
        udp_expect=check.udp_expect,
        command=check.command,
    )


def load_targets() -> tuple[int, dict[int, Target], dict[int, str]]:
    """The configuration generation, a target per checked backend, and each one's recorded health."""
    generation = ConfigGeneration.current()
    farms = Farm.objects.filter(state=FarmStateChoices.UP).select_related("health_check").prefetch_related("backends")
    targets: dict[int, Target] = {}
    health: dict[int, str] = {}
    for farm in farms:
        check = HealthCheck.effective_for(farm)
        if check.type == HealthCheckTypeChoices.NONE:
            continue
        spec = check_spec(check)
        for backend in farm.backends.all():
            targets[backend.id] = Target(backend.id, farm.id, backend.address, check.probe_port(backend), spec)
            health[backend.id] = backend.health
    return generation, targets, health


def passive_backends() -> frozenset[int]:
    """The backends of HTTP farms that are up whose passive health HAProxy watches (``passive_errors``)."""
    from l7.models import L7Backend

    rows = L7Backend.objects.filter(passive_errors__gt=0, backend__farm__state=FarmStateChoices.UP)
    return frozenset(rows.values_list("backend_id", flat=True))
