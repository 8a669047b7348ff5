"""The BGP page in Debian's chromium (Playwright), as the worker left it: each peer's session, each farm's route or
why it is withdrawn; an admin drains the node with its button; axe-core finds nothing, no Content-Security-Policy
violation. Screenshot: test-output/bgp-page.png."""

from __future__ import annotations

import pytest

from bgp import services
from bgp.models import BgpSettings
from farms import services as farm_services
from tests.conftest import OUTPUT, ROLE_PASSWORD
from tests.farms.test_ui_browser import log_in
from tests.support import axe

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def bgp_data():
    web = farm_services.farm_create(name="web", vip="198.18.100.1", protocol="tcp", ports="80", mode="dnat")
    farm_services.farm_create(name="dns", vip="198.18.100.2", protocol="udp", ports="53", mode="dnat")
    services.settings_update(settings=BgpSettings.load(), enabled=True, router_id="198.18.40.1")
    peer = services.peer_create(name="router1", address="198.18.40.2", asn=65001, password="s3cret")
    services.announcement_update(announcement=services.announcement_of(web), med=10, communities="65000:100")
    status = {"enabled": True, "farms": {"web": "announced", "dns": "withdrawn: no backend takes new connections"},
              "announced": ["198.18.100.1/32"], "error": "",
              "sessions": {f"peer{peer.pk}": {"state": "up", "info": "Established"}}}  # fmt: skip
    BgpSettings.objects.filter(pk=1).update(status=status)


def test_the_bgp_page_in_a_browser(live_server, role_users, bgp_data, browser_page, csp_violations):
    page, base = browser_page, live_server.url
    log_in(page, base, role_users["admin"].username, ROLE_PASSWORD)
    page.goto(f"{base}/cluster/")
    page.get_by_role("link", name="BGP").click()
    page.wait_for_url(f"{base}/bgp/")
    assert "up Established" in page.inner_text("#bgp-peers")
    farms = page.inner_text("#bgp-farms")
    assert "withdrawn: no backend takes new connections" in farms and "65000:100" in farms
    page.screenshot(path=str(OUTPUT / "bgp-page.png"), full_page=True)
    assert axe.violations(page) == []
    page.get_by_role("button", name="Drain this node").click()
    page.wait_for_url(f"{base}/bgp/")
    assert "drained" in page.inner_text("#bgp-settings")
    assert csp_violations == []
