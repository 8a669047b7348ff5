"""The HTTP farms page in Debian's chromium: each backend's sessions in use against its declared capacity, queue and
time in queue from the collector's newest sample (in a real Redis), and certificates with a warning ahead of their
expiry."""

from __future__ import annotations

import datetime

import pytest

from collector.sampler import Sample
from farms import services as farm_services
from l7 import services
from monitoring.store import MetricStore, client
from tests.conftest import OUTPUT
from tests.farms.test_ui_browser import log_in
from tests.support import certs

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def page_data(live_server, admin_user, redis_server):
    """Made before the browser starts (Playwright's loop makes the ORM refuse synchronous calls)."""
    farm = farm_services.farm_create(name="shop", vip="198.18.100.1", protocol="tcp", ports="80", mode="http")
    backend = farm_services.backend_create(farm=farm, address="198.18.1.11", port=80)
    services.capacity_set(backend=backend, capacity=8)
    now = datetime.datetime.now(datetime.UTC)
    soon = certs.issue("soon.example.com", names=("soon.example.com",), not_after=now + datetime.timedelta(days=5))
    later = certs.issue("later.example.com", names=("later.example.com",))
    services.certificate_create(name="soon", certificate=soon.pem, private_key=soon.key_pem)
    services.certificate_create(name="later", certificate=later.pem, private_key=later.key_pem)
    entry = {
        "new_conns": 30.0,
        "bytes_in": 1000.0,
        "bytes_out": 5000.0,
        "requests": 120.5,
        "responses_2xx": 118.0,
        "responses_5xx": 0.0,
        "latency_ms": 21,
        "sessions": 11,
        "queue": 3,
        "backends": {str(backend.id): {"sessions": 8, "capacity": 8, "queue": 3, "queue_time_ms": 40, "enabled": True}},
    }
    MetricStore(client(redis_server.url)).write(Sample(t=now.timestamp(), system={}, farms={farm.id: entry}))
    return farm, backend


def test_http_farms_page_shows_capacity_queue_and_certificate_expiry(
    page_data, live_server, browser_page, csp_violations
):
    farm, backend = page_data
    page = browser_page
    log_in(page, live_server.url, "admin", "admin-password")
    page.get_by_role("link", name="HTTP farms").click()
    page.wait_for_selector(f"#backend-{backend.id}")
    row = page.text_content(f"#backend-{backend.id}")
    assert "8 / 8" in row and "3" in row and "40 ms" in row
    assert "Requests/s: 120.5" in page.text_content(f"section[aria-labelledby='farm-{farm.id}']")
    assert "Expires soon" in page.text_content("#certificate-soon")
    assert "Expires soon" not in page.text_content("#certificate-later")
    page.screenshot(path=str(OUTPUT / "l7-http-farms.png"), full_page=True)
    # The farm's dashboard: HAProxy's figures in the same charts as L4 farms, plus the HTTP ones.
    page.goto(f"{live_server.url}/monitoring/farms/{farm.id}/")
    page.wait_for_function("() => document.getElementById('card-conns').textContent.trim() !== '–'")
    assert "Not measured" not in page.text_content("#freshness")
    banner = page.text_content("#certificate-banner")  # on every page: the certificate that ends soon
    assert "Certificate soon expires in 4 days" in banner and "later" not in banner
    for chart in ("chart-http-classes", "chart-http-queue", "chart-http-sessions"):
        assert page.locator(f"#{chart}").is_visible()
    page.screenshot(path=str(OUTPUT / "l7-farm-dashboard.png"), full_page=True)
    assert csp_violations == []


@pytest.fixture
def https_farm(live_server, admin_user):
    farm = farm_services.farm_create(name="secure", vip="198.18.100.2", protocol="tcp", ports="443", mode="https")
    backend = farm_services.backend_create(farm=farm, address="198.18.1.12", port=8443)
    return farm, backend


def test_an_admin_sets_up_an_https_farm_in_the_browser(https_farm, live_server, browser_page, csp_violations):
    """Certificate, farm options, a service and a backend's TLS: every edit page in chromium, none with an axe-core
    violation; the fields of another persistence or of TLS off are hidden as the choices change."""
    from tests.support import axe

    farm, backend = https_farm
    page = browser_page
    log_in(page, live_server.url, "admin", "admin-password")
    page.goto(f"{live_server.url}/http/")
    page.get_by_role("link", name="New self-signed certificate").click()
    axe.assert_none(page)
    page.locator("#id_name").fill("secure-cert")
    page.locator("#id_names").fill("secure.example.com")
    page.get_by_role("button", name="Save").click()
    page.wait_for_selector("#certificate-secure-cert")
    assert "secure.example.com" in page.text_content("#certificate-secure-cert")

    page.get_by_role("link", name="HTTP options and certificates").click()
    axe.assert_none(page)
    page.locator("#id_certificates").select_option(label="secure-cert")
    page.locator("#id_default_certificate").select_option(label="secure-cert")
    page.locator("#id_redirect_ports").fill("80")
    page.get_by_role("button", name="Save").click()
    page.wait_for_selector(".messages, [role=status]")
    assert "HTTP options of farm secure saved" in page.content()

    page.get_by_role("link", name="Add a service").click()
    axe.assert_none(page)
    assert not page.locator("#id_cookie_name").is_visible()  # no persistence chosen yet
    page.locator("#id_persistence").select_option("cookie")
    assert page.locator("#id_cookie_name").is_visible()
    page.locator("#id_name").fill("api")
    page.locator("#id_path_prefix").fill("/api")
    page.get_by_role("button", name="Save").click()
    page.wait_for_selector("li[id^=service-]")
    assert "api" in page.text_content("li[id^=service-]")

    page.get_by_role("link", name=f"HTTP options of backend {backend}").click()
    axe.assert_none(page)
    assert not page.locator("#id_tls_sni").is_visible()
    page.locator("#id_service").select_option(label="api")
    page.locator("#id_capacity").fill("25")
    page.locator("#id_tls").check()
    assert page.locator("#id_tls_sni").is_visible()
    page.get_by_role("button", name="Save").click()
    page.wait_for_selector(f"#backend-{backend.id}")
    row = page.text_content(f"#backend-{backend.id}")
    assert "api" in row and "— / 25" in row  # nothing measured yet: a dash, not a blank
    page.screenshot(path=str(OUTPUT / "l7-https-farm-set-up.png"), full_page=True)
    assert csp_violations == []
