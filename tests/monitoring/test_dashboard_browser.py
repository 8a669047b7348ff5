"""The dashboard in a real browser (Debian's chromium driven by Playwright) against a live server and live data."""

from __future__ import annotations

import contextlib
import threading
import time

import pytest
import redis

from lbweb import heartbeat
from tests.conftest import OUTPUT, wait_for
from tests.support.lab import backend4, vip4

pytestmark = [pytest.mark.dataplane, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def steady_traffic(lab):
    """Small downloads through farm 'shown' until the test ends, so the charts have something to draw."""
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError):
                lab.download(vip4(90), 40_000, count=2)
            stop.wait(0.1)

    thread = threading.Thread(target=run, daemon=True)
    yield thread
    stop.set()
    thread.join(timeout=10)


def points_drawn(page, chart: str, dataset: int = 0) -> int:
    return page.evaluate(
        "([c, i]) => { const ch = Chart.getChart(c); const d = ch && ch.data.datasets[i];"
        " return d ? d.data.filter(p => p.y !== null && p.y > 0).length : 0; }",
        [chart, dataset],
    )


def test_dashboard_draws_live_charts_and_says_when_data_is_stale(
    api,
    lab,
    collector,
    live_server,
    browser_page,
    csp_violations,
    steady_traffic,
    settings,
):
    farm = api.farm(
        name="shown",
        vip=vip4(90),
        protocol="tcp",
        ports="80",
        mode="snat",
        scheduler="rr",
        backends=[{"address": backend4(b)} for b in ("b1", "b2")],
    )
    api.wait_applied(farm["id"])
    uncounted = api.farm(
        name="uncounted",
        vip=vip4(91),
        protocol="tcp",
        ports="80",
        mode="dnat",
        scheduler="rr",
        count_bytes=False,
        backends=[{"address": backend4("b1")}],
    )
    api.wait_applied(uncounted["id"])
    # healthd runs but cannot reach the backends' network: the dashboard must say so
    settings.LBWEB_HEALTHD_STALE_SECONDS = 120
    own_error = "this appliance's interface br0 towards 198.18.1.12 has no carrier"
    beat = {"pid": 1, "backends": 2, "last_local_error": own_error, "last_local_error_at": time.time()}
    redis.Redis.from_url(settings.REDIS_URL).set(heartbeat.KEY, heartbeat.encode(beat))
    steady_traffic.start()
    held = [lab.connect(vip4(90), 80) for _ in range(3)]
    page = browser_page
    try:
        page.goto(f"{live_server.url}/admin/login/?next=/monitoring/")
        page.fill("#id_username", "admin")
        page.fill("#id_password", "admin-password")
        page.click("input[type=submit]")
        page.wait_for_url("**/monitoring/")

        wait_for(lambda: points_drawn(page, "chart-throughput", 1) >= 3, what="throughput drawn")
        wait_for(lambda: points_drawn(page, "chart-conns") >= 3, what="connections drawn")
        assert page.evaluate("Chart.getChart('chart-cpu').data.datasets.length") >= 1
        assert page.evaluate("Chart.getChart('chart-conntrack').data.datasets[1].data.some(p => p.y > 0)")
        page.wait_for_selector("#farm-rows a:text('shown')")
        page.wait_for_selector("#link-rows td:text('cli0')")  # the LB's interfaces, from pyroute2
        assert "Live" in page.text_content("#freshness")
        assert page.text_content("#card-healthd") == "impaired"
        assert page.is_visible("#healthd-warning") and own_error in page.text_content("#healthd-warning")
        page.screenshot(path=str(OUTPUT / "dashboard-overview.png"), full_page=True)

        page.click("#farm-rows a:text('shown')")
        page.wait_for_url(f"**/monitoring/farms/{farm['id']}/")
        wait_for(lambda: points_drawn(page, "chart-throughput", 1) >= 3, what="farm throughput drawn")
        wait_for(lambda: points_drawn(page, "chart-backend-traffic") >= 2, what="backend traffic drawn")
        wait_for(lambda: points_drawn(page, "chart-active") >= 1, what="active connections drawn")
        serving = "() => Chart.getChart('chart-states').data.datasets[0].data.length"  # one bar per backend
        wait_for(lambda: page.evaluate(serving) >= 2, what="backend states drawn (recorded history, one bar each)")
        page.screenshot(path=str(OUTPUT / "dashboard-farm.png"), full_page=True)

        # A farm that does not count its bytes says so where its bytes would be, not "0" or "no traffic".
        page.goto(f"{live_server.url}/monitoring/farms/{uncounted['id']}/")
        page.wait_for_function("() => document.getElementById('card-in').textContent === 'not counted'")
        notes = page.eval_on_selector_all(".chart-empty:not([hidden])", "els => els.map(e => e.textContent)")
        assert sum("Bytes not counted" in note for note in notes) == 2, notes  # throughput, and per backend
        page.go_back()
        page.wait_for_url(f"**/monitoring/farms/{farm['id']}/")
        wait_for(lambda: points_drawn(page, "chart-throughput", 1) >= 3, what="farm throughput drawn again")

        collector.stop()
        page.wait_for_function(
            "() => document.getElementById('freshness').textContent.includes('no data for')", timeout=20_000
        )
        assert points_drawn(page, "chart-throughput", 1) >= 3  # what was drawn stays; nothing turned into zeros
        page.screenshot(path=str(OUTPUT / "dashboard-stale.png"), full_page=True)
        assert csp_violations == []  # the charts ran under the Content-Security-Policy (no inline script)
    finally:
        for sock in held:
            sock.close()


@pytest.fixture
def unread_farm(live_server, admin_user, redis_server, settings):
    """A sample where the collector could not read one farm's figures (made before the browser starts)."""
    from collector.sampler import Sample, error_entry
    from farms import services
    from monitoring.store import MetricStore, client

    settings.REDIS_URL = redis_server.url
    redis.Redis.from_url(redis_server.url).flushdb()
    farm = services.farm_create(name="shop", vip="198.18.100.1", protocol="tcp", ports="80", mode="http")
    why = "HAProxy's statistics unavailable: the master socket does not answer"
    MetricStore(client(redis_server.url)).write(Sample(t=time.time(), system={}, farms={farm.id: error_entry(why)}))
    return farm, why


def test_a_farm_whose_figures_the_collector_could_not_read_says_why_on_its_row(
    unread_farm, live_server, browser_page, csp_violations
):
    from tests.farms.test_ui_browser import log_in

    farm, why = unread_farm
    page = browser_page
    log_in(page, live_server.url, "admin", "admin-password")
    page.goto(f"{live_server.url}/monitoring/")
    page.wait_for_selector("#farm-rows .farm-metrics-error")
    row = page.text_content("#farm-rows tr:has(a:text('shop'))")
    assert why in row and "0 b/s" not in row, row
    assert csp_violations == []
