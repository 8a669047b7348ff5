"""What a full rebuild carries over (compiler/carry.py) and how refused units are found (dataplane.isolation.bisect):
pure logic, no kernel."""

from __future__ import annotations

import pytest

import compiler
import compiler.names
from compiler import carry
from compiler.spec import BackendSpec, FarmSpec
from dataplane.isolation import bisect
from dataplane.kernel.applier import ApplyError

STICKY = FarmSpec(
    id=7,
    name="sticky",
    vip="198.18.100.7",
    protocol="tcp",
    ports=((80, 80),),
    mode="dnat",
    scheduler="weight",
    backends=(BackendSpec(id=70, address="198.18.1.11", port=None),),
    persistence=("srcip",),
    persist_ttl=3600,
)


def persist_set() -> str:
    return compiler.names.persist_set_name(STICKY, 70)


def kernel_listing(timeout: int = 3600, elements=None) -> list[dict]:
    elements = elements if elements is not None else [{"elem": {"val": "198.18.0.2", "expires": 3000}}]
    return [
        {"table": {"family": "inet", "name": "lbweb", "handle": 1}},
        {"counter": {"family": "inet", "table": "lbweb", "name": "farm-sticky", "packets": 9, "bytes": 900}},
        {
            "set": {
                "family": "inet",
                "table": "lbweb",
                "name": persist_set(),
                "type": "ipv4_addr",
                "flags": ["timeout"],
                "timeout": timeout,
                "elem": elements,
            }
        },
    ]


def added_elements(document: dict) -> list:
    return [c["add"]["element"] for c in document["nftables"] if "element" in c.get("add", {})]


def test_learnt_elements_and_counters_go_into_the_rebuild_after_their_sets():
    plain = compiler.full_document([STICKY])
    document, carried = carry.carry_over(plain, kernel_listing(), {"farm-sticky": (9, 900)})
    assert carried == 1
    learnt = [e for e in added_elements(document) if e["name"] == persist_set()]
    assert learnt == [
        {
            "family": "inet",
            "table": "lbweb",
            "name": persist_set(),
            "elem": [{"elem": {"val": "198.18.0.2", "expires": 3000}}],
        }
    ]
    commands = document["nftables"]
    created = next(i for i, c in enumerate(commands) if c.get("add", {}).get("set", {}).get("name") == persist_set())
    assert commands.index({"add": {"element": learnt[0]}}) > created
    counter = next(
        c["add"]["counter"] for c in commands if c.get("add", {}).get("counter", {}).get("name") == "farm-sticky"
    )
    assert (counter["packets"], counter["bytes"]) == (9, 900)
    assert len(commands) == len(plain["nftables"]) + 1


def test_a_set_whose_definition_changed_starts_empty_and_limiter_state_is_not_carried():
    assert carry.carry_over(compiler.full_document([STICKY]), kernel_listing(timeout=60), {})[1] == 0
    meter = [{"elem": {"val": "198.18.0.2", "expires": 50, "limit": {"rate": 3, "per": "second"}}}]
    assert carry.carry_over(compiler.full_document([STICKY]), kernel_listing(elements=meter), {})[1] == 0
    expired = [{"elem": {"val": "198.18.0.2", "expires": 0}}]
    assert carry.carry_over(compiler.full_document([STICKY]), kernel_listing(elements=expired), {})[1] == 0


def test_nothing_to_carry_without_a_table():
    plain = compiler.full_document([STICKY])
    assert carry.carry_over(plain, None, {}) == (plain, 0)


@pytest.mark.parametrize("bad", [set(), {5}, {0, 13}, set(range(16))])
def test_bisect_finds_every_refused_unit_and_applies_the_rest(bad):
    units = list(range(16))
    done, attempts = [], []

    def attempt(group):
        attempts.append(group)
        if bad & set(group):
            raise ApplyError(f"refused {sorted(bad & set(group))[0]}")
        done.extend(group)

    refused = bisect(units, attempt, ApplyError("all refused")) if bad else {}
    assert set(refused) == bad
    assert all(refused[u] == f"refused {u}" for u in bad)
    if bad:
        assert sorted(done) == sorted(set(units) - bad)
    if len(bad) == 1:
        assert len(attempts) <= 2 * 4  # 2 log2(16)


def test_bisect_stops_at_an_uncertain_outcome():
    def attempt(group):
        raise ApplyError("no answer", uncertain=True)

    with pytest.raises(ApplyError):
        bisect([1, 2, 3], attempt, ApplyError("refused"))
