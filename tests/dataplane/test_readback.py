"""The whole-table read (after a full or bulk apply, and at each reconcile) makes the same records as
reading each unit back by name (after a small change), on the real kernel.

The whole-table read hashes objects as they arrive instead of keeping the table (``drift.read.TableHashes``);
the read by name keeps each object until it is hashed. If the two disagreed, every reconcile after a small
change would find drift where there is none, or miss some.
"""

from __future__ import annotations

import json

import compiler
import compiler.names
from compiler import carry
from tests.compiler.test_compiler import ALL_FARMS, ALLOW, DENY, FEATURES, throwaway_netns  # noqa: F401 (a fixture)
from tests.dataplane.test_transcribe import run_in

READ_BOTH_WAYS = """
import json, sys
from dataplane.kernel import drift, nfmsg
from dataplane.kernel.applier import Kernel
import compiler
from compiler.units import UnitObjects
job = json.load(sys.stdin)
Kernel().apply(job["full"])
units = {k: UnitObjects.from_json(v) for k, v in job["units"].items()}
whole = drift.read_kernel(units)
owners = drift.owners_of(units)
by_name = drift.probe_records(owners, {**units, drift.SKELETON: UnitObjects()}, owners.shared, {})
kept = {name: len(elements) for name, elements in whole.table.shared.items()}
print(json.dumps({"whole": whole.records, "by_name": by_name, "shared": kept}))
"""


def test_the_whole_table_read_makes_the_records_the_read_by_name_makes(throwaway_netns):  # noqa: F811
    farms = [f for f in [*FEATURES, *ALL_FARMS] if f.mode != "dsr"]  # DSR tables are read whole both ways
    policies = [DENY, ALLOW]
    units = compiler.compile_units(farms, policies)
    job = {
        "full": compiler.full_document(farms, policies),
        "units": {k: u.objects.to_json() for k, u in units.items()},
    }
    read = json.loads(run_in(throwaway_netns, job, READ_BOTH_WAYS))
    whole, by_name = read["whole"], read["by_name"]
    assert set(whole) == set(by_name)
    for key in sorted(whole):
        assert whole[key] == by_name[key], key
    # Every kind of entry was compared: chains and rules, sets, a static set's elements, counters, and the
    # shared maps' elements filed under their units (kept whole for that, the other objects as hashes).
    entries = {entry.split(" ")[0] for record in whole.values() for entry in record}
    assert {"chain", "rules", "set", "elements", "counter"} <= entries, entries
    assert read["shared"]["dispatch4"] and read["shared"][compiler.names.traffic_map(4, "in")], read["shared"]
    assert any(record.get("rules farm-sticky") for record in whole.values())


READ_COUNTERS = """
import json, sys
from dataplane.kernel import applier
job = json.load(sys.stdin)
kernel = applier.Kernel()
kernel.apply(job["full"])
dumped = kernel.read_counters()
names = sorted(dumped)[: len(dumped) // 2] + ["no-such-counter"]
applier.COUNTERS_BY_DUMP = 0  # by name, as past 50,000 counters
by_name = kernel.read_counters(names)
applier.COUNTERS_BY_DUMP = 10**9
filtered = kernel.read_counters(names)
print(json.dumps({"dumped": dumped, "by_name": by_name, "filtered": filtered, "names": names}))
"""


def test_counters_read_by_name_are_those_the_dump_reads(throwaway_netns):  # noqa: F811
    """The collector asks for its counters by name past ``COUNTERS_BY_DUMP`` (a dump costs the square of
    the table's objects): the same names and values as the dump, and a name the kernel lacks left out."""
    farms = [f for f in [*FEATURES, *ALL_FARMS] if f.mode != "dsr"]
    units = compiler.compile_units(farms, [DENY, ALLOW])
    names = sorted(name for u in units.values() for kind, name in u.objects.objects if kind == "counter")
    values = {name: (i + 1, 1000 + i) for i, name in enumerate(names)}  # each its own, as a rebuild carries them
    document, _carried = carry.carry_over(compiler.full_document(farms, [DENY, ALLOW]), None, values)
    read = json.loads(run_in(throwaway_netns, {"full": document}, READ_COUNTERS))
    dumped = read["dumped"]
    assert len(names) >= 50 and dumped == {name: list(value) for name, value in values.items()}
    wanted = {name: dumped[name] for name in read["names"] if name in dumped}
    assert len(wanted) == len(read["names"]) - 1
    assert read["by_name"] == wanted and read["filtered"] == wanted


READ_OBJECTS = """
import json, subprocess, sys
from dataplane.kernel import drift
from dataplane.kernel.drift import read as drift_read
from dataplane.kernel.applier import Kernel
from compiler.units import UnitObjects
job = json.load(sys.stdin)
Kernel().apply(job["full"])
owners = drift.owners_of({k: UnitObjects.from_json(v) for k, v in job["units"].items()})

def objects(by_name):
    drift_read.OBJECTS_BY_DUMP = 0 if by_name else 10**9
    read = drift.read_table_hashes(owners)
    return read, {name: [kind.hex(), digest] for name, (kind, digest) in read.objects.items()}

read, by_name = objects(True)
named = drift_read._owned_objects(owners, "inet", "lbweb", read, None)  # None: it dumped them after all
_, dumped = objects(False)
subprocess.run(["nft", "add", "counter", "inet", "lbweb", "put-there-by-hand"], check=True)
read, with_extra = objects(True)
print(json.dumps({
    "by_name": by_name, "dumped": dumped, "named": named is not None, "owned": len(owners.objects),
    "with_extra": with_extra, "extra_named": drift_read._owned_objects(owners, "inet", "lbweb", read, None) is not None,
}))
"""


def test_named_objects_read_by_name_are_those_the_dump_reads_and_one_nobody_wrote_is_still_seen(
    throwaway_netns,  # noqa: F811
):
    """Past ``OBJECTS_BY_DUMP`` named objects the whole-table read asks for lbweb's by name (a dump costs the
    square of their number); the table's use count tells whether it holds any other, and then it dumps."""
    farms = [f for f in [*FEATURES, *ALL_FARMS] if f.mode != "dsr"]
    units = compiler.compile_units(farms, [DENY, ALLOW])
    job = {
        "full": compiler.full_document(farms, [DENY, ALLOW]),
        "units": {k: u.objects.to_json() for k, u in units.items()},
    }
    read = json.loads(run_in(throwaway_netns, job, READ_OBJECTS))
    assert read["named"], "the use count should have matched: the objects were read by name"
    assert read["by_name"] == read["dumped"] and len(read["dumped"]) == read["owned"] >= 50
    assert not read["extra_named"]  # one object more than lbweb wrote: the count tells, the dump shows it
    assert set(read["with_extra"]) - set(read["dumped"]) == {"put-there-by-hand"}
