"""The Applier's own logic against an in-memory kernel (dataplane/kernel/fake/): no root, no namespace.

Coalescing, incremental or bulk, isolating a refused farm by bisection, a crash, an uncertain outcome,
drift repair and the ApplyRun bookkeeping, each in a few milliseconds. Nothing here may reach a kernel:
a netlink socket or a kernel writer fails the test. The same behaviour on the real kernel, with real
packets, is tests/dataplane/test_dataplane.py, test_transcribe.py, test_drift.py and test_containment.py.
"""

from __future__ import annotations

import math
import socket

import pytest

from compiler import units
from dataplane import applier as dataplane
from dataplane import batching, fingerprints, isolation
from dataplane.kernel import links, sandbox
from dataplane.kernel.fake import FakeKernel
from dataplane.kernel.interface import Interface
from dataplane.unit_cache import UnitCache
from farms import services
from farms.choices import ApplyKindChoices
from farms.models import ApplyRun, ConfigGeneration, Farm, KernelFingerprint, Policy

pytestmark = pytest.mark.django_db

TABLE = {"family": "inet", "table": "lbweb"}
# The worker's unit cache outlives each task's Applier (``tasks.worker_cache``): one for these tests, emptied
# before and after each, shared by the Appliers a test makes.
CACHE = UnitCache()


class NoNetlink(socket.socket):
    def __init__(self, family=-1, *args, **kwargs):
        if family == socket.AF_NETLINK:
            raise AssertionError("a netlink socket was opened: this test must not reach the kernel")
        super().__init__(family, *args, **kwargs)


@pytest.fixture(autouse=True)
def no_kernel(monkeypatch, settings):
    monkeypatch.setattr(socket, "socket", NoNetlink)
    monkeypatch.setattr(sandbox, "writer", lambda: pytest.fail("the kernel writer was started"))
    settings.LBWEB_APPLY_COALESCE_SECONDS = 0
    CACHE.reset()
    yield
    CACHE.reset()


@pytest.fixture
def kernel():
    return FakeKernel(capabilities={"flowtable": True})


def applier(kernel) -> dataplane.Applier:
    return dataplane.Applier(kernel, cache=CACHE)


def farm(name: str, octet: int, backends: int = 2, **fields) -> Farm:
    values = {"vip": f"198.18.100.{octet}", "ports": "80", "mode": "dnat", "scheduler": "rr", **fields}
    created = services.farm_create(name=name, **values)
    for i in range(backends):
        services.backend_create(farm=created, address=f"198.18.{octet}.{i + 10}")
    return created


def applied(*farms: Farm) -> bool:
    rows = Farm.objects.filter(pk__in=[f.pk for f in farms])
    return all(r.applied_generation >= r.config_generation and not r.apply_error for r in rows)


def rules(kernel: FakeKernel, chain: str) -> list:
    return kernel.tables[("inet", "lbweb")].rules[chain]


def test_the_fake_is_a_kernel_interface(kernel):
    assert isinstance(kernel, Interface)
    assert isinstance(sandbox.IsolatedKernel(), Interface)  # made, never called


def test_a_first_apply_builds_the_table_in_one_transaction_and_fingerprints_it(kernel):
    web, api = farm("web", 1), farm("api", 2)
    run = applier(kernel).apply_pending()
    assert (run.kind, run.ok, run.writer, run.farms_changed) == (ApplyKindChoices.FULL, True, "libnftables", 2)
    assert run.generation == ConfigGeneration.current() and applied(web, api)
    assert [c.method for c in kernel.writes()] == ["apply"]
    assert run.commands == len(kernel.writes()[0].commands)
    assert {"farm-web", "farm-api", "prerouting"} <= set(kernel.tables[("inet", "lbweb")].chains)
    assert set(KernelFingerprint.objects.values_list("key", flat=True)) == {
        "skeleton",
        "hook:prerouting",
        "hook:forward",
        f"farm:{web.pk}",
        f"farm:{api.pk}",
    }


def test_one_backend_change_is_one_netlink_transaction_of_that_farm_alone(kernel):
    web, api = farm("web", 1), farm("api", 2)
    applier(kernel).apply_pending()
    services.backend_create(farm=web, address="198.18.1.99")
    run = applier(kernel).apply_pending()
    assert (run.kind, run.ok, run.writer, run.farms_changed) == (ApplyKindChoices.INCREMENTAL, True, "netlink", 1)
    write = kernel.writes()[-1]
    assert (write.method, write.writer) == ("apply_incremental", "netlink")
    assert "198.18.1.99" in str(write.commands) and "farm-api" not in str(write.commands)
    assert applied(web, api)
    assert applier(kernel).apply_pending().kind == ApplyKindChoices.NOOP  # nothing left: no write
    assert len(kernel.writes()) == 2


def applied_then_changed(kernel, count: int, changed: int) -> tuple[list[Farm], int]:
    """``count`` farms applied, then a backend (198.18.<pk>.99) added to the first ``changed`` of them;
    and how many writes the kernel had seen before that change."""
    farms = [farm(f"f{i}", i) for i in range(1, count + 1)]
    applier(kernel).apply_pending()
    for f in farms[:changed]:
        services.backend_create(farm=f, address=f"198.18.{f.pk}.99")
    return farms, len(kernel.writes())


def test_the_farms_a_bulk_change_adds_are_fingerprinted_as_they_are_written_not_read_back(kernel, monkeypatch):
    """Reading a table of 10,000 farms back took 18 s of a 90 s apply: the farms a bulk change adds are
    announced whole, and the kernel records them as it commits them (``written_records``). A disabled
    farm holds nothing and is recorded empty; nothing is read back, and a reconcile finds no drift."""
    monkeypatch.setattr(batching, "BULK_UNITS", 2)
    monkeypatch.setattr(batching, "LIBNFTABLES_BULK_COMMANDS", 0)
    monkeypatch.setattr(batching, "BULK_TRANSACTION_COMMANDS", 1)  # a farm a transaction
    first = farm("f1", 1)
    applier(kernel).apply_pending()
    added = [farm(f"f{i}", i) for i in range(2, 6)] + [farm("off", 6, state="off")]
    start = len(kernel.calls)
    run = applier(kernel).apply_pending()
    assert (run.kind, run.ok, run.writer, run.farms_changed) == (ApplyKindChoices.INCREMENTAL, True, "netlink", 5)
    calls = [c.method for c in kernel.calls[start:]]
    assert "read_units" not in calls and calls.count("written_records") == calls.count("apply_incremental") > 1
    stored = fingerprints.load_fingerprints()
    read = kernel.read_units(CACHE.applied()).records
    keys = [f"farm:{f.pk}" for f in added]
    assert {k: stored[k] for k in keys} == {k: read[k] for k in keys} and stored[keys[-1]] == {}
    assert stored[f"farm:{first.pk}"] == read[f"farm:{first.pk}"] and stored[keys[0]]["elements dispatch4"]
    assert not fingerprints.find_drift(CACHE.applied(), stored, kernel).units


def test_a_change_of_many_farms_goes_in_transactions_of_whole_farms_and_a_small_one_in_one(kernel, monkeypatch):
    """Over BULK_UNITS units, a change is split (``bulk_transactions``): libnftables would hold it whole
    (~3.2 GB at 10,000 farms); each transaction is lbweb's own batch of whole farms, in order."""
    monkeypatch.setattr(batching, "BULK_UNITS", 2)
    monkeypatch.setattr(batching, "LIBNFTABLES_BULK_COMMANDS", 0)
    farms, first = applied_then_changed(kernel, 5, 4)
    compiled, applied_units = CACHE.current()[1], CACHE.applied()
    size = max(batching.command_count(compiled[k], applied_units[k]) for k in (f"farm:{f.pk}" for f in farms))
    monkeypatch.setattr(batching, "BULK_TRANSACTION_COMMANDS", 2 * size + size // 2)  # two farms a transaction
    run = applier(kernel).apply_pending()
    assert (run.kind, run.ok, run.writer, run.farms_changed) == (ApplyKindChoices.INCREMENTAL, True, "netlink", 4)
    bulk = kernel.writes()[first:]
    assert [w.method for w in bulk] == ["apply_incremental", "apply_incremental"]
    for write, pair in zip(bulk, (farms[:2], farms[2:4]), strict=True):
        written = str(write.commands)
        assert all(f"198.18.{f.pk}.99" in written for f in pair)  # each farm whole, in its own transaction
        assert not any(f"198.18.{f.pk}.99" in written for f in farms if f not in pair)
    assert run.commands == sum(len(w.commands) for w in bulk)
    # The second transaction is announced before the first is committed (the scratch process loads it meanwhile).
    order = [c for c in kernel.calls if c.method in ("prefetch", "apply_incremental")][-3:]
    assert [c.method for c in order] == ["prefetch", "apply_incremental", "apply_incremental"]
    assert order[0].commands == bulk[1].commands
    # The processes that wrote it let go of their memory (~290 MB at 10,000 farms) before the table is read back.
    after = [c.method for c in kernel.calls if c.method in ("apply_incremental", "release", "read_units")]
    assert after[-4:] == ["apply_incremental", "apply_incremental", "release", "read_units"]
    released = [c.method for c in kernel.calls].count("release")
    services.backend_create(farm=farms[4], address="198.18.5.98")
    assert applier(kernel).apply_pending().writer == "netlink"
    assert [c.method for c in kernel.writes()[first:]] == ["apply_incremental"] * 3
    assert [c.method for c in kernel.calls].count("release") == released  # a small change keeps the writer
    assert applied(*farms)
    rebuilt = FakeKernel(capabilities={"flowtable": True})
    applier(rebuilt)._resync("the same configuration in one transaction")
    assert rebuilt.tables == kernel.tables


def test_most_of_a_small_table_goes_to_libnftables_in_one_transaction(kernel, monkeypatch):
    """Up to LIBNFTABLES_BULK_COMMANDS, a bulk change (a quarter of the table or more) is one libnftables
    transaction, quicker there (1,000 farms: 3.1-3.2 s, against 3.5-3.7 s in lbweb's transactions, when both
    were measured: bench/runs/PASSES.md, eighteenth pass); past it,
    or for less than a quarter, transactions of lbweb's own batch."""
    monkeypatch.setattr(batching, "BULK_UNITS", 2)
    farms, first = applied_then_changed(kernel, 7, 3)
    assert applier(kernel).apply_pending().writer == "libnftables"  # 3 of 8 units: a quarter or more
    assert [w.method for w in kernel.writes()[first:]] == ["apply"]
    monkeypatch.setattr(batching, "LIBNFTABLES_BULK_COMMANDS", 10)
    for f in farms[3:6]:
        services.backend_create(farm=f, address=f"198.18.{f.pk}.98")
    assert applier(kernel).apply_pending().writer == "netlink"
    assert {w.method for w in kernel.writes()[first + 1 :]} == {"apply_incremental"}
    assert applied(*farms)


def read_back_watched(kernel, monkeypatch, during=None) -> list[tuple[bool, str]]:
    """Each read of the whole table, as (were the farms already recorded applied, the latest run's kind);
    ``during(kernel)`` runs inside each read, as another writer would."""
    seen, read = [], kernel.read_units

    def watched(units):
        latest = ApplyRun.objects.order_by("-id").first()
        seen.append((applied(*Farm.objects.all()), latest.kind if latest else ""))
        if during is not None:
            during(kernel)
        return read(units)

    monkeypatch.setattr(kernel, "read_units", watched)
    return seen


def test_a_bulk_change_shows_its_farms_applied_before_lbweb_reads_the_table_back(kernel, monkeypatch):
    """The fingerprints of a bulk change are bookkeeping for drift detection: the farms are in the kernel
    once it commits. Reading 1,000 farms back took 0.7 s of a 4.1 s apply (bench/control_plane.py), so
    the run is recorded first and the read follows; the fingerprints are the same, and no drift is found."""
    monkeypatch.setattr(batching, "BULK_UNITS", 2)
    seen = read_back_watched(kernel, monkeypatch)
    farms = [farm(f"f{i}", i) for i in range(1, 4)]
    applier(kernel).apply_pending()  # a first apply: a rebuild, read back whole
    assert seen == [(True, ApplyKindChoices.FULL)]
    farms += [farm(f"f{i}", i) for i in range(4, 8)]
    run = applier(kernel).apply_pending()  # most of the table: one libnftables transaction
    assert (run.kind, run.writer, run.farms_changed) == (ApplyKindChoices.INCREMENTAL, "libnftables", 4)
    assert seen[1:] == [(True, ApplyKindChoices.INCREMENTAL)] and applied(*farms)
    stored = fingerprints.load_fingerprints()
    read = kernel.read_units(CACHE.applied()).records
    assert {f"farm:{f.pk}" for f in farms} <= stored.keys() and all(stored[k] == read[k] for k in stored)
    assert applier(kernel).reconcile() is None  # verified at the write: nothing to read again
    CACHE.verified = None
    assert applier(kernel).reconcile() is None  # read, compared: no drift


def test_a_write_by_someone_else_during_the_read_back_leaves_no_fingerprint_to_trust(kernel, monkeypatch):
    """A fingerprint is what the kernel held right after lbweb wrote: when another writer's transaction
    lands between lbweb's write and the end of its read-back, what was read may be theirs. No fingerprint
    is kept of what was read then; the next reconcile finds those farms without one and writes them again,
    instead of taking a change made by hand as lbweb's own."""
    monkeypatch.setattr(batching, "BULK_UNITS", 2)
    farms = [farm(f"f{i}", i) for i in range(1, 4)]
    applier(kernel).apply_pending()
    flush = {"nftables": [{"flush": {"chain": {**TABLE, "name": "farm-f4"}}}]}
    read_back_watched(kernel, monkeypatch, during=lambda k: k.tamper(flush))
    added = [farm(f"f{i}", i) for i in range(4, 8)]
    run = applier(kernel).apply_pending()
    assert (run.ok, run.writer) == (True, "libnftables") and applied(*farms, *added)
    stored = fingerprints.load_fingerprints()
    assert not any(f"farm:{f.pk}" in stored for f in added) and all(f"farm:{f.pk}" in stored for f in farms)
    monkeypatch.undo()  # the hand stops; the next reconcile reads the table
    repair = applier(kernel).reconcile()
    assert repair.kind == ApplyKindChoices.REPAIR
    assert {d["unit"] for d in repair.drift} == {f"farm:{f.pk}" for f in added}
    assert rules(kernel, "farm-f4") and applier(kernel).reconcile() is None


def test_a_rebuild_read_back_during_someone_elses_write_is_compared_with_what_lbweb_compiled(kernel, monkeypatch):
    """The same after a rebuild of the whole table: nothing read is kept, and the next reconcile compares
    the kernel with the compiled configuration the way it compares a table lbweb kept no fingerprint of
    (names, digests and dispatch entries: ``kernel_matches``), and rebuilds it when that differs. Not a
    loop: a rebuild whose read-back is undisturbed keeps its fingerprints, and a table that matches is
    taken as it is."""
    web = farm("web", 1)
    flush = {"nftables": [{"flush": {"chain": {**TABLE, "name": "digest-web"}}}]}
    read_back_watched(kernel, monkeypatch, during=lambda k: k.tamper(flush))
    assert applier(kernel).apply_pending().kind == ApplyKindChoices.FULL and applied(web)
    assert not KernelFingerprint.objects.exists()
    monkeypatch.undo()
    run = applier(kernel).reconcile()
    assert (run.kind, run.reason) == (ApplyKindChoices.FULL, "reconcile: kernel differs")
    assert rules(kernel, "digest-web") and "skeleton" in fingerprints.load_fingerprints()


def test_a_thousand_farms_of_ten_backends_fit_one_libnftables_transaction():
    """The control-plane bench's 1,000 farms (DNAT, weight, 10 backends each) are a change libnftables takes
    in one transaction, and its 10,000 are not (libnftables would hold ~3.2 GB). When a farm's commands grew
    from 74 to 99, 1,000 farms crossed the old bound of 80,000 unseen and their full apply went from 2.6 s to
    3.6 s in lbweb's transactions: this keeps the bound in step with what the compiler writes."""
    from dataclasses import replace

    import compiler
    from bench.compile import scale_farms  # the control-plane bench's scale farms, as the compiler sees them

    def commands(count: int) -> int:
        units = compiler.compile_units([replace(f, mode="dnat") for f in scale_farms(count)], [])
        return sum(batching.command_count(unit, None) for unit in units.values())

    thousand = commands(1000)
    assert 90_000 < thousand <= batching.LIBNFTABLES_BULK_COMMANDS, thousand
    assert commands(2000) > batching.LIBNFTABLES_BULK_COMMANDS  # so 10,000 farms go in transactions too


def test_with_no_table_and_many_farms_the_skeleton_goes_alone_and_the_farms_follow_in_transactions(kernel, monkeypatch):
    """Boot with a big configuration: nothing in the kernel to swap at once, so no transaction of everything."""
    monkeypatch.setattr(batching, "BULK_UNITS", 2)
    monkeypatch.setattr(batching, "LIBNFTABLES_BULK_COMMANDS", 0)
    monkeypatch.setattr(batching, "BULK_TRANSACTION_COMMANDS", 1)  # a unit a transaction
    farms = [farm(f"f{i}", i) for i in range(1, 5)]
    kernel.refuse("198.18.3.11")  # one farm the kernel refuses: isolated, the others written
    run = applier(kernel).apply_pending()
    assert (run.kind, run.ok, run.writer, run.farms_changed) == (ApplyKindChoices.FULL, False, "netlink", 3)
    skeleton, *units = kernel.writes()
    assert skeleton.method == "apply" and not any(f"farm-{f.name}" in str(skeleton.commands) for f in farms)
    assert {w.method for w in units} == {"apply_incremental"}
    assert applied(farms[0], farms[1], farms[3])
    assert "Operation not supported" in Farm.objects.get(pk=farms[2].pk).apply_error
    assert applier(kernel).reconcile() is None  # fingerprints of every unit and of the skeleton: no drift
    rebuilt = FakeKernel(capabilities={"flowtable": True})
    monkeypatch.setattr(batching, "BULK_UNITS", 100)
    applier(rebuilt)._resync("the same farms in one transaction")
    assert rebuilt.tables == kernel.tables


def test_a_farm_deleted_and_another_created_between_two_applies_are_both_seen(kernel):
    """The worker reads every farm's id only when fewer farms remain than it knows plus the new ones:
    a deletion and a creation in the same window leave the count as it was, and are still both seen."""
    first, second = farm("first", 1), farm("second", 2)
    applier(kernel).apply_pending()
    services.farm_delete(farm=first)
    farm("third", 3)
    applier(kernel).apply_pending()
    chains = set(kernel.tables[("inet", "lbweb")].chains)
    assert "farm-first" not in chains and {"farm-second", "farm-third"} <= chains
    assert set(CACHE.farms) == {second.pk, Farm.objects.get(name="third").pk}
    services.farm_delete(farm=second)
    applier(kernel).apply_pending()
    assert "farm-second" not in set(kernel.tables[("inet", "lbweb")].chains)


def test_a_table_libnftables_cannot_list_is_still_rebuilt_in_one_transaction(kernel, monkeypatch):
    """Only a table that is really absent is built in steps: one that holds farms is replaced at once."""
    monkeypatch.setattr(batching, "BULK_UNITS", 2)
    monkeypatch.setattr(batching, "LIBNFTABLES_BULK_COMMANDS", 0)
    farms = [farm(f"f{i}", i) for i in range(1, 5)]
    applier(kernel).apply_pending()
    monkeypatch.setattr(kernel, "list_table", lambda *args: None)  # libnftables cannot print it
    first = len(kernel.writes())
    run = applier(kernel)._resync("rebuild")
    assert (run.kind, run.ok, run.writer) == (ApplyKindChoices.FULL, True, "libnftables")
    assert [w.method for w in kernel.writes()[first:]] == ["apply"]
    assert applied(*farms)


def test_bulk_transactions_keep_what_depends_on_what():
    """Units that go and policies or hooks that come first, farms in groups, policies that go last."""
    import compiler

    unit = lambda key, size: compiler.UnitRuleset(key, key, compiler.UnitObjects(), [{"add": {}}] * size)  # noqa: E731
    compiled = {k: unit(k, 4) for k in ("farm:1", "farm:2", "farm:3", "policy:1")}
    applied = {k: compiler.UnitObjects(chains=("c",)) for k in ("farm:9", "policy:9", "farm:2")}
    changed = sorted([*compiled, "farm:9", "policy:9"])
    groups = batching.bulk_transactions(changed, compiled, applied, limit=10)
    assert groups == [["farm:9", "policy:1", "farm:1"], ["farm:2", "farm:3", "policy:9"]]
    assert batching.bulk_transactions(["farm:1"], compiled, {}, limit=1) == [["farm:1"]]  # too big: alone


def test_a_burst_of_writes_costs_one_apply_and_the_requests_it_covered_are_skipped(kernel, monkeypatch, settings):
    web = farm("web", 1)
    applier(kernel).apply_pending()
    requested = []
    for i in range(5):
        backend = services.backend_create(farm=web, address=f"198.18.1.{50 + i}")
        requested.append(backend.farm.config_generation)
    slept = []
    monkeypatch.setattr(dataplane.time, "sleep", slept.append)
    settings.LBWEB_APPLY_COALESCE_SECONDS = 60  # long: however slow this machine, the writes fall in it
    runs = [applier(kernel).apply_pending(requested=g) for g in requested]  # one task per write, in order
    assert [r is not None for r in runs] == [True, False, False, False, False]
    assert runs[0].generation == requested[-1] and runs[0].farms_changed == 1
    assert len(kernel.writes()) == 2 and ApplyRun.objects.count() == 2
    assert len(slept) == 1 and 0 < slept[0] <= 60  # the first waited for writes still coming, once


def test_a_refused_farm_is_found_by_bisection_isolated_and_the_others_applied(kernel):
    farms = [farm(f"f{i}", i) for i in range(1, 9)]
    bad = farms[5]
    applier(kernel).apply_pending()
    before = list(rules(kernel, f"farm-{bad.name}"))
    kernel.refuse(f"farm-{bad.name}", "Error: Could not process rule: Operation not supported")
    for f in farms:
        services.backend_create(farm=f, address=f"198.18.{f.pk}.99")
    run = applier(kernel).apply_pending()
    attempts = kernel.writes()[1:]
    assert len(attempts) <= 2 + 2 * math.ceil(math.log2(len(farms)))  # the whole, halves, the retry alone
    assert (run.kind, run.ok, run.farms_changed) == (ApplyKindChoices.INCREMENTAL, False, len(farms) - 1)
    assert run.error.startswith(f"farm {bad.pk}: {isolation.ISOLATED}Error: Could not process rule: Operation not")
    assert applied(*[f for f in farms if f != bad])
    bad.refresh_from_db()
    assert bad.apply_error.startswith(isolation.ISOLATED) and bad.failed_generation == run.generation
    assert rules(kernel, f"farm-{bad.name}") == before  # what the kernel held of it stays as it was
    for f in farms:
        if f != bad:
            assert f"198.18.{f.pk}.99" in str(rules(kernel, f"be-{f.name}-{f.backends.last().pk}"))

    # isolated: later applies and reconciles leave it out, without a new attempt or a rebuild
    writes = len(kernel.writes())
    assert applier(kernel).reconcile() is None
    assert applier(kernel).apply_pending() is not None and len(kernel.writes()) == writes
    assert not isolation.pending_farms()

    # until it is retried (refused again: isolated again), or fixed
    services.farm_retry(farm=bad)
    assert not applier(kernel).apply_pending().ok
    kernel._refusals.clear()
    services.farm_retry(farm=bad)
    run = applier(kernel).apply_pending()
    assert run.ok and run.writer == "netlink" and applied(*farms)


def test_a_crash_of_the_kernel_writer_isolates_the_farm_without_trying_it_alone(kernel):
    web, api = farm("web", 1), farm("api", 2)
    applier(kernel).apply_pending()
    kernel.crash_on("198.18.2.66")
    services.backend_create(farm=web, address="198.18.1.66")
    services.backend_create(farm=api, address="198.18.2.66")
    run = applier(kernel).apply_pending()
    api.refresh_from_db()
    assert api.apply_error.startswith(isolation.ISOLATED + "crashed: the kernel writer died by SIGABRT")
    assert applied(web) and not run.ok
    assert [c.ok for c in kernel.writes()[1:]] == [False, True, False]  # both, web alone, api alone: no retry
    assert not any(c.method == "capabilities" for c in kernel.calls)  # a crash needs no explanation
    assert not any(c.method == "check" for c in kernel.calls)  # nor a probe of the kernel's capabilities


def test_a_refusal_is_explained_when_the_kernel_lacks_the_capability(kernel, monkeypatch):
    monkeypatch.setattr(links, "forwarding_devices", lambda: ["eth0"])  # read from the kernel: links.py
    kernel._capabilities["flowtable"] = False
    web = farm("web", 1)
    applier(kernel).apply_pending()
    kernel.refuse("flowtable", "Error: Could not process rule: Operation not supported")
    services.farm_update(farm=web, flow_offload=True)
    applier(kernel).apply_pending()
    web.refresh_from_db()
    assert "flow offload needs flowtable support in the kernel" in web.apply_error


def test_an_answer_lost_after_commit_rebuilds_the_table_and_carries_counters_and_learnt_entries(kernel):
    web = farm("web", 1, scheduler="weight", persistence="srcip", persist_ttl=600)
    applier(kernel).apply_pending()
    persist = next(n for n in kernel.tables[("inet", "lbweb")].sets if n.startswith("persist-web-"))
    kernel.learn(persist, "198.18.0.7")
    kernel.count("farm-web", 10, 1000)
    kernel.lose_answer()
    services.backend_create(farm=web, address="198.18.1.99")
    run = applier(kernel).apply_pending()
    assert (run.kind, run.reason, run.ok) == (ApplyKindChoices.FULL, "change: outcome unknown", True)
    assert kernel.read_counters()["farm-web"] == (10, 1000)
    assert '"198.18.0.7"' in str(kernel.tables[("inet", "lbweb")].elements[persist])
    assert applied(web)


def test_drift_in_one_farm_is_repaired_alone_and_keeps_its_counters(kernel):
    web, api = farm("web", 1), farm("api", 2)
    applier(kernel).apply_pending()
    wanted = list(rules(kernel, "farm-web"))
    kernel.count("farm-web", 10, 1000)
    kernel.tamper({"nftables": [{"flush": {"chain": {**TABLE, "name": "farm-web"}}}]})
    run = applier(kernel).reconcile()
    assert (run.kind, run.ok, run.writer, run.farms_changed) == (ApplyKindChoices.REPAIR, True, "netlink", 1)
    deleted = f"chain farm-web: rule 1-{len(wanted)} of {len(wanted)} deleted"
    assert run.drift == [{"unit": f"farm:{web.pk}", "name": "web", "differences": [deleted]}]
    repair = kernel.writes()[-1]
    assert repair.method == "repair" and "farm-api" not in str(repair.commands)
    assert rules(kernel, "farm-web") == wanted
    assert kernel.read_counters()["farm-web"] == (10, 1000)  # kept: not deleted and re-made
    assert applier(kernel).reconcile() is None  # the kernel is verified: nothing read, nothing written
    assert len(kernel.writes()) == 2 and applied(web, api)


def test_a_chain_added_by_hand_in_lbwebs_table_is_removed(kernel):
    farm("web", 1)
    applier(kernel).apply_pending()
    assert applier(kernel).reconcile() is None
    kernel.tamper({"nftables": [{"add": {"chain": {**TABLE, "name": "intruder"}}}]})
    run = applier(kernel).reconcile()
    assert run.kind == ApplyKindChoices.REPAIR and run.drift[0]["unit"] == "skeleton"
    assert "chain intruder added" in run.drift[0]["differences"]
    assert "intruder" not in kernel.tables[("inet", "lbweb")].chains


def test_a_table_deleted_by_hand_is_rebuilt(kernel):
    web = farm("web", 1)
    applier(kernel).apply_pending()
    kernel.tamper({"nftables": [{"delete": {"table": {"family": "inet", "name": "lbweb"}}}]})
    run = applier(kernel).reconcile()
    assert (run.kind, run.reason, run.ok) == (ApplyKindChoices.FULL, "reconcile: table missing", True)
    assert "farm-web" in kernel.tables[("inet", "lbweb")].chains and applied(web)


def test_a_deleted_farm_leaves_the_kernel(kernel):
    web, api = farm("web", 1), farm("api", 2)
    applier(kernel).apply_pending()
    services.farm_delete(farm=api)
    run = applier(kernel).apply_pending()
    assert (run.kind, run.writer, run.farms_changed) == (ApplyKindChoices.INCREMENTAL, "netlink", 1)
    assert not any("api" in name for name in kernel.tables[("inet", "lbweb")].chains)
    assert not KernelFingerprint.objects.filter(key=f"farm:{api.pk}").exists() and applied(web)


def test_one_farms_change_compiles_that_farm_alone_and_reads_no_row_of_the_others(kernel, monkeypatch):
    """Issue 13: a single-backend change costs what its farm costs, at 10 farms as at 10,000. The compile
    cache finds the changed farm by its newer generation (one indexed query), not by reading every farm's
    generation; the configuration version after it exports that farm alone (``versions.PARTS``)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    import compiler
    from farms import versions

    farms = [farm(f"f{i}", i + 1, backends=1) for i in range(12)]
    versions.record_applied(applier(kernel).apply_pending())
    compiled = []
    real = compiler.compile_farm
    monkeypatch.setattr(compiler, "compile_farm", lambda spec: compiled.append(spec.name) or real(spec))
    hashed = []  # the configuration's digest: the changed unit's terms alone, not every unit's (units.UnitMap)
    term = units._digest_term
    monkeypatch.setattr(units, "_digest_term", lambda key, unit: hashed.append(key) or term(key, unit))
    services.backend_update(backend=farms[5].backends.get(), weight=3)
    with CaptureQueriesContext(connection) as queries:
        run = applier(kernel).apply_pending()
        versions.record_applied(run)
    assert run.farms_changed == 1 and compiled == ["f5"] and versions.PARTS.exported == 1
    assert set(hashed) == {f"farm:{farms[5].pk}"}
    assert run.digest == units.combined_digest(dict(CACHE.units))
    assert not [q["sql"] for q in queries if '"config_generation" FROM "farms_farm"' in q["sql"]]


def test_a_change_compares_only_the_units_that_changed_and_a_refused_policy_is_tried_again(kernel, monkeypatch):
    """Issue 13: which units changed is asked at every change. The worker compares the units written or
    recompiled since it last asked, and those that differed then, not all of them (~5 ms at 10,000 farms):
    a policy the kernel refused still differs, and the next change tries it again."""
    import compiler

    farms = [farm(f"f{i}", i + 1, backends=1) for i in range(8)]
    applier(kernel).apply_pending()
    assert applier(kernel).apply_pending().kind == ApplyKindChoices.NOOP  # after a rebuild, all are compared once
    compared = []
    real = compiler.changed_units
    monkeypatch.setattr(
        compiler, "changed_units", lambda old, new, among=None: compared.append(among) or real(old, new, among)
    )
    kernel.refuse("policy-office")
    services.policy_create(name="office", type="deny", elements="198.18.9.0/24")
    run = applier(kernel).apply_pending()
    assert not run.ok and "policy:" in run.error
    assert compared[0] is not None and len(compared[0]) < len(CACHE.units)
    kernel._refusals.clear()  # the kernel takes it now: the next change, of one farm, brings the policy too
    services.backend_create(farm=farms[3], address="198.18.4.99")
    compared.clear()
    run = applier(kernel).apply_pending()
    assert run.ok and run.farms_changed == 2, run.error  # the farm and the policy
    assert set(compared[0]) == {f"farm:{farms[3].pk}", f"policy:{Policy.objects.get().pk}"}
    assert "policy-office-v4" in kernel.tables[("inet", "lbweb")].sets
    assert applier(kernel).apply_pending().kind == ApplyKindChoices.NOOP
    assert applier(kernel).reconcile() is None


def test_the_kernel_writer_is_ended_after_a_big_libnftables_transaction(monkeypatch):
    """libnftables' memory for a big transaction stays with the writer process once freed: a new one
    takes the next call."""

    class Writer:
        def __init__(self):
            self.calls, self.closed = [], 0

        def call(self, method, *args):
            self.calls.append((method, len(args[0])))

        def close(self, wait=True):
            self.closed += 1
            self.waited = wait

    stub = Writer()
    monkeypatch.setattr(sandbox, "writer", lambda: stub)
    monkeypatch.setattr(sandbox, "RESTART_AFTER_BYTES", 1000)
    small = {"nftables": [{"add": {"table": {"family": "inet", "name": "lbweb"}}}]}
    sandbox.IsolatedKernel().apply(small)
    assert (len(stub.calls), stub.closed) == (1, 0)
    big = {"nftables": small["nftables"] + [{"add": {"chain": {**TABLE, "name": f"c{i}"}}} for i in range(50)]}
    sandbox.IsolatedKernel().apply(big)
    assert (len(stub.calls), stub.closed) == (2, 1) and stub.calls[1][1] > 1000
    assert stub.waited is False  # ended without waiting for it to exit (reaped at the next call)


def test_the_unit_cache_is_the_appliers_and_lives_as_long_as_whoever_keeps_it(kernel, monkeypatch):
    """The compile cache is no module global: an Applier made without one starts cold (it compiles every
    farm again, as after a worker restart, and still writes only what changed), the next one given that
    cache compiles the changed farm alone, and the worker keeps one cache a process across its tasks."""
    import compiler
    from dataplane import tasks

    farms = [farm(f"f{i}", i + 1, backends=1) for i in range(4)]
    applier(kernel).apply_pending()
    compiled = []
    real = compiler.compile_farm
    monkeypatch.setattr(compiler, "compile_farm", lambda spec: compiled.append(spec.name) or real(spec))
    services.backend_update(backend=farms[1].backends.get(), weight=3)
    cold = dataplane.Applier(kernel)  # a cache of its own, empty
    assert cold.cache is not CACHE
    run = cold.apply_pending()
    assert sorted(compiled) == ["f0", "f1", "f2", "f3"] and run.farms_changed == 1 and applied(*farms)
    compiled.clear()
    services.backend_update(backend=farms[2].backends.get(), weight=4)
    run = dataplane.Applier(kernel, cache=cold.cache).apply_pending()
    assert (run.ok, run.farms_changed, compiled) == (True, 1, ["f2"]) and applied(*farms)
    assert tasks.worker_cache() is tasks.worker_cache()


def test_what_the_kernel_can_do_is_found_by_dry_runs_above_the_interface():
    """``capabilities.probe`` asks any Interface by ``check`` alone: the fake made without flowtables refuses
    what needs them, as such a kernel does, and commits nothing while probed."""
    from dataplane.kernel import capabilities

    lacking = FakeKernel(capabilities={"flowtable": False, "helper-ftp": False})
    probed = capabilities.probe(lacking)
    assert probed["flowtable"] is False and probed["helper-ftp"] is False
    assert probed["reject-nat"] is True and all(v for k, v in probed.items() if k not in ("flowtable", "helper-ftp"))
    assert capabilities.probe(FakeKernel()) == dict.fromkeys(probed, True)
    assert not lacking.tables and {c.method for c in lacking.calls} == {"check"}
    assert not hasattr(Interface, "capabilities") and not hasattr(Interface, "observe")
