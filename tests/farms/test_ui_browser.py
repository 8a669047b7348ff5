"""The operator's day in a real browser (Debian's chromium, Playwright) against a live server, the real
worker and collector in the lab's LB namespace and real traffic: log in, create a farm with two backends
after previewing the kernel change, see it applied, balancing and its live figures, drain a backend,
find the audit entry, then be refused as a viewer. Screenshots go to test-output/ui-*.png.
"""

from __future__ import annotations

import collections
import contextlib
import re

import pytest

from tests.conftest import OUTPUT, ROLE_PASSWORD, wait_for
from tests.support.lab import backend4, vip4

pytestmark = [pytest.mark.dataplane, pytest.mark.django_db(transaction=True)]

VIP = vip4(120)
# A function, not an expression: Playwright polls an expression with eval() in the page, which the
# Content-Security-Policy forbids (no 'unsafe-eval'); a function is called through the DevTools protocol.
APPLIED = "() => document.getElementById('apply-status').textContent.trim() === 'applied'"


def shot(page, name: str) -> None:
    page.screenshot(path=str(OUTPUT / f"ui-{name}.png"), full_page=True)


def log_in(page, base: str, username: str, password: str) -> None:
    """With the keyboard only: the fields are labelled and in tab order."""
    page.goto(f"{base}/accounts/login/")
    page.get_by_label("User name").focus()
    page.keyboard.type(username)
    page.keyboard.press("Tab")
    page.keyboard.type(password)
    page.keyboard.press("Enter")
    page.wait_for_url(f"{base}/")


def add_backend(page, address: str) -> None:
    page.get_by_role("link", name="Add backend").click()
    page.fill("#id_address", address)
    page.get_by_role("button", name="Save").click()
    page.wait_for_selector(f"#backend-table tr[data-address='{address}']")


def backends_answering(lab, count: int = 8) -> collections.Counter:
    return collections.Counter(a["backend"] for a in lab.http_get(VIP, 80, count=count))


def live_figures(page, lab) -> tuple[float, int] | None:
    """Send a little traffic, then read the page's live rate and the backends' open connections."""
    lab.http_get(VIP, 80, count=4)
    rate = re.match(r"([\d.]+) conn/s", page.text_content("[data-rate-for]").strip())
    conns = [c.strip() for c in page.locator("[data-conns-for]").all_text_contents()]
    if rate and float(rate.group(1)) > 0 and all(c.isdigit() for c in conns) and sum(map(int, conns)) >= 3:
        return float(rate.group(1)), sum(map(int, conns))
    return None


def test_operator_journey_in_a_browser(
    live_server, admin_user, role_users, worker, collector, lab, browser_page, csp_violations
):
    page, base = browser_page, live_server.url
    log_in(page, base, "admin", "admin-password")
    page.get_by_role("link", name="New farm").click()
    page.fill("#id_name", "shop")
    page.fill("#id_vip", VIP)
    page.fill("#id_ports", "80")
    page.select_option("#id_mode", "dnat")
    page.select_option("#id_scheduler", "rr")
    page.get_by_role("button", name="Preview the kernel change").click()
    page.wait_for_selector("#preview")
    assert "farm-shop" in page.text_content("#preview-commands")
    assert VIP in page.text_content("#preview-diff")
    shot(page, "1-preview")
    page.get_by_role("button", name="Save").click()
    page.wait_for_selector("h1:has-text('Farm shop')")

    add_backend(page, backend4("b1"))
    add_backend(page, backend4("b2"))
    page.wait_for_function(APPLIED, timeout=30_000)  # the page follows the worker by itself
    assert set(backends_answering(lab)) == {"b1", "b2"}
    with contextlib.ExitStack() as held:  # three open connections the backends' column must count
        for _ in range(3):
            held.enter_context(lab.connect(VIP, 80))
        wait_for(lambda: live_figures(page, lab), timeout=30, what="live rate and connections on the page")
        shot(page, "2-applied")

    page.get_by_role("button", name=f"Drain {backend4('b1')}").click()
    page.wait_for_selector(f"#backend-table tr[data-address='{backend4('b1')}'] td[data-state='drain']")
    page.wait_for_function(APPLIED, timeout=30_000)
    assert set(backends_answering(lab)) == {"b2"}  # new connections avoid the drained backend
    shot(page, "3-drained")

    page.get_by_role("link", name="Audit log").click()
    entry = page.locator("tr", has_text=f"backend {backend4('b1')}").filter(has_text="update").first
    assert "state: enabled → drain" in entry.text_content() and "admin" in entry.text_content()
    shot(page, "4-audit")
    page.get_by_role("link", name="Apply history").click()
    assert page.locator("td .status-applied").count() >= 1
    shot(page, "5-apply-history")

    page.get_by_role("button", name="Log out").click()
    log_in(page, base, "viewer-user", ROLE_PASSWORD)
    page.get_by_role("link", name="shop").click()
    assert page.get_by_role("link", name="Edit farm").count() == 0
    assert page.get_by_role("button", name=f"Drain {backend4('b2')}").count() == 0
    farm_url = page.url
    page.goto(farm_url + "edit/")
    assert "needs the admin role" in page.text_content("#forbidden")
    shot(page, "6-viewer-refused")
    page.goto(farm_url)
    backend_id = page.locator(f"tr[data-address='{backend4('b2')}']").get_attribute("id").split("-")[1]
    refused = page.evaluate(
        """async (id) => {
            const csrf = document.querySelector('input[name=csrfmiddlewaretoken]').value;
            const r = await fetch(`/api/v1/backends/${id}/`, {method: 'PATCH', credentials: 'same-origin',
                headers: {'Content-Type': 'application/json', 'X-CSRFToken': csrf},
                body: JSON.stringify({state: 'disabled'})});
            return r.status;
        }""",
        backend_id,
    )
    assert refused == 403
    assert set(backends_answering(lab)) == {"b2"}  # still serving: nothing changed
    assert csp_violations == []  # every page's scripts and styles ran under the Content-Security-Policy
