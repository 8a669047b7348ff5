"""When HAProxy already serves exactly the database's HTTP farms, the worker writes nothing and records no
ApplyRun, but the farms it serves are applied: in CI a farm stayed pending for good after HAProxy's apply at
the worker's start served it without marking it (``dataplane.l7.applier._served``). A farm HAProxy serves
otherwise than stated (``unserved``) keeps its error. The whole path with the real
HAProxy is ``tests/test_l7_worker.py``."""

from __future__ import annotations

import pytest

from dataplane.l7 import applier as dataplane
from farms import services
from farms.models import Farm
from l7.specs import snapshot

pytestmark = pytest.mark.django_db


def test_farms_haproxy_already_serves_are_marked_applied_and_an_error_is_kept():
    served = services.farm_create(name="web", vip="198.18.100.1", ports="80", mode="http")
    idle = services.farm_create(name="tls", vip="198.18.100.2", ports="443", mode="https")
    Farm.objects.filter(pk=idle.pk).update(apply_error="An HTTPS farm needs a certificate")
    later = services.farm_create(name="later", vip="198.18.100.3", ports="80", mode="http")  # after the snapshot
    generation = Farm.objects.get(pk=idle.pk).config_generation
    farms = {f.pk: f.config_generation for f in Farm.objects.filter(pk__in=[served.pk, idle.pk, later.pk])}
    notes = dataplane.unserved(snapshot()[1])  # the HTTPS farm without a certificate does not listen
    dataplane._served(generation, farms, notes, held={})
    rows = {f.pk: f for f in Farm.objects.all()}
    assert rows[served.pk].apply_status == "applied" and rows[served.pk].applied_generation == generation
    assert rows[idle.pk].applied_generation == 0  # it does not listen: its error stays, not "applied"
    assert rows[later.pk].apply_status == "pending"  # written after what HAProxy serves
