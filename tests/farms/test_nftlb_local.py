"""nftlb's mode ``local`` with real packets: the service runs on the load balancer itself.

An nftlb document with a local farm is imported through the API and applied by the real worker; a real HTTP
server listens on the VIP inside the LB's namespace (no backend anywhere). A client reaches it untranslated
(the server sees the client's own address), a deny-listed source is dropped, the per-client established
connection limit holds for one client while another still connects, and the farm's counters move.
"""

from __future__ import annotations

import threading
from http.server import ThreadingHTTPServer

import pytest

from tests.dataplane.test_l4_features import counter
from tests.farms.test_nftlb_semantics import EXTRA_CLIENTS, clients, nftlb_import, try_hold  # noqa: F401 (fixture)
from tests.support.lab import CLIENT4, run_in_netns
from tests.support.lab_server import handler_for

pytestmark = [pytest.mark.dataplane, pytest.mark.django_db(transaction=True)]
VIP = "198.18.100.240"
DENIED = EXTRA_CLIENTS[0]


@pytest.fixture
def local_service(lab):
    """An HTTP server on the VIP in the LB's own namespace: the VIP is an address of the appliance (on lo)."""
    lab.ns(lab.lb, "ip", "addr", "add", f"{VIP}/32", "dev", "lo")
    server = run_in_netns(lab.lb, lambda: ThreadingHTTPServer((VIP, 80), handler_for("appliance")))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)
    lab.ns(lab.lb, "ip", "addr", "del", f"{VIP}/32", "dev", "lo", check=False)


def traffic_bytes(lab, name: str) -> int:
    return lab.lbweb_counter(name)["bytes"]


def test_local_farm_filters_limits_and_counts_the_appliance_s_own_service(api, worker, lab, clients, local_service):  # noqa: F811
    policy = {"name": "deny-local", "type": "blacklist", "family": "ipv4", "elements": [{"data": DENIED}]}
    farm = {"name": "onbox", "family": "ipv4", "virtual-addr": VIP, "virtual-ports": "80", "mode": "local",
            "protocol": "tcp", "scheduler": "weight", "state": "up", "est-connlimit": "2", "tcp-strict": "on",
            "policies": [{"name": "deny-local"}]}  # fmt: skip
    result = nftlb_import(api, {"farms": [farm], "policies": [policy]})
    assert result["farms_created"] == ["onbox"] and result["errors"] == []
    held = []
    try:
        for _ in range(2):  # the limit: 2 established connections per client address
            connection = try_hold(lab, CLIENT4, VIP)
            assert connection is not None, "refused below the client's limit"
            answer = connection.get()
            assert answer["backend"] == "appliance" and answer["client"] == CLIENT4  # untranslated, to the LB itself
            held.append(connection)
        assert try_hold(lab, CLIENT4, VIP) is None  # the third of the same client is dropped
        other = try_hold(lab, EXTRA_CLIENTS[1], VIP)  # another client still has its own two
        assert other is not None and other.get()["client"] == EXTRA_CLIENTS[1]
        held.append(other)
        assert try_hold(lab, DENIED, VIP) is None  # deny-listed: every packet dropped
    finally:
        for connection in held:
            connection.close()
    assert counter(lab, "farm-onbox") >= 4  # new connections that reached the farm (the denied one never did)
    assert counter(lab, "farm-onbox-limit") >= 1 and counter(lab, "farm-onbox-policy") >= 1
    assert traffic_bytes(lab, "traffic-in-onbox") > 0 and traffic_bytes(lab, "traffic-out-onbox") > 0
    tracked = lab.ns(lab.lb, "conntrack", "-L", "-d", VIP, check=False).stdout
    assert "mark=" in tracked and f"src={VIP}" in tracked  # replies come from the VIP itself: no NAT
