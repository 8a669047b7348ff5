"""Charts that tell the truth and a cut that asks first, in Debian's chromium (Playwright) against the real
stack in the lab's namespaces: the worker and the collector in the LB namespace, healthd probing real
backends, real connections through a farm. Screenshots: test-output/history-*.png; axe-core on every page.

* A farm's charts begin at its creation (the collector sampled before it existed: none of that shows), its
  backends' states over time come from what was recorded (the cut, the bulk enable, healthd's "down"),
  and a farm without traffic says "No traffic yet." over an empty plot with no made-up axis.
* "Cut…" shows the backend's open connections (the newest conntrack census) before anything happens;
  the audit entry of the cut says how many the worker ended, and the number is the one shown.
* Bulk enable from the farm page puts the cut backend back, audited like a single change.
* A farm without backends says it rejects new connections, and a client's connection is refused at once
  (a TCP reset from the kernel's rule), not left to time out.
"""

from __future__ import annotations

import contextlib
import time

import pytest

from farms.models import AuditEvent
from tests.conftest import OUTPUT, ROLE_PASSWORD, wait_for
from tests.farms.test_ui_browser import log_in
from tests.healthd.test_health import healthd, prober, wait_health  # noqa: F401 (fixtures)
from tests.support import axe
from tests.support.lab import backend4, vip4

pytestmark = [pytest.mark.dataplane, pytest.mark.django_db(transaction=True)]

VIP, QUIET_VIP, EMPTY_VIP = vip4(130), vip4(131), vip4(132)


def shot(page, name: str) -> None:
    page.screenshot(path=str(OUTPUT / f"history-{name}.png"), full_page=True)


def census_of(page, address: str) -> int | None:
    backend_id = page.get_attribute(f"#backend-table tr[data-address='{address}']", "id").split("-")[1]
    text = page.text_content(f"[data-conns-for='{backend_id}']").strip()
    return int(text) if text.isdigit() else None


def timeline(page) -> dict[str, list[str]]:
    """Backend label -> the statuses of its bars, oldest first (the chart's own data); bars of one status in a
    row (health unknown, then up: both serving) read as one."""
    return page.evaluate(
        """() => {
            const chart = Chart.getChart('chart-states');
            const rows = {};
            for (const d of chart.data.datasets)
              for (const bar of d.data) (rows[bar.y] = rows[bar.y] || []).push([bar.x[0], d.label]);
            for (const k of Object.keys(rows))
              rows[k] = rows[k].sort((a, b) => a[0] - b[0]).map((x) => x[1]).filter((s, i, all) => s !== all[i - 1]);
            return rows;
        }"""
    )


def test_charts_from_recorded_history_and_a_cut_that_counts(
    api,
    lab,
    collector,
    healthd,  # noqa: F811 (the fixture imported above)
    live_server,
    role_users,
    browser_page,
    csp_violations,
    monkeypatch,
):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # the test reads the audit between browser steps
    time.sleep(3)  # the collector samples for a while before the farm exists
    farm = api.farm(
        name="truth", vip=VIP, protocol="tcp", ports="80", mode="snat", scheduler="rr",
        backends=[{"address": backend4("b1")}, {"address": backend4("b2")}, {"address": backend4("b3"), "port": 81}],
    )  # fmt: skip
    check = {"farm": farm["id"], "type": "tcp", "interval": 0.5, "timeout": 0.2, "rise": 1, "fall": 1}
    api.post("health-checks/", check)
    quiet = api.farm(name="quiet", vip=QUIET_VIP, protocol="tcp", ports="80", mode="snat", scheduler="rr",
                     backends=[{"address": backend4("b1")}])  # fmt: skip
    ids = {b["address"] if b["port"] is None else f"{b['address']}:{b['port']}": b["id"] for b in
           api.get(f"backends/?farm={farm['id']}")["results"]}  # fmt: skip
    healthd()
    wait_health(api, ids[f"{backend4('b3')}:81"], "down", timeout=20)  # nothing listens on port 81
    api.wait_applied(farm["id"])
    api.wait_applied(quiet["id"])

    page, base = browser_page, live_server.url
    log_in(page, base, "operator-user", ROLE_PASSWORD)
    page.goto(f"{base}/farms/{farm['id']}/")
    with contextlib.ExitStack() as held:
        for _ in range(6):  # round robin over b1 and b2 (b3 is down): three each
            held.enter_context(lab.connect(VIP, 80))
        wait_for(lambda: census_of(page, backend4("b1")) == 3, timeout=30, what="b1's open connections on the page")
        b3 = " ".join(page.text_content(f"#backend-table tr[data-address='{backend4('b3')}']").split())
        assert "Down: TCP connect" in b3 and "no: down" in b3 and "since" in b3
        shot(page, "1-farm")
        axe.assert_none(page)

        page.get_by_role("link", name=f"Cut {backend4('b1')}").click()
        page.wait_for_selector("#cut-count")
        shown = int(page.get_attribute("[data-connections]", "data-connections"))
        assert shown == 3 and "3 open connections end at once" in " ".join(page.text_content("#cut-count").split())
        assert AuditEvent.objects.filter(action="maintenance").count() == 0  # asking changed nothing
        shot(page, "2-cut-confirm")
        axe.assert_none(page)
        page.get_by_role("button", name=f"Cut {backend4('b1')} now").click()
        page.wait_for_selector(f"#backend-table tr[data-address='{backend4('b1')}'] td[data-state='disabled']")
        event = wait_for(
            lambda: AuditEvent.objects.filter(action="maintenance", after__connections_cut__isnull=False).first(),
            timeout=30, what="the cut's count in the audit",
        )  # fmt: skip
        assert event.after["connections_cut"] == shown and event.actor_name == "operator-user"

    page.goto(f"{base}/audit-events/?farm_ref={farm['id']}")
    assert f"connections ended: {shown}" in page.text_content(f"#event-{event.pk}")
    shot(page, "3-audit-cut")

    page.goto(f"{base}/farms/{farm['id']}/")
    page.check(f"input[aria-label='Select {backend4('b1')}']")
    page.check(f"input[aria-label='Select {backend4('b2')}']")
    page.locator("#bulk-form").get_by_role("button", name="Enable").click()
    page.wait_for_selector(f"#backend-table tr[data-address='{backend4('b1')}'] td[data-state='enabled']")
    enabled = AuditEvent.objects.filter(action="update", object_id=ids[backend4("b1")]).first()
    assert enabled.after["state"] == "enabled" and enabled.actor_name == "operator-user"
    assert not AuditEvent.objects.filter(action="update", object_id=ids[backend4("b2")]).exists()
    api.wait_applied(farm["id"])
    time.sleep(2)  # the enabled period shows as a bar of its own

    # -- the farm's dashboard: from its creation, states as recorded ---------------------------------------
    page.goto(f"{base}/monitoring/farms/{farm['id']}/")
    page.wait_for_function(
        "() => window.Chart && Chart.getChart('chart-states') && Chart.getChart('chart-states').data.datasets.length",
        polling=100,
    )  # noqa: E501
    series = api.get(f"metrics/farms/{farm['id']}/?window=15m")
    created = series["farm"]["created"]
    assert series["window_start"] == created
    assert all(p["t"] >= created - series["step"] for p in series["points"])  # nothing from before the farm
    assert page.evaluate("Chart.getChart('chart-throughput').options.scales.x.min") >= created * 1000
    for chart in ("chart-throughput", "chart-conns", "chart-active"):  # whole steps only: no "0.1 bit/s"
        assert page.evaluate(f"Chart.getChart('{chart}').scales.y.ticks.every((t) => Number.isInteger(t.value))")
    rows = timeline(page)
    assert rows[f"{backend4('b3')}:81"][-1] == "down"
    assert rows[backend4("b1")][-2:] == ["disabled", "serving"], rows  # the cut, then the bulk enable
    assert rows[backend4("b2")] == ["serving"]
    shot(page, "4-farm-dashboard")
    axe.assert_none(page)

    page.goto(f"{base}/monitoring/farms/{quiet['id']}/")
    page.wait_for_function("() => document.querySelector('#chart-throughput + .chart-empty') !== null", polling=100)
    assert page.is_visible("#chart-throughput + .chart-empty")
    assert page.text_content("#chart-throughput + .chart-empty") == "No traffic yet."
    assert page.evaluate("Chart.getChart('chart-throughput').options.scales.y.ticks.display") is False
    shot(page, "5-quiet-dashboard")
    axe.assert_none(page)

    empty = api.farm(name="empty", vip=EMPTY_VIP, protocol="tcp", ports="80", mode="snat", scheduler="rr")
    api.wait_applied(empty["id"])
    page.goto(f"{base}/farms/{empty['id']}/")
    words = "It has no backend: the farm rejects new connections (a TCP reset)."
    assert page.text_content("#farm-traffic") == words and words in page.text_content("#no-backends")
    started = time.monotonic()
    with pytest.raises(ConnectionRefusedError):  # the reset, as the page says
        lab.connect(EMPTY_VIP, 80, timeout=3)
    assert time.monotonic() - started < 1
    assert csp_violations == []
