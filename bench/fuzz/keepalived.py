"""keepalived's plug-in: the cluster's fields that reach keepalived.conf (the VRRP password, both nodes' names,
addresses and priorities, the management address, the interfaces, the virtual router id, the advert interval and
version, the preemption delay, conntrackd tracking). ``engine_check`` runs ``keepalived -t`` on lbweb's file, then
keepalived itself, and compares its dump (``-d``) with the values given (``tests/cluster_engines.py``)."""

from __future__ import annotations

from bench.fuzz.setup import django_ready

django_ready()

from tests.cluster_engines import KEEPALIVED_FIELDS as FIELDS  # noqa: E402
from tests.cluster_engines import shared_lab, validation_errors  # noqa: E402

__all__ = ["FIELDS", "clean", "engine_check"]


def clean(values: dict) -> dict | None:
    return validation_errors(values)


def engine_check(values: dict) -> tuple[bool, str]:
    return shared_lab().run(lambda lab: lab.keepalived_verdict(values))
