"""Every L4 farm option of issue 3 proven with real packets in the routed namespace lab (DSR: test_dsr_*)."""

from __future__ import annotations

import collections
import json
import socket
import threading
import time

import pytest

from farms.models import ApplyRun, Farm
from tests.conftest import wait_for
from tests.dataplane.test_dataplane import THREE, backend_id, kernel_check, make_farm
from tests.support.lab import (
    CLIENT4,
    CLIENT6,
    LB_BACKSIDE4,
    LB_BACKSIDE6,
    KeepAlive,
    backend4,
    run_in_netns,
    send_raw_tcp,
    udp_question,
    vip4,
    vip6,
)

pytestmark = [pytest.mark.dataplane, pytest.mark.django_db(transaction=True)]


def counter(lab, name: str) -> int:
    return lab.lbweb_counter(name)["packets"]


def backends_of(answers) -> collections.Counter:
    return collections.Counter(a["backend"] for a in answers)


# -- modes x families x protocols -------------------------------------------------------


def _sctp_supported() -> bool:
    try:
        socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_SCTP).close()
        return True
    except OSError:
        return False


@pytest.mark.parametrize("family", [4, 6])
@pytest.mark.parametrize("mode", ["snat", "dnat"])
@pytest.mark.parametrize("protocol", ["tcp", "udp", "sctp", "all"])
def test_mode_family_protocol(api, worker, lab, mode, family, protocol):
    vip = vip4(200) if family == 4 else vip6(200)
    seen = {"snat": LB_BACKSIDE4 if family == 4 else LB_BACKSIDE6, "dnat": CLIENT4 if family == 4 else CLIENT6}[mode]
    ports = {"tcp": "80", "udp": "53", "sctp": "80", "all": ""}[protocol]
    make_farm(api, f"m-{protocol}", vip, family=family, mode=mode, protocol=protocol, ports=ports)
    if protocol == "sctp":
        table = lab.ns(lab.lb, "nft", "list", "map", "inet", "lbweb", f"dispatch{family}").stdout
        assert f"{vip} . sctp . 80 : goto farm-m-sctp" in table
        if not _sctp_supported():
            pytest.skip("rules applied; this kernel has no SCTP sockets, so no SCTP traffic can be sent")
    if protocol in ("tcp", "all"):
        answers = lab.http_get(vip, 80, count=6)
        assert backends_of(answers) == {b: 2 for b in THREE} and {a["client"] for a in answers} == {seen}
    if protocol in ("udp", "all"):
        answers = lab.udp_query(vip, 53, count=6)
        assert None not in answers
        assert backends_of(a for a, _ in answers) == {b: 2 for b in THREE}
        assert {a["client"] for a, _ in answers} == {seen}
        assert {peer[0] for _, peer in answers} == {vip}  # replies come back from the VIP


# -- schedulers -------------------------------------------------------------------------


def test_hash_keeps_a_client_port_on_one_backend_and_spreads_ports(api, worker, lab):
    make_farm(api, "hashed", vip4(201), protocol="udp", ports="53", scheduler="hash", sched_param="srcip srcport")
    answers = lab.udp_query(vip4(201), 53, count=90)
    counts = backends_of(a for a, _ in answers)
    assert set(counts) == set(THREE) and min(counts.values()) >= 15, counts  # 30 each expected

    # one source port always meets the same backend
    def same_port() -> list:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind((CLIENT4, 45000))
            s.settimeout(2)
            out = []
            for _ in range(5):
                s.sendto(b"x", (vip4(201), 53))
                out.append(json.loads(s.recvfrom(2048)[0])["backend"])
                time.sleep(0.05)
            return out

    first = run_in_netns(lab.client, same_port)
    assert len(set(first)) == 1
    make_farm(api, "srconly", vip4(202), scheduler="hash", sched_param="srcip")
    assert len(backends_of(lab.http_get(vip4(202), 80, count=20))) == 1  # one client address, one backend


def test_symmetric_hash_balances_and_sticks(api, worker, lab):
    make_farm(api, "symmetric", vip4(203), protocol="udp", ports="53", scheduler="symhash")
    answers = [a for a, _ in lab.udp_query(vip4(203), 53, count=60)]
    assert len(backends_of(answers)) >= 2


def test_priority_groups_as_nftlb_a_lower_priority_backend_comes_in_for_each_one_that_is_out(api, worker, lab):
    farm = api.farm(name="prio", vip=vip4(204), protocol="tcp", ports="80", mode="dnat", scheduler="weight")
    ids = {}
    for name, priority in (("b1", 1), ("b2", 1), ("b3", 2)):
        ids[name] = api.post("backends/", {"farm": farm["id"], "address": backend4(name), "priority": priority})["id"]
    api.wait_applied(farm["id"])
    assert set(backends_of(lab.http_get(vip4(204), 80, count=30))) == {"b1", "b2"}
    api.patch(f"backends/{ids['b1']}/", {"state": "disabled"})
    api.wait_applied(farm["id"])
    # nftlb's backend_s_gen_priority: one priority-1 backend out raises the level to 2, so b3 joins b2
    assert set(backends_of(lab.http_get(vip4(204), 80, count=30))) == {"b2", "b3"}
    api.patch(f"backends/{ids['b2']}/", {"state": "disabled"})
    api.wait_applied(farm["id"])
    assert set(backends_of(lab.http_get(vip4(204), 80, count=10))) == {"b3"}


def test_least_connections_sends_new_connections_to_the_idle_backend(api, worker, lab):
    from dataplane.tasks import balance_least_connections
    from farms.models import BackendLoad

    farm = make_farm(api, "leastconn", vip4(205), backends=("b1", "b2"), scheduler="leastconn")
    held = [KeepAlive(lab, vip4(205)) for _ in range(24)]
    try:
        busy = [k for k in held if k.get()["backend"] == "b1"]
        for k in held:
            if k not in busy:
                k.close()
        assert len(busy) >= 4
        balance_least_connections.apply_async()
        b2 = backend_id(farm, backend4("b2"))
        wait_for(lambda: BackendLoad.objects.filter(backend_id=b2, weight__gt=50).exists(), what="re-weighting")
        wait_for(lambda: ApplyRun.objects.filter(reason="least connections").exists(), what="apply")
        counts = backends_of(lab.http_get(vip4(205), 80, count=40))
        assert counts["b2"] >= 34, counts  # b1 holds every connection: nearly all new ones go to b2
    finally:
        for k in held:
            k.close()


# -- persistence, sessions, backend states ---------------------------------------------


def live_sessions(api, farm_id: int) -> list[dict]:
    """The farm's sessions as the worker read them after now (the API answers 202 until it has)."""
    asked = time.time()

    def read_after_asked():
        response = api._call("GET", f"farms/{farm_id}/sessions/?max_age=1", None)
        if response.status_code == 202:
            return None
        assert response.status_code == 200, response.text
        body = response.json()
        return (body["sessions"],) if time.time() - body["age"] >= asked else None  # a tuple: [] is an answer

    return wait_for(read_after_asked, what="the worker to read the sessions")[0]


def test_persistence_survives_applies_static_sessions_and_the_sessions_api(api, worker, lab):
    farm = make_farm(api, "sticky", vip4(206), scheduler="weight", persistence="srcip", persist_ttl=120)
    bound = backends_of(lab.http_get(vip4(206), 80, count=10))
    assert len(bound) == 1, bound
    backend = next(iter(bound))
    live = live_sessions(api, farm["id"])
    assert [s["client"] for s in live] == [CLIENT4]
    assert live[0]["backend"] == backend_id(farm, backend4(backend)) and 0 < live[0]["expires_in"] <= 120_000
    # an unrelated farm and a change of this farm's weights keep the entry
    make_farm(api, "unrelated", vip4(207), backends=("b1",))
    other = next(b for b in THREE if b != backend)
    api.patch(f"backends/{backend_id(farm, backend4(other))}/", {"weight": 7})
    api.wait_applied(farm["id"])
    assert backends_of(lab.http_get(vip4(206), 80, count=10)) == {backend: 10}
    # a static session overrides; flushing learnt entries of that backend leaves the static one
    target = next(b for b in THREE if b != backend)
    api.post("static-sessions/", {"farm": farm["id"], "client": CLIENT4, "backend": backend_id(farm, backend4(target))})
    api.wait_applied(farm["id"])
    assert backends_of(lab.http_get(vip4(206), 80, count=5)) == {target: 5}
    live = live_sessions(api, farm["id"])
    assert {(s["client"], s["static"]) for s in live} >= {(CLIENT4, True), (CLIENT4, False)}
    api._call("POST", f"farms/{farm['id']}/sessions/flush/", 202, json={"backend": backend_id(farm, backend4(backend))})
    old_id = backend_id(farm, backend4(backend))
    wait_for(lambda: all(s["backend"] != old_id for s in live_sessions(api, farm["id"])), what="flush")
    assert any(not s["static"] for s in live_sessions(api, farm["id"]))  # learnt on the static target
    # changing the persistence settings starts afresh (documented)
    api.patch(f"farms/{farm['id']}/", {"persist_ttl": 30})
    api.wait_applied(farm["id"])
    assert all(s["static"] for s in live_sessions(api, farm["id"]))


def test_drain_keeps_bound_clients_disabled_moves_them_and_cut_ends_connections(api, worker, lab):
    farm = make_farm(api, "states", vip4(208), scheduler="weight", persistence="srcip", persist_ttl=300)
    bound = next(iter(backends_of(lab.http_get(vip4(208), 80, count=3))))
    bid = backend_id(farm, backend4(bound))
    kept = KeepAlive(lab, vip4(208))
    try:
        assert kept.get()["backend"] == bound
        api.post(f"backends/{bid}/maintenance/", {"mode": "drain"}, expect=200)
        api.wait_applied(farm["id"])
        assert backends_of(lab.http_get(vip4(208), 80, count=5)) == {bound: 5}  # still bound by persistence
        api.patch(f"backends/{bid}/", {"state": "disabled"})
        api.wait_applied(farm["id"])
        moved = backends_of(lab.http_get(vip4(208), 80, count=5))
        assert bound not in moved and len(moved) == 1  # re-bound elsewhere
        assert kept.get()["backend"] == bound  # the established connection lives on
        api.patch(f"backends/{bid}/", {"state": "enabled"})
        api.wait_applied(farm["id"])
        kept.close()
        kept = KeepAlive(lab, vip4(208))
        now = kept.get()["backend"]
        api.post(f"backends/{backend_id(farm, backend4(now))}/maintenance/", {"mode": "cut"}, expect=200)
        api.wait_applied(farm["id"])

        def connection_cut() -> bool:
            try:
                kept.get()
                return False
            except (OSError, ValueError, Exception):
                return True

        wait_for(connection_cut, what="the cut connection to fail")
        entries = lab.ns(lab.lb, "conntrack", "-L", "-r", backend4(now), check=False).stdout
        assert "ESTABLISHED" not in entries
    finally:
        kept.close()


# -- limits, policies, guards -----------------------------------------------------------


def test_rate_and_connection_limits_refuse_and_count(api, worker, lab):
    make_farm(api, "ratelimited", vip4(209), new_rtlimit=5, new_rtlimit_burst=5, limit_verdict="reject")
    ok = sum(lab.try_connect(vip4(209), 80, timeout=1) for _ in range(40))
    assert 5 <= ok < 30, ok
    assert counter(lab, "farm-ratelimited-limit") >= 10
    farm = make_farm(api, "capped", vip4(210), backends=("b1",), limit_verdict="reject")
    api.patch(f"backends/{farm['backends'][0]['id']}/", {"est_connlimit": 2})
    api.wait_applied(farm["id"])
    held = [KeepAlive(lab, vip4(210)) for _ in range(2)]
    try:
        for k in held:
            k.get()
        assert not lab.try_connect(vip4(210), 80)
        assert counter(lab, "farm-capped-limit") >= 1
    finally:
        for k in held:
            k.close()
    farm = make_farm(api, "farmcap", vip4(211), est_connlimit=3, limit_verdict="drop")
    held = [KeepAlive(lab, vip4(211)) for _ in range(3)]
    try:
        assert not lab.try_connect(vip4(211), 80, timeout=0.5)
    finally:
        for k in held:
            k.close()


def test_policies_deny_and_allow_and_change_without_rebuilding_farms(api, worker, lab):
    deny = api.post("policies/", {"name": "blocklist", "type": "deny", "elements": "198.18.0.0/30, 198.18.9.9"})
    farm = make_farm(api, "guarded", vip4(212), policies=["blocklist"], limit_verdict="reject")
    assert not lab.try_connect(vip4(212), 80)
    assert counter(lab, "farm-guarded-policy") >= 1
    chain_before = lab.ns(lab.lb, "nft", "list", "chain", "inet", "lbweb", "farm-guarded").stdout
    api.patch(f"policies/{deny['id']}/", {"elements": "198.18.9.9"})
    api.wait_applied(farm["id"])
    assert lab.try_connect(vip4(212), 80)
    run = ApplyRun.objects.exclude(kind="noop").first()
    assert run.kind == "incremental" and run.farms_changed == 1  # only the policy's sets changed
    assert lab.ns(lab.lb, "nft", "list", "chain", "inet", "lbweb", "farm-guarded").stdout == chain_before
    api.post("policies/", {"name": "office", "type": "allow", "elements": "198.18.50.0/24"})
    api.patch(f"farms/{farm['id']}/", {"policies": ["office"]})
    api.wait_applied(farm["id"])
    assert not lab.try_connect(vip4(212), 80)
    assert api.delete(f"policies/{deny['id']}/", expect=204)


def test_tcp_strict_drops_invalid_and_resets_are_rate_limited(api, worker, lab):
    make_farm(api, "strict", vip4(213), tcp_strict=True, rst_rtlimit=2)
    send_raw_tcp(lab, vip4(213), 80, flags=0x03, count=5)  # SYN|FIN: invalid for conntrack
    wait_for(lambda: counter(lab, "guard-strict") >= 5, what="invalid packets dropped")
    before = counter(lab, "guard-strict")
    send_raw_tcp(lab, vip4(213), 80, flags=0x04, count=40, sport=41000)  # RSTs, far above 2/s
    wait_for(lambda: counter(lab, "guard-strict") - before >= 30, what="resets over the limit dropped")
    assert lab.http_get(vip4(213), 80)[0]["backend"] in THREE  # real traffic still flows


# -- logging, helpers, counters, intra-connect, SNAT pool, offload ---------------------


def test_counters_logging_helper_and_intra_connect(api, worker, lab):
    farm = make_farm(api, "ftpfarm", vip4(214), ports="21,80", helper="ftp", log=True, log_prefix="lbweb-ftp ")
    make_farm(api, "inside", vip4(215), intra_connect=True, mode="snat")
    answers = lab.http_get(vip4(214), 80, count=9)
    assert counter(lab, "farm-ftpfarm") == 9
    per_backend = {b: counter(lab, f"be-ftpfarm-{backend_id(farm, backend4(b))}") for b in THREE}
    assert per_backend == dict(backends_of(answers))
    rules = lab.ns(lab.lb, "nft", "list", "chain", "inet", "lbweb", "farm-ftpfarm").stdout
    log_rule = next(line for line in rules.splitlines() if "log prefix" in line)
    assert 'log prefix "lbweb-ftp' in log_rule and "limit rate 10/second" in log_rule, log_rule
    kept = KeepAlive(lab, vip4(214), 21)
    try:
        flows = lab.ns(lab.lb, "conntrack", "-L", "-d", vip4(214), "-p", "tcp", "--dport", "21").stdout
        assert "helper=ftp" in flows, flows
    finally:
        kept.close()
    # from the appliance itself (given a route to the VIPs): only the intra-connect farm balances
    lab.ns(lab.lb, "ip", "route", "add", "198.18.100.0/24", "dev", "br0")
    try:
        inside = run_in_netns(lab.lb, lambda: [socket.create_connection((vip4(215), 80), timeout=2) for _ in range(3)])
        for sock in inside:
            sock.close()
        assert counter(lab, "farm-inside") == 3
        assert not _connect_from_lb(lab, vip4(214))
    finally:
        lab.ns(lab.lb, "ip", "route", "del", "198.18.100.0/24", "dev", "br0", check=False)


def _connect_from_lb(lab, address: str) -> bool:
    try:
        run_in_netns(lab.lb, lambda: socket.create_connection((address, 80), timeout=1).close())
        return True
    except OSError:
        return False


def test_snat_source_pool_and_port_range_with_reported_capacity(api, worker, lab):
    for address in ("198.18.1.2", "198.18.1.3"):
        lab.ns(lab.lb, "ip", "addr", "add", f"{address}/24", "dev", "br0", check=False)
    try:
        farm = make_farm(
            api, "pool", vip4(216), mode="snat", source_addr="198.18.1.2-198.18.1.3", source_ports="20000-20009"
        )
        assert farm["snat_capacity"] == {"addresses": 2, "ports": 10, "per_backend": 20}
        answers = lab.http_get(vip4(216), 80, count=12)
        assert {a["client"] for a in answers} <= {"198.18.1.2", "198.18.1.3"}
        assert all(20000 <= a["client_port"] <= 20009 for a in answers)
    finally:
        for address in ("198.18.1.2", "198.18.1.3"):
            lab.ns(lab.lb, "ip", "addr", "del", f"{address}/24", "dev", "br0", check=False)


def test_flow_offload_without_kernel_support_fails_that_farm_clearly(api, worker, lab):
    """Before the worker has published what the kernel can do, the farm is accepted and its apply fails
    with the reason, while every other farm applies."""
    from farms import capabilities as published
    from lbweb.redis_client import get_redis

    make_farm(api, "plain", vip4(217))
    capabilities = wait_for(lambda: api._call("GET", "capabilities/", None).json(), what="capabilities")
    if capabilities.get("flowtable"):
        pytest.skip("this kernel has flowtables: nothing to refuse")
    get_redis().delete(published.REDIS_KEY)  # as if the worker had not probed the kernel yet
    published.forget()
    farm = api.farm(name="fast", vip=vip4(218), protocol="tcp", ports="80", mode="dnat", flow_offload=True)
    api.post("backends/", {"farm": farm["id"], "address": backend4("b1")})
    status = wait_for(
        lambda: (s := api.get(f"farms/{farm['id']}/")["apply_status"])["status"] == "failed" and s,
        what="the offload farm to fail",
    )
    assert "CONFIG_NF_FLOW_TABLE" in status["error"], status
    assert lab.http_get(vip4(217), 80)[0]["backend"] in THREE  # the rest is applied
    assert Farm.objects.get(name="plain").apply_status == "applied"


def test_flow_offload_refused_at_save_where_the_worker_found_no_flowtables(api, worker):
    capabilities = wait_for(lambda: api._call("GET", "capabilities/", None).json(), what="capabilities")
    if capabilities.get("flowtable"):
        pytest.skip("this kernel has flowtables: nothing to refuse")
    body = {"name": "fast", "vip": vip4(218), "protocol": "tcp", "ports": "80", "mode": "dnat", "flow_offload": True}
    answer = api.post("farms/", body, expect=400)
    assert "no flowtables" in answer["flow_offload"][0]
    assert not Farm.objects.filter(name="fast").exists()


# -- applying without loss --------------------------------------------------------------


def test_fifty_unrelated_applies_keep_connection_and_persistence(api, worker, lab):
    farm = make_farm(api, "steady", vip4(219), scheduler="weight", persistence="srcip", persist_ttl=600)
    kept = KeepAlive(lab, vip4(219))
    try:
        bound = kept.get()["backend"]
        for i in range(50):
            make_farm(api, f"noise{i}", vip4(100 + i), backends=("b1",))
        assert kept.get()["backend"] == bound
        assert backends_of(lab.http_get(vip4(219), 80, count=5)) == {bound: 5}
        assert [s["client"] for s in live_sessions(api, farm["id"])] == [CLIENT4]
    finally:
        kept.close()


def test_traffic_during_applies_has_no_failed_connection(api, worker, lab):
    make_farm(api, "busy", vip4(220))
    failures, done = [], threading.Event()
    total = [0]

    def traffic() -> None:
        while not done.is_set():
            try:
                lab.http_get(vip4(220), 80, count=5, timeout=2)
                total[0] += 5
            except OSError as exc:
                failures.append(exc)

    thread = threading.Thread(target=traffic)
    thread.start()
    try:
        for i in range(15):
            make_farm(api, f"churn{i}", vip4(230 + i), backends=("b2",))
    finally:
        done.set()
        thread.join()
    assert total[0] > 50 and failures == [], (total, failures[:3])
    ok, report = kernel_check(lab, worker)
    assert ok, report


def test_maglev_through_the_worker_moves_only_the_flows_of_a_backend_that_leaves(api, worker, lab):
    """API -> worker -> kernel: a maglev farm balances, and disabling one backend moves its flows alone
    (tests/compiler/test_maglev.py compares it with the hash scheduler and two nodes)."""
    farm = make_farm(api, "maglev", vip4(230), protocol="udp", ports="53", scheduler="maglev")

    def flows() -> list[str]:
        lab.ns(lab.lb, "conntrack", "-F", check=False)  # each round is scheduled afresh, from the same ports

        def ask() -> list[str]:
            answers = []
            for sport in range(46000, 46090):
                answers.append(json.loads(udp_question((CLIENT4, sport), (vip4(230), 53)))["backend"])
            return answers

        return run_in_netns(lab.client, ask)

    before = flows()
    assert set(before) == set(THREE) and min(collections.Counter(before).values()) >= 15, before
    leaving = backend_id(farm, backend4("b2"))
    api.patch(f"backends/{leaving}/", {"state": "disabled"})
    api.wait_applied(farm["id"])
    after = flows()
    assert "b2" not in after
    assert all(a == b for b, a in zip(before, after, strict=True) if b != "b2"), (before, after)
