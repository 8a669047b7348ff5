"""Configuration history, the audit log's filters and the apply history, in Debian's chromium (Playwright)
against a live server and the real worker in the lab's LB namespace. Every page is checked with axe-core
(0 violations) and photographed to test-output/ops-*.png.

The operator changes a farm, compares the two configurations the worker kept, restores the first one
after its preview, finds the restore in the audit log by filtering, and then sees the apply history say
that the worker stopped and changes are waiting.
"""

from __future__ import annotations

import datetime

import pytest
from axe_playwright_python.sync_playwright import Axe

from tests.conftest import OUTPUT, wait_for
from tests.farms.test_ui_browser import log_in
from tests.support.lab import backend4, vip4

pytestmark = [pytest.mark.dataplane, pytest.mark.django_db(transaction=True)]

VIP = vip4(121)


def shot(page, name: str) -> None:
    page.screenshot(path=str(OUTPUT / f"ops-{name}.png"), full_page=True)


def accessible(page) -> None:
    """axe-core over the whole page: no violation of any rule it runs."""
    results = Axe().run(page)
    assert results.violations_count == 0, results.generate_report()


def test_history_restore_audit_filters_and_a_stalled_worker(
    live_server, admin_user, api, worker, lab, browser_page, csp_violations, settings
):
    settings.LBWEB_PROCESS_STALE_SECONDS = 2
    settings.LBWEB_APPLY_STALL_SECONDS = 1
    page, base = browser_page, live_server.url
    farm = api.farm(name="shop", vip=VIP, ports="80", mode="dnat", backends=[{"address": backend4("b1")}])
    api.wait_applied(farm["id"])
    # (the ORM cannot be used here: Playwright's sync API runs an event loop in this thread)
    newest = lambda: (api.get("config-versions/")["results"] or [None])[0]  # noqa: E731
    first = wait_for(lambda: (v := newest()) and v["farms"] == 1 and v["id"], what="the version with the farm")
    api.patch(f"farms/{farm['id']}/", {"ports": "80,8080"})
    api.wait_applied(farm["id"])
    second = wait_for(lambda: (v := newest()) and v["id"] != first and v["id"], what="a second version")

    log_in(page, base, "admin", "admin-password")
    page.get_by_role("link", name="Config history").click()
    page.wait_for_selector(f"#version-{second}")
    shot(page, "1-history")
    accessible(page)
    page.get_by_role("button", name="Compare the chosen versions").click()
    page.wait_for_selector("#diff-summary")
    summary = page.text_content("#diff-summary")
    assert "~ shop" in summary and "ports" in summary and "80,8080" in summary
    page.get_by_text("The documents side by side").click()
    assert '+      "ports": "80,8080",' in page.text_content("#diff-text")
    shot(page, "2-diff")
    accessible(page)

    page.get_by_role("link", name=f"Restore version {first}…").click()
    page.wait_for_selector("#import-changes")
    assert "~ shop" in page.text_content("#import-changes")
    assert api.get(f"farms/{farm['id']}/")["ports"] == "80,8080"  # the preview changed nothing
    shot(page, "3-restore-preview")
    accessible(page)
    page.get_by_role("button", name=f"Restore version {first}").click()
    page.wait_for_selector("text=restored; the kernel follows")
    assert api.wait_applied(farm["id"])["ports"] == "80"

    page.get_by_role("link", name="Audit log").click()
    page.select_option("#f-farm", label="shop")
    page.select_option("#f-action", "update")
    page.fill("#f-from", datetime.date.today().isoformat())
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url("**/audit-events/?*")
    rows = page.locator("table.events tbody tr")
    assert rows.count() == 1 and "admin" in rows.first.text_content() and "ports" in rows.first.text_content()
    page.select_option("#f-action", "restore")
    page.select_option("#f-farm", "")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_selector(f"text=configuration version {first}")
    shot(page, "4-audit-filtered")
    accessible(page)

    page.get_by_role("link", name="Apply history").click()
    assert "running" in page.text_content("#worker-state")
    accessible(page)
    worker.stop()
    api.patch(f"farms/{farm['id']}/", {"ports": "81"})

    def stalled() -> bool:
        page.reload()
        state = page.text_content("#worker-state")
        return "not running" in state and "stalled" in state

    wait_for(stalled, timeout=20, what="the apply history saying the worker stopped")
    shot(page, "5-apply-history-stalled")
    accessible(page)
    assert csp_violations == []
