"""The Cluster page and the header's master line in Debian's chromium (Playwright): roles, the last transitions
with their reason, sync state, conntrackd's state; axe-core finds nothing, no Content-Security-Policy
violation. Screenshot: test-output/cluster-page.png."""

from __future__ import annotations

import json
import time

import pytest

from cluster.services import cluster_update, ingest_journal
from tests.cluster.test_cluster_api import body
from tests.conftest import OUTPUT, ROLE_PASSWORD
from tests.farms.test_ui_browser import log_in
from tests.support import axe
from tests.support.lab import inside_netns
from tests.support.lab_ha import node_links

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def cluster_data(settings, tmp_path):
    """A configured pair, this node n1 master, two transitions recorded (before the browser starts: the ORM)."""
    settings.LBWEB_NODE_NAME = "n1"
    settings.LBWEB_CLUSTER_DIR = tmp_path
    values = body()
    nodes = values.pop("nodes")
    with node_links("browser") as ns, inside_netns(ns):  # this node's interfaces, as its engines want them
        cluster_update(nodes=nodes, **values)
    now = time.time()
    entries = [
        {"node": "n1", "state": "BACKUP", "from": "INIT", "at": now - 60, "reason": "started; following the master",
         "steps": [{"step": "addresses", "ok": True, "started": now - 60, "ended": now - 60}]},
        {"node": "n1", "state": "MASTER", "from": "BACKUP", "at": now - 5,
         "reason": "elected: no advertisement from n2 at a higher priority",
         "steps": [{"step": "commit", "ok": True, "started": now - 5, "ended": now - 4.99},
                   {"step": "addresses", "ok": True, "started": now - 4.99, "ended": now - 4.95}]},
    ]  # fmt: skip
    (tmp_path / "transitions.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries))
    (tmp_path / "role").write_text(json.dumps({"state": "MASTER", "since": now - 5, "node": "n1"}))
    ingest_journal()
    from farms import services

    services.farm_create(name="web", vip="198.18.2.101", protocol="tcp", ports="80", mode="dnat", scheduler="rr")


def test_the_cluster_page_in_a_browser(live_server, role_users, cluster_data, browser_page, csp_violations):
    page, base = browser_page, live_server.url
    log_in(page, base, role_users["viewer"].username, ROLE_PASSWORD)
    assert page.inner_text("#cluster-banner") == "Cluster master: n1 (this node)"
    page.get_by_role("link", name="Cluster").click()
    page.wait_for_url(f"{base}/cluster/")
    assert page.get_attribute("nav[aria-label=Main] a[aria-current=page]", "href") == "/cluster/"
    rows = page.locator("#cluster-nodes tbody tr")
    assert rows.count() == 2 and "master" in rows.nth(0).inner_text() and "unknown" in rows.nth(1).inner_text()
    transitions = page.inner_text("#cluster-transitions")
    assert "elected: no advertisement from n2" in transitions and "50 ms" in transitions
    assert "conntrackd not answering" in page.inner_text("#cluster-conntrackd")
    assert "behind" in page.inner_text("#cluster-sync")  # nothing pushed to n2 yet
    page.screenshot(path=str(OUTPUT / "cluster-page.png"), full_page=True)
    assert axe.violations(page) == []
    page.goto(f"{base}/monitoring/")
    assert "Cluster master: n1 (this node)" in page.inner_text("#cluster-master")
    assert csp_violations == []
