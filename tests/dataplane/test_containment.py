"""One bad farm never stops the appliance (issue 12, items 2 and 3), on the real kernel with the real worker.

* a crash in the kernel writer (libnftables or lbweb's netlink code dying by a signal) fails the apply
  with the cause, isolates the farm, and every other farm keeps applying;
* a farm the kernel refuses is isolated without a full rebuild;
* persistence entries and counters survive a refused farm, a reconcile, a worker restart and a full
  rebuild (which carries them over).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

import compiler
import compiler.hooks
from dataplane.kernel.sandbox import CRASH_ON, CRASH_SIGNAL
from farms.models import ApplyRun, Backend, Farm
from tests.conftest import OUTPUT, wait_for
from tests.dataplane.test_dataplane import THREE, kernel_check, make_farm
from tests.support.lab import CLIENT4, vip4
from tests.support.stack import Worker

pytestmark = [pytest.mark.dataplane, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def crashing_worker(lab, worker_env, request):
    """The real worker, whose kernel writer kills itself (signal ``LBWEB_TEST_CRASH_SIGNAL``) before any
    libnftables call or netlink batch that names ``farm-boom``: as libnftables 1.0.6 does on a long log prefix."""
    signal_name = getattr(request, "param", "ABRT")
    env = dict(worker_env, **{CRASH_ON: '"farm-boom"', CRASH_SIGNAL: signal_name})
    lab.ns(lab.lb, "nft", "delete", "table", "inet", "lbweb", check=False)
    proc = Worker(lab.lb, env, OUTPUT / "logs" / f"worker-{request.node.name}.log").start()
    yield proc
    proc.stop()


def wait_failed(api, farm_id: int, timeout: float = 60) -> dict:
    def failed():
        status = api.get(f"farms/{farm_id}/")["apply_status"]
        return status if status["status"] == "failed" else None

    return wait_for(failed, timeout=timeout, what=f"farm {farm_id} failed")


def runs_after(run_id: int):
    return ApplyRun.objects.filter(id__gt=run_id).order_by("id")


def last_run_id() -> int:
    return ApplyRun.objects.order_by("-id").values_list("id", flat=True).first() or 0


@pytest.mark.parametrize("crashing_worker", ["ABRT", "SEGV"], indirect=True)
def test_a_crash_in_the_kernel_writer_isolates_the_farm_and_every_other_farm_keeps_applying(api, crashing_worker, lab):
    calm = make_farm(api, "calm", vip4(80))
    before = last_run_id()
    boom = api.farm(name="boom", vip=vip4(81), protocol="tcp", ports="80", mode="dnat", scheduler="rr")
    status = wait_failed(api, boom["id"])
    signal_name = f"SIG{crashing_worker.env[CRASH_SIGNAL]}"
    assert signal_name in status["error"] and "isolated" in status["error"], status
    assert "libnftables load in the scratch namespace" in status["error"], status  # the step it died in
    run = runs_after(before).filter(ok=False).first()
    assert run is not None and signal_name in run.error and f"farm {boom['id']}" in run.error, run
    assert crashing_worker.proc.poll() is None  # the worker lives on
    # Another farm created after it applies; the isolated farm is not tried again (no new crash).
    after = make_farm(api, "after", vip4(82), backends=("b2",))
    assert lab.http_get(vip4(82), 80)[0]["backend"] == "b2"
    assert lab.http_get(vip4(80), 80)[0]["backend"] in THREE
    crashes = runs_after(before).filter(ok=False).count()
    api.patch(f"farms/{calm['id']}/", {"description": "still applied"})
    api.wait_applied(calm["id"])
    assert runs_after(before).filter(ok=False).count() == crashes == 1
    assert not runs_after(before).filter(kind="full").exists()
    assert Farm.objects.get(id=boom["id"]).apply_status == "failed"
    ok, report = kernel_check(lab, crashing_worker)
    assert ok, report
    assert str(boom["id"]) in json.loads(report[: report.rindex("}") + 1])["isolated_farms"]
    # An explicit retry, or a change, tries it again (and it crashes again, contained again).
    api.post(f"farms/{boom['id']}/retry/", {}, expect=202)
    wait_for(lambda: runs_after(before).filter(ok=False).count() == 2, what="the retry")
    api.patch(f"farms/{boom['id']}/", {"description": "changed"})
    wait_for(lambda: runs_after(before).filter(ok=False).count() == 3, what="the attempt after a change")
    assert after and crashing_worker.proc.poll() is None


def test_a_crash_during_a_full_rebuild_isolates_the_farm_and_rebuilds_the_others(api, crashing_worker, lab):
    make_farm(api, "calm", vip4(83))
    before = last_run_id()
    lab.ns(lab.lb, "nft", "delete", "table", "inet", "lbweb")  # the next apply is a full rebuild
    boom = api.farm(name="boom", vip=vip4(84), protocol="tcp", ports="80", mode="dnat", scheduler="rr")
    status = wait_failed(api, boom["id"])
    assert "SIGABRT" in status["error"] and "libnftables" in status["error"], status
    full = runs_after(before).filter(kind="full").first()
    assert full is not None and not full.ok and "SIGABRT" in full.error, full
    assert lab.http_get(vip4(83), 80)[0]["backend"] in THREE
    ok, report = kernel_check(lab, crashing_worker)
    assert ok, report


def persist_entries(lab) -> dict[str, int]:
    """Every learnt persistence entry of lbweb's table: 'set client' -> seconds left."""
    table = json.loads(lab.ns(lab.lb, "nft", "-j", "list", "table", "inet", "lbweb").stdout)["nftables"]
    entries = {}
    for item in table:
        body = item.get("set", {})
        if body.get("name", "").startswith("persist-"):
            for element in body.get("elem", []):
                entries[f"{body['name']} {element['elem']['val']}"] = element["elem"]["expires"]
    return entries


def counters(lab) -> dict[str, int]:
    table = json.loads(lab.ns(lab.lb, "nft", "-j", "list", "counters", "table", "inet", "lbweb").stdout)
    return {c["counter"]["name"]: c["counter"]["packets"] for c in table["nftables"] if "counter" in c}


def assert_state_kept(lab, entries: dict[str, int], packets: dict[str, int], since: float, what: str) -> None:
    """The persistence entries are the same ones, counting down (not learnt again), and no counter went back."""
    now = persist_entries(lab)
    assert set(now) == set(entries), f"{what}: {now} != {entries}"
    elapsed = time.monotonic() - since
    for key, left in entries.items():
        assert left - elapsed - 2 <= now[key] <= left, (
            f"{what}: {key} {now[key]} s left, had {left} {elapsed:.0f} s ago"
        )
    now_packets = counters(lab)
    for name, value in packets.items():
        assert now_packets.get(name, 0) >= value, f"{what}: counter {name} {now_packets.get(name)} < {value}"


def test_persistence_and_counters_survive_a_refused_farm_a_reconcile_a_restart_and_a_full_rebuild(api, worker, lab):
    from dataplane.tasks import reconcile

    sticky = make_farm(api, "sticky", vip4(85), scheduler="weight", persistence="srcip", persist_ttl=3600)
    first = lab.http_get(vip4(85), 80)[0]["backend"]
    assert {a["backend"] for a in lab.http_get(vip4(85), 80, count=5)} == {first}
    entries, packets = persist_entries(lab), counters(lab)
    since = time.monotonic()
    assert len(entries) == 1 and CLIENT4 in next(iter(entries)), entries
    assert packets["farm-sticky"] >= 6, packets

    # 1. A farm the kernel refuses: isolated, the rest applied incrementally, no rebuild.
    before = last_run_id()
    bad = make_farm(api, "bad", vip4(86), backends=("b1",))
    Backend.objects.filter(farm_id=bad["id"]).update(port=70000)  # behind validation's back: only the kernel refuses
    api.patch(f"farms/{bad['id']}/", {"description": "refused"})
    status = wait_failed(api, bad["id"])
    assert status["error"].startswith("isolated") and "Error" in status["error"], status
    api.patch(f"farms/{sticky['id']}/", {"description": "applied beside the refused farm"})
    api.wait_applied(sticky["id"])
    assert not runs_after(before).filter(kind="full").exists(), list(runs_after(before).values("kind", "reason"))
    assert_state_kept(lab, entries, packets, since, "after a refused farm")

    # 2. A reconcile: the kernel matches the database (the isolated farm kept out), nothing is rebuilt.
    reconcile.apply_async(kwargs={"reason": "test reconcile"})
    wait_for(lambda: b"test reconcile" in worker.log_path.read_bytes(), what="the reconcile")
    time.sleep(1)
    assert not runs_after(before).filter(kind="full").exists()
    assert_state_kept(lab, entries, packets, since, "after a reconcile")

    # 3. A worker restart: its start-up reconcile finds the kernel right.
    worker.stop()
    worker.start()
    wait_for(lambda: b"worker start" in worker.log_path.read_bytes(), what="the start-up reconcile")
    time.sleep(1)
    assert not runs_after(before).filter(kind="full").exists()
    assert_state_kept(lab, entries, packets, since, "after a worker restart")

    # 4. A full rebuild (someone emptied the skeleton's digest chain): the state is carried over.
    lab.ns(lab.lb, "nft", "flush", "chain", "inet", "lbweb", compiler.hooks.BASE_CHAIN)
    api.patch(f"farms/{sticky['id']}/", {"description": "after the skeleton was damaged"})
    full = wait_for(lambda: runs_after(before).filter(kind="full").first(), what="the full rebuild")
    assert full.ok, full.error
    assert api.get(f"farms/{bad['id']}/")["apply_status"]["status"] == "failed"  # it stays out, still isolated
    api.wait_applied(sticky["id"])
    assert_state_kept(lab, entries, packets, since, "after a full rebuild")
    assert {a["backend"] for a in lab.http_get(vip4(85), 80, count=5)} == {first}
    ok, report = kernel_check(lab, worker)
    assert ok, report


def test_a_reconcile_that_finds_writes_not_applied_yet_applies_them_without_a_rebuild(api, worker, lab):
    """Under a steady stream of writes the database is always a little ahead of the kernel: that is not
    drift, and rebuilding the table for it at every reconcile would cost every farm's learnt state."""
    from dataplane.tasks import reconcile
    from farms.models import ConfigGeneration

    farm = make_farm(api, "pending", vip4(87), scheduler="weight")
    worker.drain()  # the farm's four writes may have queued a second apply: it must not take the write below
    before = last_run_id()
    # A write whose apply request was lost (Redis was down): the database moved, the kernel did not.
    Backend.objects.filter(id=farm["backends"][0]["id"]).update(weight=9)
    Farm.objects.filter(id=farm["id"]).update(config_generation=ConfigGeneration.bump())
    reconcile.apply_async(kwargs={"reason": "test pending"})
    run = wait_for(lambda: runs_after(before).filter(reason__startswith="test pending").first(), what="the reconcile")
    assert run.kind == "incremental" and run.ok, (run.kind, run.error)
    assert api.wait_applied(farm["id"])
    assert not runs_after(before).filter(kind="full").exists()
    ok, report = kernel_check(lab, worker)
    assert ok, report


def process_tree(pid: int) -> list[tuple[int, str]]:
    """Every descendant of ``pid`` with its command line, from /proc."""
    parents: dict[int, list[int]] = {}
    commands: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            commands[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        except OSError:  # gone meanwhile
            continue
        parent = int(stat[stat.rindex(")") + 2 :].split()[1])
        parents.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append((child, commands.get(child, "")))
            todo.append(child)
    return found


def test_the_worker_runs_its_tasks_itself_and_only_the_kernel_writer_beside_it(api, worker, lab):
    """No prefork pool beside the worker (``CELERY_WORKER_POOL``: ~117 MB at 10,000 farms): after an apply, the
    one process under it is its kernel writer (with that one's scratch process), and the apply ran in it."""
    farm = make_farm(api, "solo", vip4(89))
    assert lab.http_get(vip4(89), 80)[0]["backend"] in THREE
    tree = process_tree(worker.proc.pid)
    celery = [(pid, command) for pid, command in tree if "celery" in command]
    writers = [pid for pid, command in tree if "-m dataplane.kernel.sandbox" in command]
    assert not celery and len(writers) == 1, tree
    assert Farm.objects.get(id=farm["id"]).apply_status == "applied"
