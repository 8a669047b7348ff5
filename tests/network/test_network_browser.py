"""System > Network in Debian's chromium, the way an operator reaches an appliance: over its management
address. The test builds two namespaces: the appliance (lbweb's web server on 198.18.60.1, the real
worker) and a client where chromium runs, joined by a veth pair. The operator adds an interface, an
address, a route, DNS and NTP, sees the worker apply them; then tries to take the management interface
down: the page asks first, and once confirmed the worker really cuts the browser off.

axe-core finds no violation on the page; screenshots go to test-output/network-*.png.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import pytest
from axe_playwright_python.sync_playwright import Axe
from django.contrib.staticfiles.handlers import StaticFilesHandler
from django.core.wsgi import get_wsgi_application

from farms.models import AuditEvent
from network import services
from tests.conftest import CHROMIUM, CHROMIUM_ARGS, OUTPUT
from tests.support.lab import enter_netns, sh

pytestmark = [pytest.mark.dataplane, pytest.mark.django_db(transaction=True)]

TAG = f"lbnb{os.getpid() % 100000}"
APPLIANCE, CLIENT = f"{TAG}-lb", f"{TAG}-cli"
MANAGEMENT = "198.18.60.1"
BASE = f"http://{MANAGEMENT}:8000"


class ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class QuietHandler(WSGIRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def appliance(tmp_path):
    """Two namespaces (appliance, client) joined by mgmt0 <-> eth0, and eth1 (a spare veth) on the appliance."""
    for ns in (APPLIANCE, CLIENT):
        sh("ip", "netns", "del", ns, check=False)
        sh("ip", "netns", "add", ns)
    try:
        sh("ip", "link", "add", "mgmt0", "netns", APPLIANCE, "type", "veth", "peer", "name", "eth0", "netns", CLIENT)
        sh("ip", "-n", APPLIANCE, "link", "add", "eth1", "type", "veth", "peer", "name", "peer1")
        for ns, dev, address in ((APPLIANCE, "mgmt0", f"{MANAGEMENT}/24"), (CLIENT, "eth0", "198.18.60.50/24")):
            sh("ip", "-n", ns, "addr", "add", address, "dev", dev)
            sh("ip", "-n", ns, "link", "set", dev, "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", APPLIANCE, "link", "set", "peer1", "up")
        wrapper = tmp_path / "chromium-in-client"
        wrapper.write_text(f'#!/bin/sh\nexec ip netns exec {CLIENT} {CHROMIUM} "$@"\n')
        wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
        yield wrapper
    finally:
        for ns in (APPLIANCE, CLIENT):
            sh("ip", "netns", "del", ns, check=False)


@pytest.fixture
def web_server(appliance):
    """Django (this test's database) served on the appliance's management address, in its namespace."""
    box: dict = {}
    ready = threading.Event()

    def serve() -> None:
        enter_netns(APPLIANCE)
        server = make_server(
            MANAGEMENT, 8000, StaticFilesHandler(get_wsgi_application()), ThreadingServer, QuietHandler
        )
        box["server"] = server
        ready.set()
        server.serve_forever(poll_interval=0.1)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert ready.wait(10)
    yield
    box["server"].shutdown()
    box["server"].server_close()


def addresses(dev: str) -> str:
    return sh("ip", "-n", APPLIANCE, "-br", "addr", "show", "dev", dev).stdout


def accessible(page) -> None:
    results = Axe().run(page)
    assert results.violations_count == 0, results.generate_report()


def shot(page, name: str) -> None:
    page.screenshot(path=str(OUTPUT / f"network-{name}.png"), full_page=True)


def wait_applied(page, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while "Status: applied" not in " ".join(page.text_content("#network-status").split()):
        assert time.monotonic() < deadline, page.text_content("#network-status")
        time.sleep(0.5)
        page.reload()


def test_network_page_applies_and_asks_before_cutting_the_management_address(
    appliance, web_server, admin_user, worker_env, tmp_path, request
):
    from playwright.sync_api import sync_playwright

    from tests.support.stack import Worker

    mgmt0 = services.interface_create(name="mgmt0", kind="ethernet", description="management")
    services.address_create(interface=mgmt0, address=f"{MANAGEMENT}/24")
    env = dict(worker_env, LBWEB_NETWORK_DIR=str(tmp_path / "etc"))
    worker = Worker(APPLIANCE, env, OUTPUT / "logs" / f"worker-{request.node.name}.log").start()
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(appliance), args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            csp: list[str] = []
            page.on("console", lambda m: csp.append(m.text) if "Content Security Policy" in m.text else None)
            page.goto(f"{BASE}/accounts/login/")
            page.get_by_label("User name").fill("admin")
            page.get_by_label("Password").fill("admin-password")
            page.keyboard.press("Enter")
            page.wait_for_url(f"{BASE}/")
            page.get_by_role("link", name="System").click()
            page.get_by_role("link", name="Network").click()
            assert page.text_content("#management-address") == MANAGEMENT
            wait_applied(page)
            assert "eth1" in page.text_content("#unmanaged")  # the worker's view of the kernel
            page.get_by_role("link", name="Manage eth1").click()
            assert page.input_value("#id_if-name") == "eth1"
            page.get_by_role("button", name="Add interface").click()
            page.wait_for_selector("#interface-eth1")
            page.select_option("#id_addr-interface", label="eth1")
            page.fill("#id_addr-address", "198.18.68.1/24")
            page.get_by_role("button", name="Add address").click()
            page.fill("#id_route-destination", "198.18.128.0/17")
            page.fill("#id_route-gateway", "198.18.68.254")
            page.get_by_role("button", name="Add route").click()
            page.fill("#id_dns-dns_servers", "198.18.0.53")
            page.fill("#id_dns-ntp_servers", "ntp.lab.example")
            page.get_by_role("button", name="Save DNS and NTP").click()
            wait_applied(page)
            assert "198.18.68.1/24" in addresses("eth1")
            assert "198.18.128.0/17 via 198.18.68.254" in sh("ip", "-n", APPLIANCE, "route").stdout
            assert "198.18.68.1/24" in page.text_content("#interface-eth1")
            shot(page, "1-applied")
            accessible(page)

            assert csp == []
            page.get_by_role("button", name="Set mgmt0 down").click()
            page.wait_for_selector("#confirm-cut")
            assert MANAGEMENT in page.text_content("#confirm-cut")
            assert "UP" in sh("ip", "-n", APPLIANCE, "link", "show", "mgmt0").stdout.split(">")[0]
            shot(page, "2-confirm")
            accessible(page)
            # the worker applies it at once: the browser loses the appliance (often before the redirect's page)
            page.get_by_role("button", name="Yes, do it and cut my connection").click(no_wait_after=True)
            deadline = time.monotonic() + 30
            while "UP" in sh("ip", "-n", APPLIANCE, "link", "show", "mgmt0").stdout.split(">")[0]:
                assert time.monotonic() < deadline, "mgmt0 never went down"
                time.sleep(0.3)
            with pytest.raises(Exception, match="ERR_|Timeout"):
                page.goto(f"{BASE}/system/network/", timeout=3000)
            browser.close()
    finally:
        worker.stop()
    cut = AuditEvent.objects.filter(object_type="interface", object_name="mgmt0", action="update").get()
    assert cut.actor_name == "admin" and cut.changes() == [("enabled", True, False)]
    assert (tmp_path / "etc/systemd/network/50-lbweb-mgmt0.network").read_text().count("ActivationPolicy=down") == 1
