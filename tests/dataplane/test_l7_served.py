"""When HAProxy already serves exactly the database's HTTP farms, the worker writes nothing and records no
ApplyRun, but the farms it serves are applied: in CI a farm stayed pending for good after HAProxy's apply at
the worker's start served it without marking it (``dataplane.l7.applier._served``). A farm HAProxy serves
otherwise than stated (``unserved``) keeps its error. The whole path with the real
HAProxy is ``tests/dataplane/test_l7_worker.py``."""

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


def test_without_haproxy_a_refused_farm_is_isolated_and_the_others_wait(tmp_path, monkeypatch, settings):
    """HAProxy not running: its check still finds the farm it refuses (isolated, with its words), the files it will
    load hold every other farm, and those say HAProxy is not running (nothing is known served)."""
    from dataplane.isolation import ISOLATED
    from dataplane.l7.engine import Engine
    from l7.models import HttpService

    settings.LBWEB_MANAGE_SYSCTL = False
    monkeypatch.setattr(dataplane, "_ENGINE", Engine(tmp_path / "conf", str(tmp_path / "master.sock")))
    web = services.farm_create(name="web", vip="198.18.100.1", ports="80", mode="http")
    odd = services.farm_create(name="odd", vip="198.18.100.1", ports="81", mode="http")
    HttpService.objects.create(farm=odd, name="odd", host_regex="(?a)x")
    services.mark_farms_changed([odd.pk])
    run = dataplane.apply()
    assert not run.ok and "HAProxy is not running" in run.error and f"farm {odd.pk}: " in run.error
    rows = {f.pk: f for f in Farm.objects.all()}
    assert rows[odd.pk].apply_status == "failed" and rows[odd.pk].apply_error.startswith(ISOLATED)
    assert "(?a)x" in rows[odd.pk].apply_error
    assert rows[web.pk].apply_status == "failed" and "HAProxy is not running" in rows[web.pk].apply_error
    written = (tmp_path / "conf" / "lbweb.cfg").read_text()
    assert f"frontend f{web.pk}\n" in written and "(?a)x" not in written
