"""conntrackd's plug-in: the cluster's fields that reach conntrackd.conf (the sync interface, both nodes' sync
addresses, and their VRRP addresses in its ignore list). ``engine_check`` runs conntrackd's own parser on lbweb's
file (``conntrackd -C FILE -s``, see ``cluster.engine_check``) and checks each value is one word on its line."""

from __future__ import annotations

from bench.fuzz.setup import django_ready

django_ready()

from tests.cluster_engines import CONNTRACKD_FIELDS as FIELDS  # noqa: E402
from tests.cluster_engines import shared_lab, validation_errors  # noqa: E402

__all__ = ["FIELDS", "clean", "engine_check"]


def clean(values: dict) -> dict | None:
    return validation_errors(values)


def engine_check(values: dict) -> tuple[bool, str]:
    return shared_lab().run(lambda lab: lab.conntrackd_verdict(values))
