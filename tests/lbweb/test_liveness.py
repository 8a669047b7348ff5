"""Liveness of every process, with the real worker and collector: stopping the worker shows on the API and
on every page within the stale time, with the changes that wait for it; starting it again clears the banner
and applies them."""

from __future__ import annotations

import time

import pytest
from django.test import Client

from tests.conftest import wait_for
from tests.dataplane.test_dataplane import make_farm
from tests.support.lab import vip4

pytestmark = [pytest.mark.dataplane, pytest.mark.django_db(transaction=True)]

STALE = 2.0


def banner(admin_user) -> str:
    client = Client()
    client.force_login(admin_user)
    page = client.get("/").content.decode()
    start = page.find('id="liveness-banner"')
    return page[start : page.find("</div>", start)] if start >= 0 else ""


def test_a_stopped_worker_and_the_changes_it_leaves_waiting_show_until_it_runs_again(
    api, worker, collector, lab, admin_user, settings
):
    settings.LBWEB_PROCESS_STALE_SECONDS = STALE
    settings.LBWEB_APPLY_STALL_SECONDS = 1
    farm = make_farm(api, "alive", vip4(90), scheduler="weight")

    def both_running():  # each heartbeat comes from a thread of its own process, on its own schedule
        s = api.get("status/")
        return all(s["processes"][p]["state"] == "running" for p in ("collector", "worker")) and s

    status = wait_for(both_running, what="the collector's and the worker's heartbeats")
    assert status["processes"]["worker"]["state"] == "running", status
    assert "worker not running" not in status["alerts"]
    assert "beat not running" in status["alerts"]  # no beat runs in this test: it says so
    assert "worker not running" not in banner(admin_user)

    worker.stop()
    stopped = time.monotonic()
    api.patch(f"backends/{farm['backends'][0]['id']}/", {"weight": 5})  # saved, and now waits for the worker

    def stalled_and_stopped():
        s = api.get("status/")
        return s["pending"]["stalled"] and s["processes"]["worker"]["state"] == "stopped" and s

    status = wait_for(stalled_and_stopped, what="the stall")
    assert time.monotonic() - stopped <= STALE + 5
    assert status["processes"]["worker"]["state"] == "stopped"
    assert "worker not running" in status["alerts"], status
    assert any(a.startswith("1 change waiting for ") for a in status["alerts"]), status
    text = banner(admin_user)
    assert "worker not running" in text and "1 change waiting for" in text, text

    worker.start()
    wait_for(lambda: api.get(f"farms/{farm['id']}/")["apply_status"]["status"] == "applied", what="the apply")
    status = wait_for(lambda: (s := api.get("status/"))["processes"]["worker"]["state"] == "running" and s)
    assert status["pending"] == {"changes": 0, "waiting_seconds": 0.0, "stalled": False}, status
    assert not any("worker" in a or "waiting" in a for a in status["alerts"]), status
    text = banner(admin_user)
    assert "worker not running" not in text and "waiting" not in text, text
