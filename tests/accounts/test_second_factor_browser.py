"""The second factor in Debian's chromium (Playwright): an admin enrols an authenticator app from the page's secret,
keeps the recovery codes, logs out, and logs in again with a code computed from the enrolled secret, as the app
would; then System › Authentication. axe-core finds no violation on these pages and the Content-Security-Policy
blocks nothing; screenshots go to test-output/second-factor-*.png."""

from __future__ import annotations

import time

import pytest
from axe_playwright_python.sync_playwright import Axe

from tests.conftest import OUTPUT
from tests.support.totp import code

pytestmark = pytest.mark.django_db(transaction=True)


def accessible(page) -> None:
    results = Axe().run(page)
    assert results.violations_count == 0, results.generate_report()


def shot(page, name: str) -> None:
    page.screenshot(path=str(OUTPUT / f"second-factor-{name}.png"), full_page=True)


def log_in(page, base: str) -> None:
    page.goto(f"{base}/accounts/login/")
    page.fill("#id_username", "admin")
    page.fill("#id_password", "admin-password")
    page.get_by_role("button", name="Log in").click()


def test_enrol_then_log_in_with_a_code_from_the_enrolled_secret(
    live_server, redis_server, admin_user, browser_page, csp_violations
):
    page, base = browser_page, live_server.url
    log_in(page, base)
    page.wait_for_url(f"{base}/")
    page.get_by_role("link", name="Second factor").click()
    page.wait_for_selector("#totp-secret")
    assert page.evaluate("document.querySelector('img[alt^=QR]').naturalWidth") > 0  # the QR code is drawn
    accessible(page)
    shot(page, "enrol")
    secret = page.get_attribute("#totp-secret", "data-secret")
    page.fill("#id_otp_token", code(secret))
    page.get_by_role("button", name="Turn on the second factor").click()
    page.wait_for_selector("#recovery-codes")
    assert page.locator("#recovery-codes li").count() == 10
    accessible(page)
    shot(page, "recovery-codes")

    page.get_by_role("button", name="Log out").click()
    log_in(page, base)
    page.wait_for_url(f"{base}/accounts/login/code/")
    assert page.get_by_role("heading", name="Second factor").is_visible()
    accessible(page)
    shot(page, "code")
    page.fill("#id_otp_token", "000000" if code(secret, steps_ahead=1) != "000000" else "111111")
    page.get_by_role("button", name="Log in").click()
    assert "Wrong code" in page.text_content("#id_otp_token_error")
    time.sleep(1.2)  # django-otp slows a device down after a wrong code: 1 s after the first
    page.fill("#id_otp_token", code(secret, steps_ahead=1))  # the enrolment used this period's code
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{base}/")
    assert "admin" in page.text_content(".account .user")
    page.goto(f"{base}/accounts/second-factor/")
    assert "9 recovery codes left" not in page.text_content("#second-factor-state")
    assert "10 recovery codes left" in page.text_content("#second-factor-state")

    page.goto(f"{base}/system/authentication/")
    assert page.get_by_role("heading", name="LDAP / Active Directory").is_visible()
    accessible(page)
    shot(page, "authentication")
    assert csp_violations == []
