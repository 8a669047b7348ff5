"""nftlb's semantics in the pure compiler (fast, beside the packet tests of test_nftlb_semantics.py)."""

from __future__ import annotations

import json

import compiler
import compiler.dispatch
import compiler.schedulers
from compiler.spec import BackendSpec, FarmSpec, PolicySpec


def farm(**fields) -> FarmSpec:
    two = (BackendSpec(id=1, address="198.18.1.11"), BackendSpec(id=2, address="198.18.1.12"))
    backends = fields.pop("backends", two)
    base = {"id": 7, "name": "f", "vip": "198.18.100.1", "ports": ((80, 80),), "mode": "dnat", "backends": backends}
    return FarmSpec(**{**base, **fields})


def rules(spec: FarmSpec, chain: str) -> list[str]:
    unit = compiler.compile_farm(spec)
    found = [c["add"]["rule"] for c in unit.creates if "rule" in c["add"]]
    return [json.dumps(rule["expr"]) for rule in found if rule["chain"] == chain]


def test_priority_levels_as_nftlb_computes_them():
    """nftlb's backend_s_gen_priority: the level starts at 1 and rises by the number of backends of the
    level that are out, then the new level is checked the same way."""
    four = (
        BackendSpec(id=1, address="198.18.1.11", priority=1),
        BackendSpec(id=2, address="198.18.1.12", priority=1),
        BackendSpec(id=3, address="198.18.1.13", priority=2),
        BackendSpec(id=4, address="198.18.1.14", priority=3),
    )
    assert [b.id for b in farm(backends=four).active_backends] == [1, 2]
    one_out = (BackendSpec(id=1, address="198.18.1.11", state="disabled"), *four[1:])
    assert [b.id for b in farm(backends=one_out).active_backends] == [2, 3]  # a priority-2 backend joins at once
    two_out = (*(BackendSpec(id=i, address=f"198.18.1.1{i}", healthy=False) for i in (1, 2)), *four[2:])
    assert farm(backends=two_out).priority_level == 3
    assert [b.id for b in farm(backends=two_out).active_backends] == [3, 4]


def test_round_robin_is_weighted():
    weighted = (BackendSpec(id=1, address="198.18.1.11", weight=2), BackendSpec(id=2, address="198.18.1.12"))
    spec = farm(scheduler="rr", backends=weighted)
    (tail,) = [r for r in rules(spec, "farm-f") if "numgen" in r]
    name = compiler.schedulers.sched_map_name(spec, interval=True)  # the named scheduler map, through the ct mark
    elements = json.dumps([c for c in compiler.compile_farm(spec).creates if name in json.dumps(c)])
    assert '"mode": "inc", "mod": 3' in tail and f"@{name}" in tail and '"range": [0, 1]' in elements


def test_protocol_all_is_tcp_udp_and_sctp_on_every_port_unless_ports_are_given():
    keys = [key for _map, key in compiler.dispatch.dispatch_keys(farm(protocol="all", ports=()))]
    assert [k["concat"][1] for k in keys] == ["tcp", "udp", "sctp"]
    assert {json.dumps(k["concat"][2]) for k in keys} == {'{"range": [0, 65535]}'}
    keys = [key for _map, key in compiler.dispatch.dispatch_keys(farm(protocol="all", ports=((53, 53),)))]
    assert {k["concat"][2] for k in keys} == {53}


def test_limits_are_per_client_and_logged_with_nftlb_s_prefixes():
    spec = farm(est_connlimit=20, new_rtlimit=30, new_rtlimit_unit="minute", log_rtlimit=0)
    chain = rules(spec, "farm-f")
    est = next(r for r in chain if "ct count" in r)
    assert '"op": "add"' in est and '"saddr"' in est and '"est-connlimit-f "' in est
    new = next(r for r in chain if '"limit"' in r)
    assert '"per": "minute"' in new and '"rate": 30' in new and '"new-rtlimit-f "' in new


def test_policies_drop_every_packet_in_the_guard_chain_and_persistence_is_refreshed_there():
    deny = PolicySpec(id=1, name="bl", elements=("198.18.9.0/24",))
    spec = farm(policies=(deny,), persistence=("srcip",), scheduler="rr", log_rtlimit=0)
    guard = rules(spec, "guard-f")
    assert any("@policy-bl-v4" in r and '"policy-BL-bl-f "' in r for r in guard)
    assert sum('"op": "update"' in r for r in guard) == 2  # one per sticky backend: the TTL counts from the last packet
    assert not any("@policy-bl-v4" in r for r in rules(spec, "farm-f"))


def test_marks_are_set_on_the_first_packet_and_on_every_later_one():
    backends = (BackendSpec(id=1, address="198.18.1.11", fwmark=0x1), BackendSpec(id=2, address="198.18.1.12"))
    spec = farm(fwmark=0x100, backends=backends)
    assert any('"value": 257' in r for r in rules(spec, "be-f-1"))  # 0x100 | 0x1
    (mark,) = rules(spec, "mark-f")
    assert '"198.18.1.11", 257' in mark and '"198.18.1.12", 256' in mark


def test_log_directions_with_nftlb_s_default_prefixes():
    spec = farm(mode="snat", log=True, log_forward=True, log_output=True, log_rtlimit=0)
    assert '[{"log": {"prefix": "IN-f "}}]' in rules(spec, "farm-f")  # no rate: every line, as nftlb
    assert any('"FWD-f "' in r for r in rules(spec, "logfwd-f"))  # reached from forward by the ct mark
    assert any('"OUT-f "' in r for r in rules(spec, "snat-f"))
    custom = farm(log=True, log_prefix="[FNAME,TYPE]", log_rtlimit=5, log_rtlimit_unit="hour")
    log = next(r for r in rules(custom, "farm-f") if '"log"' in r)
    assert '"[f,IN]"' in log and '"per": "hour"' in log
