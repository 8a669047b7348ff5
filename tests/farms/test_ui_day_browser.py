"""An operator's day through Debian's chromium (Playwright), page by page as issue 18 asks, with axe-core on
every page of lbweb (0 violations) and no Content-Security-Policy violation. Screenshots: test-output/day-*.png.

* Forms that fit the farm: the first field has the focus, required fields are marked, fields come and go
  with the mode and the scheduler, an option the kernel lacks (flow offload without flowtables) is
  disabled with the reason, select texts are not cut off; the preview says the change in plain words with
  the JSON one click away; backends are added inline ("Add another") with the shares they will get.
* Health on the farm page: the check it runs, the "impaired" banner as on the list, a disabled backend
  that reads "disabled", not "takes traffic", an empty farm that says it rejects (as its rules do); a viewer
  reads the health check (labels "HTTP method", "TLS verify") and cannot change it.
* Bulk states from the farm page; the menu marks the current page; the API docs carry lbweb's header;
  on a 390 px screen the page stays 390 px wide and the tables scroll in their box.

The data-plane half (charts from recorded history, the cut with its count) is in test_ui_history_browser.py.
"""

from __future__ import annotations

import json
import time

import pytest
import redis

from farms import capabilities, health_services
from farms.models import AuditEvent, Backend, Farm
from lbweb import heartbeat
from tests.conftest import OUTPUT, ROLE_PASSWORD
from tests.farms.test_ui_browser import log_in
from tests.support import axe

pytestmark = pytest.mark.django_db(transaction=True)

OWN_ERROR = "this appliance's interface br0 towards 198.18.1.12 has no carrier"


def shot(page, name: str, full_page: bool = True) -> None:
    page.screenshot(path=str(OUTPUT / f"day-{name}.png"), full_page=full_page)


def cut_off_selects(page) -> list[str]:
    """Selects whose chosen text is wider than the box shows (measured with the select's own font)."""
    return page.evaluate(
        """() => Array.from(document.querySelectorAll('form.edit select')).filter((s) => s.offsetParent !== null)
            .filter((s) => {
              const text = s.options[s.selectedIndex] ? s.options[s.selectedIndex].text : '';
              const ctx = document.createElement('canvas').getContext('2d');
              ctx.font = getComputedStyle(s).font;
              return ctx.measureText(text).width > s.clientWidth - 28;  // the arrow and the padding
            }).map((s) => s.name)"""
    )


def shown(page, name: str) -> bool:
    return page.is_visible(f"#field-{name}")


@pytest.fixture(autouse=True)
def orm_beside_the_browser(monkeypatch):
    """Playwright's sync API runs an event loop in this thread; the test reads the database between its
    steps (nothing runs concurrently on that connection), which Django allows only when told."""
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


@pytest.fixture
def kernel_without_flowtables(redis_server, settings):
    """What a worker on a kernel without CONFIG_NF_FLOW_TABLE publishes (farms/capabilities.py)."""
    settings.REDIS_URL = redis_server.url
    client = redis.Redis.from_url(redis_server.url)
    client.set(capabilities.REDIS_KEY, json.dumps({"flowtable": False, "reject-nat": True}))
    capabilities.forget()
    yield
    client.delete(capabilities.REDIS_KEY)
    capabilities.forget()


@pytest.fixture
def healthd_impaired(redis_server, settings):
    """healthd's heartbeat as it writes it when its own network fails."""
    settings.LBWEB_HEALTHD_STALE_SECONDS = 600
    client = redis.Redis.from_url(redis_server.url)
    beat = {"pid": 1, "backends": 3, "last_local_error": OWN_ERROR, "last_local_error_at": time.time()}
    client.set(heartbeat.KEY, heartbeat.encode(beat))
    yield
    client.delete(heartbeat.KEY)


@pytest.fixture
def certificate(tmp_path, monkeypatch):
    """The TLS page shows the web server's certificate: one made by the set-up's command, in a state dir of its own."""
    from django.core.management import call_command

    monkeypatch.setenv("LBWEB_VAR_DIR", str(tmp_path / "var"))
    call_command("ensure_tls")


def test_forms_health_and_bulk_states_in_a_browser(
    live_server,
    admin_user,
    role_users,
    kernel_without_flowtables,
    healthd_impaired,
    certificate,
    browser_page,
    csp_violations,
):
    page, base = browser_page, live_server.url
    page.goto(f"{base}/accounts/login/")
    axe.assert_none(page)
    log_in(page, base, "admin", "admin-password")
    assert page.get_attribute("nav[aria-label=Main] a[aria-current=page]", "href") == "/"
    axe.assert_none(page)

    # -- a new farm: the form fits the farm ----------------------------------------------------------
    page.get_by_role("link", name="New farm").click()
    page.wait_for_function("() => document.activeElement.id === 'id_name'")  # the first field has the focus
    assert page.get_attribute("#id_name", "aria-required") == "true"
    assert page.is_visible("#field-vip.required") and not page.is_visible("#field-description.required")
    assert page.is_disabled("#id_flow_offload")  # the kernel has no flowtables: offered disabled, with why
    assert "no flowtables" in page.text_content("#field-flow_offload")
    page.select_option("#id_mode", "dnat")
    assert not shown(page, "source_addr") and not shown(page, "interface")  # SNAT and DSR fields go away
    page.select_option("#id_scheduler", "hash")
    assert shown(page, "sched_param") and shown(page, "persistence")  # hash + persistence: allowed, as in nftlb
    page.select_option("#id_mode", "dsr")
    assert shown(page, "interface") and not shown(page, "helper") and not shown(page, "flow_offload")
    page.select_option("#id_when_all_down", "fallback")
    assert shown(page, "fallback_address")
    page.select_option("#id_when_all_down", "reject")
    assert not shown(page, "fallback_address")
    assert cut_off_selects(page) == []
    shot(page, "1-new-farm-dsr")
    axe.assert_none(page)

    page.select_option("#id_mode", "dnat")
    page.select_option("#id_scheduler", "weight")
    assert shown(page, "persistence") and not shown(page, "sched_param")
    page.fill("#id_name", "shop")
    page.fill("#id_vip", "198.18.50.1")
    page.fill("#id_ports", "80,443")
    assert cut_off_selects(page) == []
    page.get_by_role("button", name="Preview the kernel change").click()
    page.wait_for_selector("#preview-summary")
    summary = page.text_content("#preview-summary")
    assert "+ farm shop: VIP 198.18.50.1 tcp/80,443, DNAT, weighted" in summary
    assert "the farm rejects" not in summary and "new connections: rejected (TCP reset)" in summary
    assert not page.is_visible("#preview-commands")  # the JSON is one click away
    page.click("#preview-commands-box summary")
    assert page.is_visible("#preview-commands") and "farm-shop" in page.text_content("#preview-commands")
    shot(page, "2-preview-summary")
    axe.assert_none(page)
    page.get_by_role("button", name="Save").click()
    page.wait_for_selector("h1:has-text('Farm shop')")
    farm = Farm.objects.get(name="shop")

    # -- an empty farm says what its rules do: reject ---------------------------------------------------
    assert "It has no backend: the farm rejects new connections (a TCP reset)." in page.text_content("#farm-traffic")
    assert page.get_attribute("nav[aria-label=Main] a[aria-current=page]", "href") == "/"
    # -- backends inline: "Add another", with the shares in the preview --------------------------------
    for index, (address, weight) in enumerate((("198.18.1.11", "5"), ("198.18.1.12", "3"), ("198.18.1.13", "1"))):
        if index:
            page.get_by_role("button", name="Add another").click()
            assert page.evaluate("document.activeElement.name") == f"backends-{index}-address"
        page.fill(f"#id_backends-{index}-address", address)
        page.fill(f"#id_backends-{index}-weight", weight)
    page.get_by_role("button", name="Preview the kernel change").click()
    page.wait_for_selector("#preview-summary")
    summary = page.text_content("#preview-summary")
    assert "+ backend 198.18.1.11" in summary and "+ backend 198.18.1.13" in summary
    assert "weights 5/3/1 → 56/33/11 % of new connections" in summary, summary
    assert Backend.objects.count() == 0  # a preview saves nothing
    shot(page, "3-backends-preview")
    page.get_by_role("button", name="Save backends").click()
    page.wait_for_selector("#backend-table tr[data-address='198.18.1.13']")
    assert AuditEvent.objects.filter(action="create", object_type="backend").count() == 3
    first = page.locator("#backend-table tr[data-address='198.18.1.11']")
    assert "yes: 56 % of new connections" in first.text_content()
    assert "balanced over 3 backends" in page.text_content("#farm-traffic")

    # -- health on the farm page: the check, the banner, consistent words ----------------------------------
    assert OWN_ERROR in page.text_content("#healthd-status")  # the banner the farm list shows too
    assert "TCP connect" in page.text_content("#health-check-summary")
    assert "the tcp default" in page.text_content("#health-check-summary")
    page.check("input[aria-label='Select 198.18.1.12']")
    page.check("input[aria-label='Select 198.18.1.13']")
    assert page.text_content("#bulk-label") == "With the 2 selected backends:"
    page.locator("#bulk-form").get_by_role("button", name="Disable").click()
    page.wait_for_selector("#backend-table tr[data-address='198.18.1.12'] td[data-state='disabled']")
    assert {b.state for b in Backend.objects.filter(address__in=["198.18.1.12", "198.18.1.13"])} == {"disabled"}
    disabled = page.locator("#backend-table tr[data-address='198.18.1.12']").text_content()
    assert "no: disabled" in disabled and "takes traffic" not in disabled and "Unknown" in disabled
    assert "yes: 100 % of new connections" in first.text_content()
    b1 = Backend.objects.get(address="198.18.1.11")
    page.check("input[aria-label='Select 198.18.1.13']")  # a box ticked before the page follows the change
    health_services.health_record([health_services.HealthTransition(b1.id, "down", "TCP connect: refused")])
    # no reload: the page sees the new health in the farms API and fetches its backend table again
    page.wait_for_selector("#backend-table tr[data-address='198.18.1.11'] td[data-health='down']", timeout=15_000)
    assert page.is_checked("input[aria-label='Select 198.18.1.13']")
    assert page.text_content("#bulk-label") == "With the 1 selected backend:"
    down = page.locator("#backend-table tr[data-address='198.18.1.11']").text_content()
    assert "Down: TCP connect: refused" in " ".join(down.split()) and "since" in down and "no: down" in down
    assert "No backend takes new connections: the farm rejects new connections (a TCP reset)." in page.text_content(
        "#farm-traffic"
    )
    shot(page, "4-farm-health")
    axe.assert_none(page)
    b2 = Backend.objects.get(address="198.18.1.12")
    for path in (f"/farms/{farm.pk}/edit/", f"/backends/{b2.id}/edit/", f"/backends/{b2.id}/delete/",
                 f"/farms/{farm.pk}/delete/", "/policies/add/", "/accounts/password/", "/system/tls/"):  # fmt: skip
        page.goto(base + path)
        axe.assert_none(page)

    page.goto(f"{base}/")
    assert OWN_ERROR in page.text_content("#healthd-status")
    page.goto(f"{base}/farms/{farm.pk}/health-check/")
    page.select_option("#id_type", "http")
    assert page.is_visible("#field-http_method") and not page.is_visible("#field-udp_send")
    page.select_option("#id_type", "https")
    assert page.get_by_label("TLS verify").is_visible() and page.get_by_label("HTTP method").is_visible()
    page.get_by_role("button", name="Save").click()
    page.wait_for_selector("h1:has-text('Farm shop')")

    # -- the whole quick path, counted: a farm and three backends in 5 clicks and 3 page loads -------------
    loads: list[str] = []
    page.on("load", lambda loaded: loads.append(loaded.url))
    clicks = 0

    def click(locator) -> None:
        nonlocal clicks
        clicks += 1
        locator.click()

    page.goto(f"{base}/")
    loads.clear()
    click(page.get_by_role("link", name="New farm"))
    page.fill("#id_name", "quick")
    page.fill("#id_vip", "198.18.50.2")
    page.fill("#id_ports", "80")
    click(page.get_by_role("button", name="Save"))
    page.wait_for_selector("h1:has-text('Farm quick')")
    for index, address in enumerate(("198.18.1.21", "198.18.1.22", "198.18.1.23")):
        if index:
            click(page.get_by_role("button", name="Add another"))
        page.fill(f"#id_backends-{index}-address", address)
    click(page.get_by_role("button", name="Save backends"))
    page.wait_for_selector("#backend-table tr[data-address='198.18.1.23']")
    page.wait_for_load_state()
    assert (clicks, len(loads)) == (5, 3), loads  # was 9 clicks and ~10 page loads, one page per backend
    print(f"farm with 3 backends: {clicks} clicks, {len(loads)} page loads")

    # -- a viewer: the check read-only, not a 403 -----------------------------------------------------------
    page.get_by_role("button", name="Log out").click()
    log_in(page, base, "viewer-user", ROLE_PASSWORD)
    page.goto(f"{base}/farms/{farm.pk}/")
    assert page.locator("#bulk-form").count() == 0 and page.locator("#backend-editor").count() == 0
    page.get_by_role("link", name="View health check").click()
    assert page.get_by_label("HTTP method").is_disabled() and page.get_by_label("TLS verify").is_disabled()
    assert page.get_by_role("button", name="Save").count() == 0 and "Read only" in page.text_content("main")
    shot(page, "5-viewer-health-check")
    axe.assert_none(page)

    # -- 390 px: the page keeps its width, the tables scroll in their box ----------------------------------
    page.set_viewport_size({"width": 390, "height": 844})
    for path, table in (("/", "#farm-table"), (f"/farms/{farm.pk}/", "#backend-table"), ("/audit-events/", "table")):
        page.goto(base + path)
        assert page.evaluate("document.documentElement.scrollWidth") <= 390, path
        box = page.locator(".table-scroll", has=page.locator(table)).first
        assert box.evaluate("(el) => el.scrollWidth > el.clientWidth"), path  # wider than the screen: it scrolls
        axe.assert_none(page)
    for path in ("/monitoring/", f"/monitoring/farms/{farm.pk}/", f"/farms/{farm.pk}/health-check/"):
        page.goto(base + path)
        assert page.evaluate("document.documentElement.scrollWidth") <= 390, path
    page.goto(f"{base}/farms/{farm.pk}/")
    shot(page, "6-mobile-farm")
    assert page.get_attribute("nav[aria-label=Main] a[aria-current=page]", "href") == "/"
    page.goto(f"{base}/audit-events/")
    assert page.get_attribute("nav[aria-label=Main] a[aria-current=page]", "href") == "/audit-events/"
    page.set_viewport_size({"width": 1280, "height": 1000})

    # -- the API docs with lbweb's header --------------------------------------------------------------------
    page.goto(f"{base}/api/docs/")
    page.wait_for_selector(".opblock", timeout=30_000)
    assert page.get_attribute("nav[aria-label=Main] a[aria-current=page]", "href") == "/api/docs/"
    assert "viewer-user" in page.text_content("header.site")
    shot(page, "7-api-docs", full_page=False)  # the header and the first operations
    axe.assert_none(page, "header.site")  # Swagger UI's own markup is not lbweb's
    pages = ("/policies/", "/http/", "/apply-runs/", "/config/", "/config/versions/", "/cluster/", "/system/tls/",
             "/system/network/", "/monitoring/", f"/monitoring/farms/{farm.pk}/")  # fmt: skip
    for path in pages:
        page.goto(base + path)
        assert page.locator("nav[aria-label=Main] a[aria-current=page]").count() == 1, path
        axe.assert_none(page)
    assert csp_violations == []
