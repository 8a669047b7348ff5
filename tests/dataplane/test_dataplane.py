"""Real kernel, real packets: farms created through the REST API, applied by the real worker in the LB namespace."""

from __future__ import annotations

import collections
import functools
import json
import subprocess
import threading
import time

import pytest

import compiler
import compiler.hooks
import compiler.names
from farms.models import ApplyRun, KernelFingerprint
from tests.conftest import OUTPUT, wait_for
from tests.support.lab import CLIENT4, CLIENT6, LB_BACKSIDE4, KeepAlive, backend4, backend6, vip4, vip6
from tests.support.stack import ROOT, VENV_BIN, Worker

pytestmark = [pytest.mark.dataplane, pytest.mark.django_db(transaction=True)]

THREE = ("b1", "b2", "b3")


def make_farm(api, name, vip, backends=THREE, family=4, **fields):
    address = backend4 if family == 4 else backend6
    defaults = {"protocol": "tcp", "ports": "80", "mode": "dnat", "scheduler": "rr"}
    farm = api.farm(name=name, vip=vip, backends=[{"address": address(b)} for b in backends], **{**defaults, **fields})
    return api.wait_applied(farm["id"])


def backend_id(farm, address):
    return next(b["id"] for b in farm["backends"] if b["address"] == address)


def kernel_check(lab, worker):
    """``manage.py kernel --check`` in the LB namespace, against the worker's database."""
    cmd = ["ip", "netns", "exec", lab.lb, str(VENV_BIN / "python"), "manage.py", "kernel", "--check"]
    result = subprocess.run(cmd, cwd=ROOT, env=worker.env, capture_output=True, text=True)
    return result.returncode == 0, result.stdout + result.stderr


def test_round_robin_reaches_all_three_backends_in_turn(api, worker, lab):
    make_farm(api, "web", vip4(1))
    seq = [a["backend"] for a in lab.http_get(vip4(1), 80, count=9)]
    assert set(seq[:3]) == set(THREE)
    assert seq == seq[:3] * 3, seq


def test_weights_one_to_three_split_traffic_about_25_75(api, worker, lab):
    farm = api.farm(name="weighted", vip=vip4(2), protocol="tcp", ports="80", mode="dnat", scheduler="weight")
    api.post("backends/", {"farm": farm["id"], "address": backend4("b1"), "weight": 1})
    api.post("backends/", {"farm": farm["id"], "address": backend4("b2"), "weight": 3})
    api.wait_applied(farm["id"])
    counts = collections.Counter(a["backend"] for a in lab.http_get(vip4(2), 80, count=400))
    share = counts["b1"] / 400
    assert set(counts) == {"b1", "b2"}
    assert 0.18 <= share <= 0.32, counts  # 25% +- 7 points: over 3 standard deviations at n=400


def test_dnat_keeps_the_client_address_and_snat_shows_the_lb(api, worker, lab):
    make_farm(api, "keep-client", vip4(3), mode="dnat")
    make_farm(api, "hide-client", vip4(4), mode="snat")
    assert {a["client"] for a in lab.http_get(vip4(3), 80, count=6)} == {CLIENT4}
    assert {a["client"] for a in lab.http_get(vip4(4), 80, count=6)} == {LB_BACKSIDE4}


def test_port_lists_and_a_backend_port_that_differs_from_the_virtual_port(api, worker, lab):
    make_farm(api, "two-ports", vip4(5), ports="80,8080", backends=("b1",))
    assert lab.http_get(vip4(5), 8080)[0]["port"] == 8080
    assert lab.http_get(vip4(5), 80)[0]["port"] == 80
    farm = api.farm(name="remap", vip=vip4(6), protocol="tcp", ports="80", mode="dnat", scheduler="rr")
    api.post("backends/", {"farm": farm["id"], "address": backend4("b3"), "port": 8080})
    api.wait_applied(farm["id"])
    answer = lab.http_get(vip4(6), 80)[0]
    assert (answer["backend"], answer["client"], answer["port"]) == ("b3", CLIENT4, 8080)


def test_ipv6_farm_balances_over_ipv6_backends_and_counts_each_ones_bytes_both_ways(api, worker, lab):
    farm = make_farm(api, "web6", vip6(1), family=6)
    answers = lab.http_get(vip6(1), 80, count=6)
    assert {a["backend"] for a in answers} == set(THREE)
    assert {a["client"] for a in answers} == {CLIENT6}
    # The forward hook's IPv6 rules (traffic6_in by the destination, traffic6_out by the source) found each one.
    for backend in farm["backends"]:
        for direction in ("in", "out"):
            name = compiler.names.backend_traffic_counter_name("web6", backend["id"], direction)
            counter = lab.lbweb_counter(name)
            assert counter["packets"] >= 2 and counter["bytes"] > 0, (name, counter)


def test_disabled_backend_gets_no_new_connection_but_keeps_its_established_one(api, worker, lab):
    farm = make_farm(api, "drainme", vip4(7))
    kept = KeepAlive(lab, vip4(7))
    try:
        victim = kept.get()["backend"]
        api.patch(f"backends/{backend_id(farm, backend4(victim))}/", {"state": "disabled"})
        api.wait_applied(farm["id"])
        fresh = collections.Counter(a["backend"] for a in lab.http_get(vip4(7), 80, count=30))
        assert victim not in fresh and len(fresh) == 2, fresh
        for _ in range(3):
            assert kept.get()["backend"] == victim  # the established connection still works
        # the change went in as lbweb's own netlink batch, not through libnftables' whole-table cache
        assert ApplyRun.objects.filter(kind="incremental", ok=True).first().writer == "netlink"
    finally:
        kept.close()


def test_established_connection_survives_unrelated_applies(api, worker, lab):
    make_farm(api, "steady", vip4(8))
    kept = KeepAlive(lab, vip4(8))
    try:
        first = kept.get()["backend"]
        for i in range(10):
            make_farm(api, f"other{i}", vip4(20 + i), backends=("b1",))
            assert kept.get()["backend"] == first
    finally:
        kept.close()


def test_deleting_a_farm_removes_its_rules_and_nothing_else(api, worker, lab):
    lab.ns(lab.lb, "nft", "add table inet sentinel; add chain inet sentinel c { type filter hook forward priority 0; }")
    lab.ns(lab.lb, "nft", "add rule inet sentinel c ip daddr 198.18.1.0/24 counter")
    try:
        before = lab.ns(lab.lb, "nft", "-j", "-s", "list", "table", "inet", "sentinel").stdout
        make_farm(api, "stays", vip4(9))
        gone = make_farm(api, "gone", vip4(10))
        assert lab.try_connect(vip4(10), 80)
        api.delete(f"farms/{gone['id']}/")
        api.wait_generation(gone["apply_status"]["config_generation"] + 1)
        table = lab.ns(lab.lb, "nft", "list", "table", "inet", "lbweb").stdout
        assert "farm-gone" not in table and "be-gone-" not in table and vip4(10) not in table
        assert "farm-stays" in table
        assert not lab.try_connect(vip4(10), 80)
        assert lab.http_get(vip4(9), 80)[0]["backend"] in THREE
        assert lab.ns(lab.lb, "nft", "-j", "-s", "list", "table", "inet", "sentinel").stdout == before
        assert ApplyRun.objects.filter(kind="incremental", ok=True).first().writer == "netlink"
        ok, report = kernel_check(lab, worker)
        assert ok, report
    finally:
        lab.ns(lab.lb, "nft", "delete", "table", "inet", "sentinel", check=False)


def test_worker_killed_mid_stream_restarts_and_the_kernel_matches_the_database(api, worker, lab):
    farms = [make_farm(api, f"crash{i}", vip4(40 + i), backends=("b1", "b2")) for i in range(4)]
    backends = [b["id"] for f in farms for b in f["backends"]]
    for i in range(40):
        if i == 12:
            worker.kill()
        api.patch(f"backends/{backends[i % len(backends)]}/", {"weight": 1 + i})
        if i % 7 == 0:
            api.post("backends/", {"farm": farms[i % 4]["id"], "address": backend4("b3"), "port": 8000 + i})
    worker.start()
    for farm in farms:
        api.wait_applied(farm["id"])
    ok, report = kernel_check(lab, worker)
    assert ok, report
    for i in range(4):
        assert lab.http_get(vip4(40 + i), 80)[0]["backend"] in THREE


def test_drift_is_repaired_by_reconcile(api, worker, lab):
    from dataplane.tasks import reconcile

    make_farm(api, "drifty", vip4(50))
    lab.ns(lab.lb, "nft", "delete", "table", "inet", "lbweb")  # someone deletes the table by hand
    assert not lab.try_connect(vip4(50), 80)
    assert not kernel_check(lab, worker)[0]
    reconcile.apply_async(kwargs={"reason": "test drift"})
    for _ in range(100):
        if kernel_check(lab, worker)[0]:
            break
        threading.Event().wait(0.1)
    ok, report = kernel_check(lab, worker)
    assert ok, report
    assert lab.http_get(vip4(50), 80)[0]["backend"] in THREE
    run = ApplyRun.objects.filter(reason__startswith="test drift").get()
    assert run.kind == "full" and run.ok


def test_reconcile_compares_only_when_the_kernel_moved_and_still_repairs_a_hand_edit(api, worker, lab):
    """At 10,000 farms reading the table back takes seconds: the worker skips it while the kernel's ruleset
    generation is the one it left, and any hand edit moves that generation."""
    from dataplane.tasks import reconcile

    make_farm(api, "watched", vip4(51))
    runs = ApplyRun.objects.count()
    start = worker.log_path.stat().st_size
    reconcile.apply_async(kwargs={"reason": "quiet check"})
    skipped = b"quiet check: kernel generation"
    wait_for(lambda: skipped in worker.log_path.read_bytes()[start:], what="the skipped comparison")
    assert ApplyRun.objects.count() == runs
    lab.ns(lab.lb, "nft", "flush", "chain", "inet", "lbweb", "farm-watched")  # the farm's rules are gone
    reconcile.apply_async(kwargs={"reason": "after edit"})
    run = wait_for(lambda: ApplyRun.objects.filter(reason__startswith="after edit").first(), what="the repair")
    assert run.kind == "repair" and run.ok, (
        run.error
    )  # that farm alone was written again (tests/dataplane/test_drift.py)
    ok, report = kernel_check(lab, worker)
    assert ok, report
    assert lab.http_get(vip4(51), 80)[0]["backend"] in THREE


def test_a_burst_of_100_writes_becomes_a_handful_of_applies(api, worker, lab):
    from farms import services
    from farms.models import Backend

    farm = make_farm(api, "bursty", vip4(60), scheduler="weight")
    first_run = ApplyRun.objects.order_by("-id").first().id
    backend = Backend.objects.get(id=farm["backends"][0]["id"])
    started = time.monotonic()
    for i in range(100):  # each write is its own transaction and enqueues its own apply
        services.backend_update(backend=backend, weight=1 + i)
    elapsed = time.monotonic() - started
    final = api.wait_applied(farm["id"])
    runs = ApplyRun.objects.filter(id__gt=first_run).exclude(kind="noop")
    print(f"100 writes in {elapsed:.2f}s -> {runs.count()} kernel transactions")
    allowed = 3 + int(elapsed / 0.2)  # at most one apply per coalescing window, plus the edges
    assert 1 <= runs.count() <= allowed, list(runs.values("generation", "kind", "duration_ms"))
    assert next(b["weight"] for b in final["backends"] if b["id"] == backend.id) == 100
    table = json.loads(lab.ns(lab.lb, "nft", "-j", "list", "table", "inet", "lbweb").stdout)
    assert any(r.get("rule", {}).get("chain") == "farm-bursty" for r in table["nftables"])


def test_a_farm_the_kernel_refuses_is_failed_with_its_message_and_the_others_still_apply(api, worker, lab):
    from farms.models import Backend, Farm

    good = make_farm(api, "good", vip4(70))
    bad = make_farm(api, "bad", vip4(71), backends=("b1",))
    # A value no validation would let through, written behind the services' back: only libnftables can refuse it.
    Backend.objects.filter(farm_id=bad["id"]).update(port=70000)
    api.patch(f"farms/{bad['id']}/", {"description": "touch"})
    api.patch(f"farms/{good['id']}/", {"description": "touch"})
    deadline = time.monotonic() + 30
    while api.get(f"farms/{bad['id']}/")["apply_status"]["status"] != "failed":
        assert time.monotonic() < deadline, api.get(f"farms/{bad['id']}/")["apply_status"]
        time.sleep(0.1)
    status = api.get(f"farms/{bad['id']}/")["apply_status"]
    assert "Error" in status["error"], status
    assert api.wait_applied(good["id"])
    assert lab.http_get(vip4(70), 80)[0]["backend"] in THREE
    run = ApplyRun.objects.filter(ok=False).first()
    assert run is not None and str(bad["id"]) in run.error
    assert Farm.objects.get(id=bad["id"]).apply_status == "failed"


def test_the_skeleton_digest_is_read_from_the_kernel_and_is_none_without_table_or_chain(lab):
    """``Kernel.base_digest`` reads one netlink dump of lbweb's skeleton chain (``base``). Run in the client namespace,
    where no worker can rebuild anything behind the test's back."""
    probe = [
        str(VENV_BIN / "python"),
        "-c",
        "from dataplane.kernel.applier import Kernel; print(Kernel().base_digest())",
    ]
    nft = functools.partial(lab.ns, lab.client, "nft")
    digest_comment = f'"{compiler.hooks.BASE_DIGEST_PREFIX}abc123"'
    try:
        assert lab.ns(lab.client, *probe).stdout.strip() == "None"
        nft("add", "table", "inet", "lbweb")
        assert lab.ns(lab.client, *probe).stdout.strip() == "None"
        nft("add", "chain", "inet", "lbweb", compiler.hooks.BASE_CHAIN)
        nft("add", "rule", "inet", "lbweb", compiler.hooks.BASE_CHAIN, "counter", "comment", '"other"')
        assert lab.ns(lab.client, *probe).stdout.strip() == "None"
        nft("add", "rule", "inet", "lbweb", compiler.hooks.BASE_CHAIN, "counter", "comment", digest_comment)
        assert lab.ns(lab.client, *probe).stdout.strip() == "abc123"
        # Another family's table of the same name is not lbweb's.
        nft("delete", "table", "inet", "lbweb")
        nft("add", "table", "ip", "lbweb")
        nft("add", "chain", "ip", "lbweb", compiler.hooks.BASE_CHAIN)
        nft("add", "rule", "ip", "lbweb", compiler.hooks.BASE_CHAIN, "counter", "comment", digest_comment)
        assert lab.ns(lab.client, *probe).stdout.strip() == "None"
    finally:
        nft("delete", "table", "inet", "lbweb", check=False)
        nft("delete", "table", "ip", "lbweb", check=False)


def test_a_write_after_the_table_was_deleted_by_hand_rebuilds_it(api, worker, lab):
    """Without the table the worker finds no skeleton digest and rebuilds everything in one transaction.
    The rebuild may come from a task still queued by the farm's creation (a no-op otherwise) or from the write."""
    farm = make_farm(api, "lost", vip4(70), scheduler="weight")
    first_run = ApplyRun.objects.order_by("-id").first().id
    lab.ns(lab.lb, "nft", "delete", "table", "inet", "lbweb")
    api.patch(f"backends/{farm['backends'][0]['id']}/", {"weight": 7})
    api.wait_applied(farm["id"])
    runs = list(ApplyRun.objects.filter(id__gt=first_run).exclude(kind="noop").order_by("id"))
    assert runs and all(run.ok for run in runs), runs
    assert runs[0].kind == "full" and runs[0].reason.endswith("table missing"), runs[0].reason
    ok, report = kernel_check(lab, worker)
    assert ok, report
    assert lab.http_get(vip4(70), 80)[0]["backend"] in THREE


@pytest.fixture
def bulk_worker(lab, worker_env, request):
    """The real worker with bulk bounds small enough for a handful of farms: more than 2 units is a bulk
    change, and each of its transactions holds one unit, written by lbweb's own batch."""
    lab.ns(lab.lb, "nft", "delete", "table", "inet", "lbweb", check=False)
    lab.ensure_servers()
    bounds = {"LBWEB_BULK_UNITS": "2", "LBWEB_BULK_TRANSACTION_COMMANDS": "1", "LBWEB_LIBNFTABLES_BULK_COMMANDS": "0"}
    proc = Worker(lab.lb, dict(worker_env, **bounds), OUTPUT / "logs" / f"worker-{request.node.name}.log").start()
    yield proc
    proc.stop()


def test_a_bulk_change_in_transactions_of_whole_farms_carries_traffic(api, bulk_worker, lab):
    """A bulk change, each farm in its own transaction of lbweb's batch, and a rebuild of a table deleted by
    hand (the skeleton alone, then the farms the same way): every farm answers, and the kernel matches the
    database."""
    from django.db import transaction

    from farms import services

    with transaction.atomic():  # one commit: the worker sees the four farms in one change
        farms = [
            services.farm_create(name=f"bulk{i}", vip=vip4(80 + i), protocol="tcp", ports="80", mode="dnat")
            for i in range(4)
        ]
        for farm in farms:
            for b in THREE:
                services.backend_create(farm=farm, address=backend4(b))
    for farm in farms:
        api.wait_applied(farm.id)
    bulk = ApplyRun.objects.exclude(kind="noop").order_by("id").last()
    assert (bulk.writer, bulk.ok, bulk.farms_changed) == ("netlink", True, 4), bulk
    # The new farms' fingerprints were made from what scratch made of them, not read back: they match the kernel.
    assert set(KernelFingerprint.objects.values_list("key", flat=True)) >= {f"farm:{f.id}" for f in farms}
    ok, output = kernel_check(lab, bulk_worker)
    assert ok, output
    first_run = bulk.id
    lab.ns(lab.lb, "nft", "delete", "table", "inet", "lbweb")
    with transaction.atomic():
        for farm in farms[:3]:
            services.farm_update(farm=farm, scheduler="weight")
    for farm in farms:
        api.wait_applied(farm.id)
    build = ApplyRun.objects.filter(id__gt=first_run).exclude(kind="noop").order_by("id").first()
    assert (build.kind, build.writer, build.ok) == ("full", "netlink", True), build
    assert build.reason.endswith("table missing"), build.reason
    for i in range(4):
        assert {a["backend"] for a in lab.http_get(vip4(80 + i), 80, count=30)} == set(THREE)
    ok, output = kernel_check(lab, bulk_worker)
    assert ok, output
