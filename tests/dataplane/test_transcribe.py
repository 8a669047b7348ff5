"""lbweb's own netlink batch does exactly what libnftables does with the same incremental document.

Each case loads the same full ruleset in two throwaway namespaces, applies one change with
``Kernel.apply_incremental`` (the worker's path) in the first and with libnftables in the
second, and compares the two kernels' rulesets object by object.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import uuid

import pytest

import compiler
import compiler.schedulers
from compiler.spec import PolicySpec
from tests.compiler.test_compiler import ALL_FARMS, ALLOW, DENY, DNS6, FEATURES, WEB, WEB_REWEIGHTED
from tests.support.stack import ROOT, VENV_BIN

APPLY = """
import json, sys
from dataplane.kernel.applier import ApplyError, Kernel
job = json.load(sys.stdin)
kernel = Kernel()
kernel.apply(job["full"])
try:
    if job["writer"] == "libnftables":
        kernel.apply(job["document"])
        print("libnftables")
    else:
        print(kernel.apply_incremental(job["document"], job["context"]))
except ApplyError as exc:
    print("refused:", exc.message)
"""


@pytest.fixture
def two_namespaces():
    if subprocess.run(["id", "-u"], capture_output=True, text=True).stdout.strip() != "0":
        pytest.fail("namespaces need root")
    names = [f"lbt-tr-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    for name in names:
        subprocess.run(["ip", "netns", "add", name], check=True)
        # the DSR farm of FEATURES hooks ingress of d0
        subprocess.run(["ip", "-n", name, "link", "add", "d0", "type", "veth", "peer", "name", "d1"], check=True)
    yield names
    for name in names:
        subprocess.run(["ip", "netns", "del", name], check=False)


def run_in(netns: str, job: dict, script: str = APPLY) -> str:
    """``script`` (Python, reading ``job`` as JSON on its standard input) in the namespace; what it printed."""
    result = subprocess.run(
        ["ip", "netns", "exec", netns, str(VENV_BIN / "python"), "-c", script],
        input=json.dumps(job),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def ruleset(netns: str) -> list[dict]:
    """Every object of the namespace's ruleset, without the handles that number them."""
    out = subprocess.run(["ip", "netns", "exec", netns, "nft", "-j", "list", "ruleset"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr

    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k != "handle"}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return [strip(item) for item in json.loads(out.stdout)["nftables"] if "metainfo" not in item]


def both_ways(
    namespaces, old_farms, new_farms, old_policies=(), new_policies=(), new_units_in_context=True
) -> tuple[str, list[dict]]:
    """``new_units_in_context=False``: the context of a bulk transaction (``ChangeWriter._write_bulk``), where
    the units the change adds are not loaded first: their own commands define them."""
    old = compiler.compile_units(list(old_farms), list(old_policies))
    new = compiler.compile_units(list(new_farms), list(new_policies))
    document, changed = compiler.incremental_document({k: u.objects for k, u in old.items()}, new)
    assert document["nftables"], "the case must change something"
    in_context = changed if new_units_in_context else [k for k in changed if k in old]
    job = {
        "full": compiler.full_document(list(old_farms), list(old_policies)),
        "document": document,
        "context": compiler.incremental_context(new, in_context),
    }
    ours, theirs = namespaces
    writer = run_in(ours, {**job, "writer": "netlink"})
    assert run_in(theirs, {**job, "writer": "libnftables"}) == "libnftables"
    mine, reference = ruleset(ours), ruleset(theirs)
    assert mine == reference, "\n".join(
        json.dumps(x) for x in [i for i in mine if i not in reference] + [i for i in reference if i not in mine]
    )
    return writer, mine


def test_a_backend_change_is_written_by_lbweb_and_equals_libnftables(two_namespaces):
    writer, after = both_ways(two_namespaces, ALL_FARMS, [WEB_REWEIGHTED, *ALL_FARMS[1:]])
    assert writer == "netlink"
    assert any("numgen" in json.dumps(item) and "farm-web" in json.dumps(item) for item in after)


def test_a_new_farm_with_snat_port_learning_sets_and_counters(two_namespaces):
    writer, after = both_ways(two_namespaces, ALL_FARMS[1:], ALL_FARMS)
    assert writer == "netlink"
    reuse = next(i["set"] for i in after if "set" in i and i["set"]["name"] == "reuse-web-1")
    assert reuse["timeout"] == 120 and reuse["size"] == 262144


def test_a_deleted_farm_leaves_no_element_behind(two_namespaces):
    writer, after = both_ways(two_namespaces, ALL_FARMS, ALL_FARMS[1:])
    assert writer == "netlink"
    assert "farm-web" not in json.dumps(after)


def test_a_renamed_farm_keeps_its_ports_in_the_same_transaction(two_namespaces):
    renamed = dataclasses.replace(WEB, name="shop")
    writer, after = both_ways(two_namespaces, ALL_FARMS, [renamed, *ALL_FARMS[1:]])
    assert writer == "netlink"
    text = json.dumps(after)
    assert "farm-shop" in text and "farm-web" not in text


def _no_connection_counts(farm):
    return dataclasses.replace(
        farm, est_connlimit=0, backends=tuple(dataclasses.replace(b, est_connlimit=0) for b in farm.backends)
    )


def test_farms_with_policies_persistence_limits_and_helpers(two_namespaces):
    sticky, *others = (_no_connection_counts(f) for f in FEATURES)
    changed = dataclasses.replace(sticky, backends=sticky.backends[:2], persist_ttl=60)
    nat_only = [f for f in others if f.mode != "dsr"]
    writer, _after = both_ways(two_namespaces, [sticky, *nat_only], [changed, *nat_only], [DENY, ALLOW], [DENY, ALLOW])
    assert writer == "netlink"


def test_a_per_client_connection_count_is_written_by_libnftables(two_namespaces):
    """nftlb's est-connlimit meter needs its set made 'dynamic' with its first rule, which the JSON of
    libnftables 1.0 cannot say: such a change goes to libnftables, and the kernel ends the same."""
    farm = dataclasses.replace(WEB, est_connlimit=20)
    writer, after = both_ways(two_namespaces, [WEB], [farm])
    assert writer == "libnftables"
    assert any("ct count" in json.dumps(item) and "estconn-web" in json.dumps(item) for item in after)


def test_a_policy_whose_addresses_change(two_namespaces):
    nat_only = [f for f in FEATURES if f.mode != "dsr"]
    wider = PolicySpec(id=DENY.id, name=DENY.name, type=DENY.type, elements=(*DENY.elements, "198.18.7.0/24"))
    writer, _after = both_ways(two_namespaces, nat_only, nat_only, [DENY, ALLOW], [wider, ALLOW])
    assert writer == "netlink"


def test_a_stateless_farm_whose_reply_chains_come_after_their_first_element(two_namespaces):
    """Each backend's reply element jumps to a chain the document adds later: elements wait for it."""
    syslog = next(f for f in FEATURES if f.mode == "stlsdnat")
    writer, _after = both_ways(two_namespaces, ALL_FARMS, [*ALL_FARMS, syslog])
    assert writer == "netlink"
    three = dataclasses.replace(
        syslog, backends=(*syslog.backends, dataclasses.replace(syslog.backends[0], id=99, address="198.18.1.19"))
    )
    writer, _after = both_ways(two_namespaces, [syslog], [three])
    assert writer == "netlink"


def test_hundreds_of_farms_in_one_change_make_one_batch(two_namespaces):
    """A big batch: one acknowledgement for the whole, so no answer can overflow the socket."""
    many = [
        dataclasses.replace(WEB, id=100 + i, name=f"bulk{i}", vip=f"198.19.{i // 200}.{i % 200 + 1}")
        for i in range(300)
    ]
    writer, after = both_ways(two_namespaces, ALL_FARMS, [*ALL_FARMS, *many])
    assert writer == "netlink"
    assert sum(1 for item in after if "chain" in item and item["chain"]["name"].startswith("farm-bulk")) == 300


def test_a_bulk_transaction_defines_the_farms_it_adds_by_their_own_commands(two_namespaces):
    """A bulk transaction loads in scratch only the units it changes (their rules as the kernel holds
    them); those it adds, farms of every kind and their policies, come with their own definitions."""
    nat_only = [f for f in FEATURES if f.mode != "dsr" and not f.est_connlimit]
    many = [
        dataclasses.replace(WEB, id=100 + i, name=f"bulk{i}", vip=f"198.19.{i // 200}.{i % 200 + 1}")
        for i in range(150)
    ]
    changed_web = dataclasses.replace(WEB_REWEIGHTED, persistence=("srcip",))
    writer, after = both_ways(
        two_namespaces, [WEB], [changed_web, *nat_only, *many], [], [DENY, ALLOW], new_units_in_context=False
    )
    assert writer == "netlink"
    assert sum(1 for item in after if "chain" in item and item["chain"]["name"].startswith("farm-bulk")) == 150


def test_a_dsr_farm_falls_back_to_libnftables_with_the_same_result(two_namespaces):
    """A DSR farm's netdev table hooks a real interface the scratch namespace does not have."""
    direct = next(f for f in FEATURES if f.mode == "dsr")
    moved = dataclasses.replace(direct, backends=direct.backends[:1])
    writer, _after = both_ways(two_namespaces, [direct], [moved])
    assert writer == "libnftables"


@pytest.mark.parametrize("where", ["first", "last"])
def test_a_refused_batch_changes_nothing_and_names_the_command(two_namespaces, where):
    ours, untouched = two_namespaces
    old = compiler.compile_units(ALL_FARMS, [])
    new = compiler.compile_units([WEB_REWEIGHTED, *ALL_FARMS[1:]], [])
    document, changed = compiler.incremental_document({k: u.objects for k, u in old.items()}, new)
    missing = {"delete": {"chain": {"family": "inet", "table": "lbweb", "name": "no-such-chain"}}}
    job = {
        "full": compiler.full_document(ALL_FARMS),
        "document": {
            "nftables": [missing, *document["nftables"]] if where == "first" else [*document["nftables"], missing]
        },
        "context": compiler.incremental_context(new, changed),
    }
    answer = run_in(ours, {**job, "writer": "netlink"})
    assert answer.startswith("refused:") and "no-such-chain" in answer and "No such file" in answer, answer
    assert run_in(untouched, {**job, "document": {"nftables": []}, "writer": "libnftables"}) == "libnftables"
    assert ruleset(ours) == ruleset(untouched)  # the change before the refused command was not committed either


def test_only_a_big_drift_is_repaired_by_a_rebuild():
    """Repairing a unit reads it back and removes it by itself; when most of the table drifted, one
    rebuild costs less. Any everyday drift (even several hundred units out of thousands) is repaired."""
    from dataplane.batching import is_bulk

    assert not is_bulk(1, 10_000) and not is_bulk(1, 1) and not is_bulk(100, 100)
    assert not is_bulk(200, 10_000) and not is_bulk(101, 405)
    assert is_bulk(101, 404) and is_bulk(1_000, 1_000) and is_bulk(10_000, 10_100)


PREFETCH = """
import json, sys
from dataplane.kernel.applier import Kernel
from dataplane.kernel.scratch import scratch
job = json.load(sys.stdin)
kernel = Kernel()
kernel.apply(job["full"])
loads, submit = [], scratch().submit
scratch().submit = lambda function, *args: loads.append(function.__name__) or submit(function, *args)
token = kernel.prefetch(job["second"], job["second_context"])
first = kernel.apply_incremental(job["first"], job["first_context"])
second = kernel.apply_prefetched(token)
print(json.dumps({"writers": [first, second], "loads": loads, "again": kernel.apply_prefetched(token)}))
"""


LIBNFTABLES_TWICE = """
import json, sys
from dataplane.kernel.applier import Kernel
job = json.load(sys.stdin)
kernel = Kernel()
for document in (job["full"], job["first"], job["second"]):
    kernel.apply(document)
"""


def test_a_transaction_announced_ahead_is_loaded_in_scratch_once_while_the_one_before_is_written(two_namespaces):
    """A bulk apply announces its next transaction (``Kernel.prefetch``) before it commits the current one:
    the scratch process loads it meanwhile, and committing it loads nothing more. The table ends as
    libnftables makes it of the same two changes."""
    old, new = ALL_FARMS[2:], ALL_FARMS
    old_units = {k: u.objects for k, u in compiler.compile_units(list(old), []).items()}
    units = compiler.compile_units(list(new), [])
    added = sorted(set(units) - set(old_units))
    farms = [k for k in added if k.startswith("farm:")]
    assert len(farms) == 2, added
    groups = [set(added) - {farms[1]}, {farms[1]}]  # the first takes the hooks, as bulk_transactions does
    documents = [compiler.incremental_document(old_units, units, only=group)[0] for group in groups]
    job = {
        "full": compiler.full_document(list(old), []),
        "first": documents[0],
        "first_context": compiler.incremental_context(units, []),
        "second": documents[1],
        "second_context": compiler.incremental_context(units, []),
    }
    ours, theirs = two_namespaces
    said = json.loads(run_in(ours, job, PREFETCH))
    assert said == {"writers": ["netlink", "netlink"], "loads": ["_read_scratch", "_read_scratch"], "again": None}
    run_in(theirs, job, LIBNFTABLES_TWICE)
    mine, reference = ruleset(ours), ruleset(theirs)
    assert mine == reference, "\n".join(
        json.dumps(x) for x in [i for i in mine if i not in reference] + [i for i in reference if i not in mine]
    )


RECORDED = """
import json, sys
from dataplane.kernel import drift
from dataplane.kernel.applier import Kernel
from compiler.units import UnitObjects
job = json.load(sys.stdin)
kernel = Kernel()
kernel.apply(job["full"])
units = {k: UnitObjects.from_json(v) for k, v in job["units"].items()}
recorded, writers = {}, []
for step in job["steps"]:
    token = kernel.prefetch(step["document"], step["context"], {k: units[k] for k in step["whole"]})
    writers.append(kernel.apply_prefetched(token))
    recorded.update(kernel.written_records())
read = drift.read_kernel(units).records
print(json.dumps({"writers": writers, "recorded": recorded, "read": read}))
"""


def test_the_records_made_from_scratch_are_those_read_back_from_the_kernel(two_namespaces):
    """A bulk apply's new units are fingerprinted from what the scratch namespace made of them
    (``drift.written_records``), not by reading the table back: for every unit so recorded, the record
    equals the one read from the real table after the commit. Units whose rules use an anonymous set
    (the real table numbers it at the commit) and those libnftables writes are left to be read back."""
    # a weight farm past the shared schedules map's slots keeps a scheduler map of its own
    far = dataclasses.replace(DNS6, id=compiler.schedulers.SCHEDULE_SLOTS + 1, name="far", vip="2001:2:0:100::9")
    farms = [*ALL_FARMS, far, *(f for f in FEATURES if not f.est_connlimit)]
    units = compiler.compile_units(farms, [DENY, ALLOW])
    skeleton = {k: u.objects for k, u in compiler.compile_units([], [DENY, ALLOW]).items()}
    added = sorted(set(units) - set(skeleton), key=lambda k: (not k.startswith("hook"), k))
    steps = []
    for key in added:  # one transaction each, as a bulk apply's transactions of whole units
        document, written = compiler.incremental_document(skeleton, units, only={key})
        if document["nftables"]:  # a disabled farm writes nothing (the caller records it empty)
            steps.append({"document": document, "context": compiler.incremental_context(units, []), "whole": written})
    job = {
        "full": compiler.full_document([], [DENY, ALLOW]),
        "units": {k: u.objects.to_json() for k, u in units.items()},
        "steps": steps,
    }
    said = json.loads(run_in(two_namespaces[0], job, RECORDED))
    recorded, read = said["recorded"], said["read"]
    for key, record in recorded.items():
        assert record == read[key], key
    libnftables = {k for s, w in zip(steps, said["writers"], strict=True) if w == "libnftables" for k in s["whole"]}
    assert libnftables == {f"farm:{f.id}" for f in farms if f.mode == "dsr"}
    whole = {k for s in steps for k in s["whole"]}
    # left to be read back: the protocol set of an SNAT port range (pool), a stateless farm's inline vmap (syslog)
    assert whole - set(recorded) - libnftables == {"farm:12", "farm:13"}
    assert len(recorded) > len(added) / 2 and any("elements dispatch4" in r for r in recorded.values())
    # its slot's ranges, filed under it by their keys
    assert f"elements {compiler.schedulers.schedules_map_name(DNS6.id)}" in recorded[f"farm:{DNS6.id}"]
    assert any("sched-far-id-w" in entry for entry in recorded[f"farm:{far.id}"])
