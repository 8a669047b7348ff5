"""Every page of the UI works under the Content-Security-Policy: Debian's chromium visits each one,
with the scripts that must run checked by what they do, and the browser reports no violation.

(The journeys with real traffic, test_ui_browser.py and test_dashboard_browser.py, assert the same.)
"""

from __future__ import annotations

import pytest
from django.core.management import call_command

from farms import services
from tests.conftest import OUTPUT

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def farm(admin_user, tmp_path, monkeypatch):
    """A farm with a backend, and a certificate for the TLS page (made before the browser's event loop runs)."""
    monkeypatch.setenv("LBWEB_VAR_DIR", str(tmp_path / "var"))  # a state directory of the test's own
    call_command("ensure_tls")
    farm = services.farm_create(name="web", vip="198.18.100.1", ports="80", mode="dnat", scheduler="rr")
    services.backend_create(farm=farm, address="198.18.1.11")
    return farm


def test_every_page_runs_under_the_content_security_policy(
    live_server, redis_server, farm, browser_page, csp_violations
):
    page, base = browser_page, live_server.url
    # wait_for_function gets functions: Playwright polls a bare expression with eval() in the page, which
    # the policy forbids (and reports as a violation).

    page.goto(f"{base}/admin/login/?next=/")  # the admin site's login page, then lbweb's pages
    page.fill("#id_username", "admin")
    page.fill("#id_password", "admin-password")
    page.click("input[type=submit]")
    page.wait_for_url(f"{base}/")
    page.wait_for_function("() => document.querySelector('[data-rate-for]') !== null")

    page.goto(f"{base}/farms/{farm.id}/edit/")
    page.get_by_role("button", name="Preview the kernel change").click()
    page.wait_for_selector("#preview")
    assert page.evaluate("document.activeElement.id") == "preview"  # static/lbweb/edit.js ran

    page.goto(f"{base}/monitoring/")
    # the charts exist once dashboard-start.js ran (polled by a timer: requestAnimationFrame, the default,
    # was seen to stall on this page when other tests ran before)
    page.wait_for_function("() => window.Chart && Chart.getChart('chart-conns') !== undefined", polling=100)
    page.goto(f"{base}/monitoring/farms/{farm.id}/")
    page.wait_for_function("() => window.Chart && Chart.getChart('chart-throughput') !== undefined", polling=100)

    pages = (f"/farms/{farm.id}/", "/policies/", "/apply-runs/", "/audit-events/", "/config/", "/system/tls/")
    for path in (*pages, "/config/versions/", "/system/network/"):
        page.goto(base + path)
        assert page.locator("h1").count() == 1, path

    page.goto(f"{base}/api/docs/")
    page.wait_for_selector(".opblock", timeout=30_000)  # Swagger UI rendered the operations
    page.screenshot(path=str(OUTPUT / "csp-api-docs.png"))
    page.goto(f"{base}/admin/")
    page.wait_for_selector("#site-name")
    page.goto(f"{base}/accounts/password/")
    assert csp_violations == []

    # Redoc (/api/redoc/) works, and the one thing the policy blocks there is the point of it: Redoc's
    # bundle wants its maker's logo from a CDN, and nothing is loaded from outside the appliance.
    page.goto(f"{base}/api/redoc/")
    page.wait_for_selector("text=lbweb API", timeout=30_000)
    page.wait_for_selector("text=/api/v1/farms/", timeout=30_000)
    assert all("https://cdn.redoc.ly/" in v and "img-src" in v for v in csp_violations), csp_violations
