"""Metrics end to end: real traffic through a farm, the real collector in the LB namespace, the REST API.

Known traffic goes through a farm; the figures the API reports must match what
the client's own interface counted, within 5%.
"""

from __future__ import annotations

import time

import pytest

from tests.conftest import METRICS_INTERVAL as INTERVAL
from tests.conftest import wait_for
from tests.support.lab import backend4, vip4

pytestmark = [pytest.mark.dataplane, pytest.mark.django_db(transaction=True)]

ETHERNET_HEADER = 14  # the interface counts frames; nftables counts IP packets


def farm_row(api, farm_id: int) -> dict:
    return next(f for f in api.get("metrics/summary/")["farms"] if f["id"] == farm_id)


def sample_after(api, moment: float) -> dict:
    """The summary once the collector has sampled after ``moment`` (wall clock)."""
    return wait_for(
        lambda: (s := api.get("metrics/summary/"))["last_sample"] and s["last_sample"] > moment and s,
        what=f"a sample after {moment}",
    )


def l3(counters: dict, direction: str) -> int:
    return counters[f"{direction}_bytes"] - ETHERNET_HEADER * counters[f"{direction}_packets"]


def integral(points: list[dict], field: str, after: float, until: float) -> float:
    """What a rate series adds up to over (after, until]: sum of rate x seconds since the previous point."""
    total, previous = 0.0, None
    for point in points:
        if previous is not None and after < point["t"] <= until and point.get(field) is not None:
            total += point[field] * (point["t"] - previous)
        previous = point["t"]
    return total


def within(measured: float, truth: float, share: float = 0.05) -> bool:
    return abs(measured - truth) <= share * truth


def test_farm_bytes_and_connections_match_what_the_client_moved(api, lab, collector):
    farm = api.farm(
        name="metered",
        vip=vip4(80),
        protocol="tcp",
        ports="80",
        mode="snat",
        scheduler="rr",
        backends=[{"address": backend4(b)} for b in ("b1", "b2", "b3")],
    )
    api.wait_applied(farm["id"])
    wait_for(lambda: farm_row(api, farm["id"]).get("total_bytes_out") is not None, what="the farm's counters")
    before = sample_after(api, time.time())
    start = {k: v for k, v in farm_row(api, farm["id"]).items() if k.startswith("total_")}
    link_before = lab.link_counters(lab.client, "eth0")

    downloads, size = 24, 150_000
    received = lab.download(vip4(80), size, count=downloads)
    held = [lab.connect(vip4(80), 80) for _ in range(5)]  # open, idle: active connections
    try:
        link_after = lab.link_counters(lab.client, "eth0")
        done = time.time()
        after = sample_after(api, done + INTERVAL)
        row = farm_row(api, farm["id"])
        assert received == downloads * size

        # Totals from the nftables counters, against the client's interface (IP bytes, both ways).
        bytes_out = row["total_bytes_out"] - start["total_bytes_out"]
        bytes_in = row["total_bytes_in"] - start["total_bytes_in"]
        truth_out, truth_in = l3(link_after, "rx") - l3(link_before, "rx"), l3(link_after, "tx") - l3(link_before, "tx")
        print(f"farm out {bytes_out} B vs client rx {truth_out} B; in {bytes_in} B vs client tx {truth_in} B")
        assert within(bytes_out, truth_out), (bytes_out, truth_out)
        assert within(bytes_in, truth_in), (bytes_in, truth_in)
        assert bytes_out >= received  # the bodies, plus headers
        assert row["total_conns"] - start["total_conns"] == downloads + len(held)

        # The 2 s series (here 0.5 s) integrated over the same span: rates, not totals, are what is stored.
        series = api.get(f"metrics/farms/{farm['id']}/?window=5m")
        points = [p for p in series["points"] if not p.get("gap")]
        span = (before["last_sample"], after["last_sample"])
        print(
            f"series: out {integral(points, 'bytes_out', *span):.0f} B, in {integral(points, 'bytes_in', *span):.0f} B"
        )
        assert within(integral(points, "bytes_out", *span), bytes_out)
        assert within(integral(points, "bytes_in", *span), bytes_in)
        assert abs(integral(points, "new_conns", *span) - (downloads + len(held))) <= 1

        # Round robin spread the connections over the three backends; their traffic adds up to the farm's.
        backends = [b for p in points for b in p["backends"].values()]
        per_backend_bytes = integral(
            [{"t": p["t"], "b": sum(b.get("bytes") or 0 for b in p["backends"].values())} for p in points], "b", *span
        )
        assert within(per_backend_bytes, bytes_in + bytes_out)
        assert backends and all(b["enabled"] for b in backends)

        # A conntrack census sees the held connections as active, and every SNATed one holding a source port.
        census = wait_for(
            lambda: (r := farm_row(api, farm["id"])).get("active_conns") == len(held) and r, what="a census"
        )
        assert census["tracked_conns"] == downloads + len(held)  # closed ones linger in TIME_WAIT
        assert census["snat_ports"] == downloads + len(held)
        # the share of the tuples towards the busiest backend (round robin: a third, rounded up), out of
        # masquerade's 1024-65535
        busiest = -(-(downloads + len(held)) // 3)
        assert census["snat_port_use"] == round(100 * busiest / 64512, 2), census
        system = api.get("metrics/summary/")["system"]
        assert system["conntrack_count"] >= downloads + len(held) and system["conntrack_max"] > 0
        assert system["links"]["cli0"]["rx_bytes"] is not None and len(system["cpu"]) >= 1
    finally:
        for sock in held:
            sock.close()


def test_a_stopped_collector_leaves_a_gap_not_zeros(api, lab, collector):
    wait_for(lambda: api.get("metrics/summary/")["last_sample"], what="a first sample")
    collector.stop()
    stopped = time.time()
    stale = wait_for(lambda: (s := api.get("metrics/summary/"))["stale"] and s, timeout=15, what="staleness")
    assert stale["age"] >= 2.5 * INTERVAL
    collector.start()
    sample_after(api, stopped + 1)
    wait_for(lambda: not api.get("metrics/summary/")["stale"], what="fresh data again")
    points = api.get("metrics/system/?window=5m")["points"]
    # Exactly where the collector was stopped there is a gap point, then the first sample after the restart.
    gap = next(p for p in points if p.get("gap") and p["t"] <= stopped + INTERVAL)
    resumed = points[points.index(gap) + 1]
    assert resumed["t"] > stopped + 2.5 * INTERVAL
    before_gap = points[points.index(gap) - 1]
    assert before_gap["t"] <= stopped and not before_gap.get("gap")
    assert all(v is None for v in resumed["cpu"])  # the first sample after a restart has no rate: null, not 0


def test_a_hand_removed_traffic_hook_is_drift_that_reconcile_repairs(api, lab, worker):
    from dataplane.tasks import reconcile
    from tests.dataplane.test_dataplane import kernel_check

    farm = api.farm(
        name="hooked",
        vip=vip4(81),
        protocol="tcp",
        ports="80",
        mode="dnat",
        scheduler="rr",
        backends=[{"address": backend4("b1")}],
    )
    api.wait_applied(farm["id"])
    assert kernel_check(lab, worker)[0]
    key = f"{{ {backend4('b1')} . {farm['id']} }}"
    lab.ns(lab.lb, "nft", "delete", "element", "inet", "lbweb", "traffic4_in", key)
    ok, report = kernel_check(lab, worker)
    assert not ok, report  # traffic would flow uncounted: the kernel differs from the database
    assert "hooked" in report and "elements of traffic4_in: 1 missing" in report
    reconcile.apply_async(kwargs={"reason": "test traffic drift"})
    wait_for(lambda: kernel_check(lab, worker)[0], what="the repaired traffic hook")
    listing = lab.ns(lab.lb, "nft", "list", "map", "inet", "lbweb", "traffic4_in").stdout
    backend_id = farm["backends"][0]["id"]
    assert f"traffic-be-hooked-{backend_id}-in" in listing


def test_a_farm_that_does_not_count_bytes_has_no_forward_hook_and_reports_connections_not_bytes(api, lab, collector):
    """count_bytes off on the only farm: no base chain in forward (no packet pays the counting), traffic still
    balanced, and the figures say bytes are not counted (null, never 0) while new connections are. Turned
    back on, the hook and the bytes come back."""
    farm = api.farm(
        name="uncounted",
        vip=vip4(82),
        protocol="tcp",
        ports="80",
        mode="dnat",
        scheduler="rr",
        count_bytes=False,
        backends=[{"address": backend4(b)} for b in ("b1", "b2")],
    )
    api.wait_applied(farm["id"])
    chains = lab.ns(lab.lb, "nft", "list", "chains", "inet").stdout
    assert "chain forward" not in chains and "chain prerouting" in chains, chains
    # read once before the traffic, so that the connections make a rate (the first reading has none)
    wait_for(lambda: farm_row(api, farm["id"]).get("total_conns") is not None, what="the farm's counters")
    served = lab.http_get(vip4(82), 80, count=6)
    assert len({a["backend"] for a in served}) == 2  # balanced over both backends
    start = time.time()
    row = wait_for(
        lambda: (r := farm_row(api, farm["id"])).get("total_conns") and r["total_conns"] >= 6 and r, what="the conns"
    )
    assert row["total_bytes_in"] is None and row["total_bytes_out"] is None, row
    assert row["bytes_in"] is None and row["bytes_out"] is None, row  # unknown, not the zeros of an idle farm
    sample_after(api, start + INTERVAL)
    series = api.get(f"metrics/farms/{farm['id']}/?window=5m")
    assert series["measured"] and series["bytes_counted"] is False
    points = [p for p in series["points"] if not p.get("gap")]
    assert points and all(p["bytes_in"] is None and p["bytes_out"] is None for p in points if "new_conns" in p)
    assert any(p.get("new_conns") for p in points)  # connections are still counted

    api.patch(f"farms/{farm['id']}/", {"count_bytes": True})
    api.wait_applied(farm["id"])
    assert "chain forward" in lab.ns(lab.lb, "nft", "list", "chains", "inet").stdout
    lab.http_get(vip4(82), 80, count=2)
    wait_for(lambda: farm_row(api, farm["id"]).get("total_bytes_in"), what="the bytes counted again")
