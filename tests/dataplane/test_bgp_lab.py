"""Route health injection for real: the worker in the lab's LB namespace writes BIRD's file, lbweb's BIRD (started
as its supervisor starts it) announces the farms' VIPs to a second, real BIRD acting as the router
(``tests/support/bgp_lab.py``), and healthd takes backends down. The router learns each VIP as a host route with its
farm's MED and communities; it loses the route when the farm's backends are all down, and when the node is drained
(graceful shutdown first); it gets it back when one returns; a change reloads BIRD with the sessions kept; and a
frozen node's routes leave within a second by BFD, not after the 9 s hold time."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.dataplane.test_dataplane import make_farm
from tests.healthd.test_health import check, healthd, prober, wait_health  # noqa: F401 (fixtures)
from tests.support.bgp_lab import NODE4, NODE6, PASSWORD, ROUTER4, ROUTER6, BgpLab
from tests.support.lab import vip4, vip6
from tests.support.privileges import proc_status
from tests.support.stack import wait_until

pytestmark = [pytest.mark.dataplane, pytest.mark.django_db(transaction=True)]
CAP_NET_ADMIN, CAP_NET_BIND_SERVICE = 1 << 12, 1 << 10
V4, V6 = f"{vip4(60)}/32", f"{vip6(60)}/128"


@pytest.fixture
def bgp(lab):
    bgp = BgpLab(lab).build()
    yield bgp
    bgp.destroy()


@pytest.fixture
def worker_env(worker_env, bgp, settings):
    """The worker (and this process) keep BIRD's file where the lab's node BIRD reads it."""
    settings.LBWEB_BGP_DIR = bgp.node_dir
    return {**worker_env, "LBWEB_BGP_DIR": str(bgp.node_dir)}


def configure(api, drain_seconds: int = 30) -> None:
    api.patch("bgp/", {"enabled": True, "local_asn": 65000, "router_id": NODE4, "drain_seconds": drain_seconds})
    api.post("bgp/peers/", {"name": "router4", "address": ROUTER4, "asn": 65001, "password": PASSWORD,
                            "hold_time": 9, "keepalive_time": 3, "bfd": True})  # fmt: skip
    api.post("bgp/peers/", {"name": "router6", "address": ROUTER6, "asn": 65001, "bfd": True})


def learnt(bgp: BgpLab, prefix: str, timeout: float = 20, what: str = "") -> str:
    return wait_until(lambda: bgp.routes().get(prefix), timeout, what=what or f"the router to learn {prefix}")


def gone(bgp: BgpLab, prefix: str, timeout: float = 20) -> float:
    wait_until(lambda: prefix not in bgp.routes(), timeout, what=f"the router to lose {prefix}", interval=0.02)
    return time.monotonic()


def beat_until_gone(bgp: BgpLab, prefix: str, timeout: float = 20) -> float:
    """What beat does every 2 s (no beat runs here): BGP's heartbeat, until the router lost ``prefix``."""
    from lbweb.celery import app

    deadline = time.monotonic() + timeout
    while prefix in bgp.routes():
        assert time.monotonic() < deadline, f"the router still has {prefix}"
        app.send_task("bgp.tasks.heartbeat", retry=False)
        time.sleep(0.5)
    return time.monotonic()


def test_the_router_learns_each_vip_while_its_farm_can_serve_and_loses_it_when_it_cannot(
    api,
    worker,
    healthd,  # noqa: F811
    lab,
    bgp,
):
    web = make_farm(api, "bgp-web", vip4(60))
    make_farm(api, "bgp-web6", vip6(60), family=6)
    api.patch(f"bgp/farms/{web['id']}/", {"med": 60, "communities": "65000:60 65000:1:2"})
    configure(api, drain_seconds=2)
    node = bgp.start_node()
    pid = wait_until(bgp.node_bird_pid, 20, what="lbweb's BIRD to start")
    status = proc_status(pid)
    assert int(status["CapEff"], 16) == CAP_NET_ADMIN | CAP_NET_BIND_SERVICE, status["CapEff"]

    route = learnt(bgp, V4)
    assert f"BGP.next_hop: {NODE4}" in route and "BGP.med: 60" in route, route
    assert "BGP.community: (65000,60)" in route and "BGP.large_community: (65000, 1, 2)" in route, route
    assert "BGP.next_hop: " + NODE6 in learnt(bgp, V6)
    assert bgp.session("lb4")[0] == "Established"  # with the TCP-MD5 password as typed, on both ends
    since = bgp.session("lb4")[1]

    # A change reloads BIRD (birdc configure): the route follows, the session stays.
    api.patch(f"bgp/farms/{web['id']}/", {"med": 61})
    wait_until(lambda: "BGP.med: 61" in bgp.routes().get(V4, ""), 20, what="the new MED")
    assert bgp.session("lb4") == ("Established", since)

    # Every backend of the farm down (healthd marks them; the worker applies): its VIP is withdrawn; the other
    # farm's is not. One back: announced again.
    check(api, web, type="tcp", interval=0.5, timeout=0.4, rise=1, fall=1)
    healthd()
    for b in web["backends"]:
        wait_health(api, b["id"], "up")
    for name in ("b1", "b2", "b3"):
        lab.stop_server(name)
    gone(bgp, V4)
    assert V6 in bgp.routes()
    why = {"bgp-web": "withdrawn: no backend takes new connections", "bgp-web6": "announced"}
    wait_until(lambda: api.get("bgp/")["status"]["farms"] == why, 10, what="the reasons")
    lab.start_server("b2")
    learnt(bgp, V4, what="the VIP to come back with a backend")
    lab.ensure_servers()

    # Drained: graceful shutdown first (the router prefers it least), then withdrawn after the drain period.
    drained = time.monotonic()
    api.post("bgp/drain/", {"drained": True}, expect=200)
    wait_until(lambda: "(65535,0)" in bgp.routes().get(V4, ""), 20, what="the graceful-shutdown community")
    assert "BGP.local_pref: 0" in bgp.routes()[V4]
    left = beat_until_gone(bgp, V4) - drained
    beat_until_gone(bgp, V6)
    assert 2 <= left <= 12, left
    assert bgp.session("lb4")[0] == "Established"  # withdrawn, not disconnected
    api.post("bgp/drain/", {"drained": False}, expect=200)
    assert "(65535,0)" not in learnt(bgp, V4, what="the VIP after the drain is undone")
    assert node.poll() is None


def test_a_frozen_nodes_routes_leave_the_router_within_a_second_by_bfd(api, worker, lab, bgp):
    make_farm(api, "bgp-bfd", vip4(60))
    configure(api)
    bgp.start_node()
    learnt(bgp, V4)
    wait_until(lambda: "Up" in bgp.birdc("show", "bfd", "sessions"), 20, what="the BFD session")
    pid = bgp.node_bird_pid()
    os.kill(pid, signal.SIGSTOP)  # hung: its TCP sessions stay open, it sends nothing (hold time: 9 s)
    frozen = time.monotonic()
    try:
        left = gone(bgp, V4, timeout=9) - frozen
    finally:
        os.kill(pid, signal.SIGCONT)
    print(f"BFD: the frozen node's route left the router after {left * 1000:.0f} ms (hold time 9 s)")
    assert left < 1.0, left
    Path(bgp.dir / "bfd.txt").write_text(f"{left}\n")


def test_a_farm_that_is_off_is_not_announced(api, worker, lab, bgp):
    farm = make_farm(api, "bgp-off", vip4(60), backends=["b1"])
    configure(api)
    bgp.start_node()
    learnt(bgp, V4)
    api.patch(f"farms/{farm['id']}/", {"state": "off"})
    gone(bgp, V4)
    why = "withdrawn: the farm is off"  # the status is written just after BIRD was told
    wait_until(lambda: api.get("bgp/")["status"]["farms"]["bgp-off"] == why, 10, what="the reason")
    api.patch(f"farms/{farm['id']}/", {"state": "up"})
    learnt(bgp, V4)
