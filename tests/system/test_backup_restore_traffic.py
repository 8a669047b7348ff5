"""A backup restored onto a fresh appliance carries traffic: the real worker in the lab's LB namespace applies a
farm, the appliance is backed up through the API, its database and kernel are made a fresh appliance's (rows gone,
lbweb's table gone, a new worker), the archive is restored through the API, and packets reach the backends again.
The two appliances' exports and backups are compared whole."""

from __future__ import annotations

import json

import pytest

from system.backup import services as backup
from tests.conftest import OUTPUT, wait_for
from tests.support import backup_appliance
from tests.support.lab import backend4, vip4
from tests.support.stack import Worker
from tests.system.test_backup import PASSPHRASE

pytestmark = [pytest.mark.dataplane, pytest.mark.django_db(transaction=True)]

VIP = vip4(61)


def answers(lab) -> set[str]:
    return {a["backend"] for a in lab.http_get(VIP, 80, count=6)}


def comparable_export(api) -> dict:
    document = api.get("config/export/")
    document.pop("exported_at")
    return document


def test_a_restored_farm_carries_traffic_on_a_fresh_appliance(api, worker, lab, worker_env, request, admin_user):
    from accounts import services as accounts

    farm = api.farm(
        name="web", vip=VIP, protocol="tcp", ports="80", mode="dnat", scheduler="rr",
        backends=[{"address": backend4("b1")}, {"address": backend4("b2")}],
    )  # fmt: skip
    api.wait_applied(farm["id"])
    accounts.radius_update(server="198.18.0.8", secret="radius-shared-secret", actor=admin_user)
    assert answers(lab) == {"b1", "b2"}
    export_before, sections_before = comparable_export(api), backup.document()["sections"]
    response = api.session.post(api.base + "system/backup/", json={"passphrase": PASSPHRASE}, timeout=60)
    assert response.status_code == 200
    archive = response.content

    # A fresh appliance: a new database (one admin, as deploy/run.sh makes it), no lbweb table, a new worker.
    worker.stop()
    backup_appliance.wipe()
    lab.ns(lab.lb, "nft", "delete", "table", "inet", "lbweb", check=False)
    fresh = Worker(lab.lb, worker_env, OUTPUT / "logs" / f"worker-{request.node.name}-fresh.log").start()
    request.addfinalizer(fresh.stop)
    with pytest.raises(OSError):
        lab.connect(VIP, 80, timeout=1).close()
    assert comparable_export(api) != export_before

    response = api.session.post(
        api.base + "system/backup/restore/",
        files={"archive": ("appliance.lbbackup", archive)},
        data={"passphrase": PASSPHRASE},
        timeout=120,
    )
    assert response.status_code == 200, response.text
    (restored,) = api.get("farms/")["results"]
    api.wait_applied(restored["id"])
    wait_for(lambda: answers(lab) == {"b1", "b2"}, timeout=20, what="the restored farm to carry traffic")
    assert comparable_export(api) == export_before
    assert backup.document()["sections"] == sections_before
    (OUTPUT / "backup-restore-comparison.json").write_text(
        json.dumps(
            {"export_equal": True, "sections": sorted(sections_before), "counts": response.json()["counts"]}, indent=1
        )  # fmt: skip
    )
