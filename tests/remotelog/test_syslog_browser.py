"""System › Remote syslog in Debian's chromium (Playwright): an admin adds a TLS server (its TLS fields appear when
TLS is chosen), sees a refusal on its field, then the server in the list. axe-core finds no violation and the
Content-Security-Policy blocks nothing; screenshots go to test-output/syslog-*.png."""

from __future__ import annotations

import pytest
from axe_playwright_python.sync_playwright import Axe

from tests.conftest import OUTPUT
from tests.support import certs

pytestmark = pytest.mark.django_db(transaction=True)


def accessible(page) -> None:
    results = Axe().run(page)
    assert results.violations_count == 0, results.generate_report()


def test_an_admin_adds_a_tls_server_on_the_page(live_server, admin_user, browser_page, csp_violations, monkeypatch):
    # No broker here: the task the save asks for is recorded (a Celery connection made now would outlive the test).
    sent = []
    monkeypatch.setattr("lbweb.enqueue.send", lambda task, **kw: sent.append(task))
    page, base = browser_page, live_server.url
    page.goto(f"{base}/accounts/login/")
    page.fill("#id_username", "admin")
    page.fill("#id_password", "admin-password")
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{base}/")

    page.goto(f"{base}/system/syslog/")
    accessible(page)
    page.get_by_role("link", name="New syslog server").click()
    assert not page.locator("#id_ca_certificate").is_visible()  # UDP: no TLS fields
    page.fill("#id_name", "siem")
    page.fill("#id_host", "logs.example.org")
    page.fill("#id_port", "6514")
    page.select_option("#id_transport", "tls")
    assert page.locator("#id_ca_certificate").is_visible()
    page.get_by_role("button", name="Save").click()
    assert "TLS needs the CA" in page.locator("#field-ca_certificate").inner_text()
    page.screenshot(path=str(OUTPUT / "syslog-refused.png"), full_page=True)
    accessible(page)
    page.fill("#id_ca_certificate", certs.issue("syslog test CA", ca=True).pem)
    page.fill("#id_peer_name", "logs.example.org")
    page.uncheck("#id_http_access")
    page.get_by_role("button", name="Save").click()
    page.wait_for_url(f"{base}/system/syslog/")
    row = page.locator("#syslog-siem").inner_text()
    assert "logs.example.org:6514" in row and "certificate for logs.example.org" in row and "http-access" not in row
    page.screenshot(path=str(OUTPUT / "syslog-list.png"), full_page=True)
    accessible(page)
    assert csp_violations == []
    assert sent == ["syslog.tasks.apply_syslog"]
