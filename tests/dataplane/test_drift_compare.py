"""How drift is put in words (dataplane/kernel/drift/repair.py): pure, no kernel (real kernel:
tests/dataplane/test_drift.py)."""

import compiler
import compiler.hooks
from compiler.units import UnitObjects
from dataplane.kernel import drift


def test_rules_deleted_added_and_changed_are_named_by_position():
    want = {"chain farm-web": "c", "rules farm-web": ["a", "b", "c", "d"]}
    assert drift.differences(want, {**want, "rules farm-web": ["a", "c", "d"]}) == [
        "chain farm-web: rule 2 of 4 deleted"
    ]
    assert drift.differences(want, {**want, "rules farm-web": ["x", "a", "b", "c", "d"]}) == [
        "chain farm-web: 1 rule(s) added at position 1"
    ]
    assert drift.differences(want, {**want, "rules farm-web": ["a", "x", "c", "d"]}) == [
        "chain farm-web: rule 2 of 4 changed"
    ]


def test_objects_missing_added_changed_and_elements_counted():
    want = {"set s": "1", "counter c": "2", "elements dispatch4": ["e1", "e2"]}
    have = {"set s": "9", "object intruder": "3", "elements dispatch4": ["e2", "e3", "e4"]}
    assert drift.differences(want, have) == [
        "counter c missing",
        "elements of dispatch4: 1 missing, 2 added",
        "object intruder added",
        "set s changed",
    ]
    assert drift.differences({"elements x": []}, {}) == []  # no elements either way is no difference


def test_owners_give_shared_map_elements_to_the_unit_whose_chain_they_jump_to():
    units = {
        "farm:1": UnitObjects(chains=("farm-web", "be-web-1"), objects=(("counter", "farm-web"), ("set", "p"))),
        "policy:2": UnitObjects(volatile=(("set", "policy-x-v4"),)),
    }
    owners = drift.owners_of(units)
    assert owners.chains["farm-web"] == "farm:1" and owners.chains[compiler.hooks.BASE_CHAIN] == drift.SKELETON
    assert owners.sets["p"] == "farm:1" and "p" in owners.dynamic
    assert owners.sets["policy-x-v4"] == "policy:2" and "policy-x-v4" not in owners.dynamic
    assert "dispatch4" in owners.shared and owners.objects["farm-web"] == "farm:1"
