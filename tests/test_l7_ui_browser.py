"""The HTTP farms page in Debian's chromium: each backend's sessions in use against its declared capacity, queue and
time in queue from the collector's newest sample (in a real Redis), and certificates with a warning ahead of their
expiry."""

from __future__ import annotations

import datetime

import pytest

from farms import services as farm_services
from l7 import services
from monitoring.sampler import Sample
from monitoring.store import MetricStore, client
from tests import certs
from tests.conftest import OUTPUT

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
    page.goto(f"{live_server.url}/accounts/login/")
    page.get_by_label("User name").fill("admin")
    page.get_by_label("Password").fill("admin-password")
    page.keyboard.press("Enter")
    page.wait_for_url(f"{live_server.url}/")
    page.get_by_role("link", name="HTTP farms").click()
    page.wait_for_selector(f"#backend-{backend.id}")
    row = page.text_content(f"#backend-{backend.id}")
    assert "8 / 8" in row and "3" in row and "40 ms" in row
    assert "Requests/s: 120.5" in page.text_content(f"section[aria-labelledby='farm-{farm.id}']")
    assert "Expires soon" in page.text_content("#certificate-soon")
    assert "Expires soon" not in page.text_content("#certificate-later")
    page.screenshot(path=str(OUTPUT / "l7-http-farms.png"), full_page=True)
    assert csp_violations == []
