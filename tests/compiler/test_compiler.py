"""The pure compiler: golden documents, determinism, purity, incremental scope, and nft's own verdict."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import subprocess
import sys
import uuid
from dataclasses import replace

import pytest

import compiler
import compiler.hooks
import compiler.names
import compiler.schedulers
import compiler.stateless
from compiler import fragments as f
from compiler.spec import BackendSpec, FarmSpec, PolicySpec, SessionSpec
from tests.support import GOLDEN
from tests.support.stack import ROOT

UPDATE = os.environ.get("LBWEB_UPDATE_GOLDEN") == "1"

WEB = FarmSpec(
    id=1,
    name="web",
    vip="198.18.100.1",
    protocol="tcp",
    ports=((80, 80), (443, 443), (8000, 8100)),
    mode="snat",
    scheduler="rr",
    backends=(
        BackendSpec(id=1, address="198.18.1.11"),
        BackendSpec(id=2, address="198.18.1.12", port=8080),
        BackendSpec(id=3, address="198.18.1.13", state="disabled"),
    ),
)
DNS6 = FarmSpec(
    id=2,
    name="dns6",
    vip="2001:2:0:100::1",
    protocol="udp",
    ports=((53, 53),),
    mode="dnat",
    scheduler="weight",
    backends=(
        BackendSpec(id=4, address="2001:2:0:1::11", weight=1),
        BackendSpec(id=5, address="2001:2:0:1::12", weight=3),
    ),
)
ANY = FarmSpec(
    id=3, name="any", vip="198.18.100.2", protocol="all", mode="dnat", backends=(BackendSpec(6, "198.18.1.11"),)
)
EMPTY = FarmSpec(id=4, name="empty", vip="198.18.100.3", protocol="sctp", ports=((9000, 9000),), mode="dnat")
OFF = FarmSpec(id=5, name="off", vip="198.18.100.4", ports=((80, 80),), enabled=False, backends=WEB.backends[:1])
ALL_DOWN = FarmSpec(
    id=6,
    name="alldown",
    vip="198.18.100.5",
    protocol="udp",
    ports=((53, 53),),
    mode="dnat",
    backends=(BackendSpec(7, "198.18.1.11", healthy=False),),
    fallback=BackendSpec(0, "198.18.1.13", port=5353),
)
ALL_FARMS = [WEB, DNS6, ANY, EMPTY, OFF, ALL_DOWN]

DENY = PolicySpec(id=1, name="blocked", type="deny", elements=("198.18.5.0/24", "198.18.6.7", "2001:2:0:5::/64"))
ALLOW = PolicySpec(id=2, name="office", type="allow", elements=("198.18.0.0/24",))


def _b(i: int, **kw) -> BackendSpec:
    return BackendSpec(id=i, address=f"198.18.1.{10 + i}", **kw)


FEATURES = [
    FarmSpec(
        id=11,
        name="sticky",
        vip="198.18.100.11",
        ports=((80, 80),),
        mode="dnat",
        scheduler="weight",
        persistence=("srcip",),
        persist_ttl=30,
        backends=(_b(1, weight=2), _b(2, state="drain"), _b(3, priority=2, est_connlimit=5)),
        sessions=(SessionSpec(("198.18.0.9",), 1),),
        policies=(DENY, ALLOW),
        new_rtlimit=10,
        new_rtlimit_burst=5,
        est_connlimit=100,
        limit_verdict="reject",
        log=True,
        helper="ftp",
        tcp_strict=True,
        rst_rtlimit=5,
        intra_connect=True,
    ),
    FarmSpec(
        id=12,
        name="pool",
        vip="198.18.100.12",
        ports=((80, 80), (8000, 8100)),
        mode="snat",
        scheduler="hash",
        sched_param=("srcip", "srcport"),
        source_addr="198.18.1.1-198.18.1.3",
        source_ports=(20000, 30000),
        backends=(_b(4), _b(5)),
    ),
    FarmSpec(
        id=13,
        name="syslog",
        vip="198.18.100.13",
        protocol="udp",
        ports=((514, 514),),
        mode="stlsdnat",
        backends=(_b(7), _b(8, port=5514)),
    ),
    FarmSpec(
        id=14,
        name="direct",
        vip="198.18.100.14",
        ports=((80, 80),),
        mode="dsr",
        scheduler="hash",
        sched_param=("srcip", "srcport"),
        interface="d0",
        interface_mac="02:00:00:00:00:01",
        backends=(_b(9, mac="02:00:00:00:00:09"), _b(10, mac="02:00:00:00:00:0a")),
    ),
    FarmSpec(
        id=15,
        name="v6",
        vip="2001:2:0:100::15",
        ports=((80, 80),),
        mode="snat",
        scheduler="leastconn",
        persistence=("srcmac",),
        backends=(BackendSpec(11, "2001:2:0:1::11"), BackendSpec(12, "2001:2:0:1::12", weight=3)),
    ),
]

WEB_REWEIGHTED = FarmSpec(**{**WEB.__dict__, "scheduler": "weight", "backends": WEB.backends[:2]})


def documents() -> dict[str, dict]:
    old = {r.key: r.objects for r in map(compiler.compile_farm, ALL_FARMS)}
    new = {r.key: r for r in map(compiler.compile_farm, [WEB_REWEIGHTED, *ALL_FARMS[1:]])}
    return {
        "full": compiler.full_document(ALL_FARMS),
        "incremental-change-one-farm": compiler.incremental_document(old, new)[0],
        "full-l4-features": compiler.full_document(FEATURES, [DENY, ALLOW]),
        "incremental-delete-one-farm": compiler.incremental_document(
            old, {k: v for k, v in new.items() if k != "farm:1"}
        )[0],
    }


def pretty(document: dict) -> str:
    return json.dumps(document, indent=1, sort_keys=True) + "\n"


@pytest.mark.parametrize("name", sorted(documents()))
def test_golden_documents(name):
    path = GOLDEN / f"{name}.json"
    produced = pretty(documents()[name])
    if UPDATE or not path.exists():
        path.write_text(produced)
    assert produced == path.read_text(), f"{path} differs: run with LBWEB_UPDATE_GOLDEN=1 after checking the change"


@pytest.fixture
def throwaway_netns():
    if os.geteuid() != 0:
        pytest.fail("nft --check in a namespace needs root")
    name = f"lbt-nft-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    # the DSR golden farm hooks ingress of d0
    subprocess.run(["ip", "-n", name, "link", "add", "d0", "type", "veth", "peer", "name", "d1"], check=True)
    yield name
    subprocess.run(["ip", "netns", "del", name], check=False)


def nft(netns: str, *args: str, document: dict | None = None) -> subprocess.CompletedProcess:
    cmd = ["ip", "netns", "exec", netns, "nft", *args]
    return subprocess.run(cmd, input=json.dumps(document) if document else None, capture_output=True, text=True)


def test_every_golden_document_is_accepted_by_nft(throwaway_netns, tmp_path):
    """The full document from nothing, then each incremental one on top of it, as nft would take them."""
    full = GOLDEN / "full.json"
    result = nft(throwaway_netns, "--check", "-j", "-f", str(full))
    assert result.returncode == 0, result.stderr
    assert nft(throwaway_netns, "-j", "-f", str(full)).returncode == 0
    for path in sorted(GOLDEN.glob("incremental-*.json")):
        result = nft(throwaway_netns, "--check", "-j", "-f", str(path))
        assert result.returncode == 0, f"{path.name}: {result.stderr}"
    listing = nft(throwaway_netns, "list", "table", "inet", "lbweb").stdout
    assert "farm-web" in listing and "dispatch6" in listing
    features = GOLDEN / "full-l4-features.json"
    result = nft(throwaway_netns, "-j", "-f", str(features))
    assert result.returncode == 0, result.stderr
    assert "fwd to" in nft(throwaway_netns, "list", "table", "netdev", "lbweb-dsr-direct").stdout


def test_compiler_imports_no_django():
    code = "import sys, compiler, compiler.spec; print(sorted(m for m in sys.modules if 'django' in m))"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_same_input_gives_byte_identical_output_whatever_the_order():
    shuffled = ALL_FARMS[:]
    random.Random(7).shuffle(shuffled)
    assert compiler.canonical(compiler.full_document(shuffled)) == compiler.canonical(compiler.full_document(ALL_FARMS))
    assert compiler.compile_farm(WEB).digest == compiler.compile_farm(WEB).digest


def test_a_units_digest_and_text_are_the_same_in_every_process():
    """A unit's digest is of its JSON text in the compiler's own key order (``units.text_of``), not sorted:
    were that order to follow a set's iteration (string hashes differ from one process to the next), the
    worker would see every farm changed after a restart, and rewrite it. Two hash seeds, same units."""
    code = (
        "import json, sys; sys.path.insert(0, 'tests/compiler');"
        "from test_compiler import ALL_FARMS, FEATURES, DENY, ALLOW;"
        "import compiler;"
        "units = compiler.compile_units(ALL_FARMS + FEATURES, [DENY, ALLOW]);"
        "print(json.dumps({k: [u.digest, u.creates] for k, u in sorted(units.items())}))"
    )
    seen = [
        subprocess.run(
            [sys.executable, "-c", code],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("1", "2")
    ]
    assert seen[0] == seen[1] and len(json.loads(seen[0])) > len(ALL_FARMS + FEATURES)  # farms, policies, hooks


def test_every_command_names_only_lbweb_table():
    for document in documents().values():
        for command in document["nftables"]:
            ((_verb, body),) = command.items()
            ((_kind, obj),) = body.items()
            table = (obj["family"], obj.get("table", obj.get("name")))
            assert table == ("inet", "lbweb") or (table[0] == "netdev" and table[1].startswith("lbweb-dsr-")), table
            assert "ruleset" not in body


def test_changing_one_farm_names_only_that_farms_objects():
    document = documents()["incremental-change-one-farm"]
    text = json.dumps(document)
    for other in ("dns6", "any", "empty"):
        assert f"farm-{other}" not in text and f"be-{other}-" not in text and f"traffic-{other}" not in text
        assert f'-{other}"' not in text  # nor its traffic counters
    assert "farm-web" in text
    assert not any("table" in next(iter(c.values())) for c in document["nftables"])


def test_unchanged_configuration_needs_no_command():
    compiled = {r.key: r for r in map(compiler.compile_farm, ALL_FARMS)}
    document, changed = compiler.incremental_document({k: v.objects for k, v in compiled.items()}, compiled)
    assert changed == [] and document == {"nftables": []}


def last_rule(unit, chain: str) -> list:
    rules = [c["add"]["rule"] for c in unit.creates if "rule" in c.get("add", {})]
    return [r["expr"] for r in rules if r["chain"] == chain][-1]


def scheduler_of(unit, chain: str) -> dict:
    """A NAT farm's pick as one would read it: the key put in the ct mark, and what each value jumps to:
    through one map (value -> jump), or two (the scheduler map's value -> backend id, then the targets
    map's id -> jump) for the schedulers whose rule does not follow the weights."""
    ct_mark = {"ct": {"key": "mark"}}

    def elements(name: str) -> list:
        found = [c["add"]["element"]["elem"] for c in unit.creates if c["add"].get("element", {}).get("name") == name]
        return [e for elems in found for e in elems]

    rule = last_rule(unit, chain)
    if len(rule) == 1:  # the shared schedules map: the pick, a jump to the schedule chain, then the targets
        rules = [c["add"]["rule"]["expr"] for c in unit.creates if c["add"].get("rule", {}).get("chain") == chain]
        mark, jump = rules[-2][-2:]
        shard = compiler.schedulers.schedules_map_name(unit.farm_id)
        assert jump == {"jump": {"target": compiler.schedulers.schedule_chain_name(unit.farm_id)}}
        assert mark["mangle"]["key"] == ct_mark
        targets = rule[0]["vmap"]["data"].removeprefix("@")
        assert rule[0]["vmap"]["key"] == ct_mark and ("map", targets) in unit.objects.objects
        assert {name for name, _key in unit.objects.elements if compiler.schedulers.is_schedules_map(name)} == {shard}
        jumps = dict((key, verdict) for key, verdict in elements(targets))
        shares = elements(shard)
        return {"key": mark["mangle"]["value"], "data": {"set": [[key, jumps[i]] for key, i in shares]}}
    if "map" not in rule[-2]["mangle"]["value"]:  # one map
        mark, lookup = rule[-2:]
        name = lookup["vmap"]["data"].removeprefix("@")
        assert mark["mangle"]["key"] == ct_mark and lookup["vmap"]["key"] == ct_mark
        assert ("map", name) in unit.objects.volatile and "-id" not in name
        return {"key": mark["mangle"]["value"], "data": {"set": elements(name)}}
    mark, pick, lookup = rule[-3:]
    assert mark["mangle"]["key"] == pick["mangle"]["key"] == ct_mark and lookup["vmap"]["key"] == ct_mark
    sched = pick["mangle"]["value"]["map"]["data"].removeprefix("@")
    targets = lookup["vmap"]["data"].removeprefix("@")
    assert ("map", sched) in unit.objects.volatile and ("map", targets) in unit.objects.objects
    jumps = dict((key, verdict) for key, verdict in elements(targets))
    return {"key": mark["mangle"]["value"], "data": {"set": [[key, jumps[i]] for key, i in elements(sched)]}}


def test_round_robin_and_weighted_schedulers():
    vmap = scheduler_of(compiler.compile_farm(WEB), "farm-web")
    assert vmap["key"] == {"numgen": {"mode": "inc", "mod": 2, "offset": 0}}  # the disabled backend is left out
    weighted = scheduler_of(compiler.compile_farm(DNS6), "farm-dns6")
    span = compiler.schedulers.WEIGHT_SPAN  # weights 1 and 3: a quarter and three quarters of the span
    base = DNS6.id * compiler.schedulers.SCHEDULE_STRIDE  # the farm's slot of the shared schedules map
    assert weighted["key"]["numgen"] == {"mode": "random", "mod": span, "offset": base}
    assert [e[0] for e in weighted["data"]["set"]] == [
        {"range": [base, base + span // 4 - 1]},
        {"range": [base + span // 4, base + span - 1]},
    ]


def test_a_farm_past_the_shared_slots_or_the_span_keeps_a_scheduler_map_of_its_own():
    """A weight farm picks in its own slot of the shared ``schedules`` map while its id fits the slots and
    its weights the span; past either, it keeps ``sched-<name>-id-w`` with the same shares."""
    span = compiler.schedulers.WEIGHT_SPAN
    assert (
        compiler.schedulers.shared_pick_base(DNS6, DNS6.active_backends)
        == DNS6.id * compiler.schedulers.SCHEDULE_STRIDE
    )
    far = replace(DNS6, id=compiler.schedulers.SCHEDULE_SLOTS)
    heavy = replace(DNS6, backends=tuple(replace(b, weight=span) for b in DNS6.backends))
    for farm in (far, heavy):
        assert compiler.schedulers.shared_pick_base(farm, farm.active_backends) is None
        unit = compiler.compile_farm(farm)
        assert ("map", "sched-dns6-id-w") in unit.objects.volatile
        assert not any(compiler.schedulers.is_schedules_map(name) for name, _key in unit.objects.elements)
    pick = scheduler_of(compiler.compile_farm(far), "farm-dns6")
    assert pick["key"]["numgen"] == {"mode": "random", "mod": span, "offset": 0}
    assert [e[0] for e in pick["data"]["set"]] == [{"range": [0, span // 4 - 1]}, {"range": [span // 4, span - 1]}]
    assert scheduler_of(compiler.compile_farm(heavy), "farm-dns6")["key"]["numgen"]["mod"] == 2 * span


def test_hash_schedulers_and_priority_groups():
    farm = FarmSpec(
        id=9,
        name="h",
        vip="198.18.100.9",
        ports=((80, 80),),
        scheduler="hash",
        sched_param=("srcip", "srcport"),
        backends=(BackendSpec(1, "198.18.1.11"), BackendSpec(2, "198.18.1.12", priority=2)),
    )
    key = scheduler_of(compiler.compile_farm(farm), "farm-h")["key"]["jhash"]
    assert key["mod"] == 1 and key["expr"]["concat"][1] == {"payload": {"protocol": "th", "field": "sport"}}
    primary_down = dataclasses.replace(farm, backends=(BackendSpec(1, "198.18.1.11", healthy=False), farm.backends[1]))
    vmap = scheduler_of(compiler.compile_farm(primary_down), "farm-h")
    assert vmap["data"]["set"] == [[0, {"jump": {"target": "be-h-2"}}]]  # priority 2 takes over
    sym = dataclasses.replace(farm, scheduler="symhash", sched_param=())
    assert "symhash" in scheduler_of(compiler.compile_farm(sym), "farm-h")["key"]


def farm_rule_of(ruleset: compiler.UnitRuleset) -> dict:
    chain = f"farm-{ruleset.name}"
    rules = [c["add"]["rule"] for c in ruleset.creates if c.get("add", {}).get("rule", {}).get("chain") == chain]
    return rules[-1]  # the scheduler's rule, which carries the digest


def test_farm_without_enabled_backend_rejects_and_an_off_farm_owns_nothing():
    empty = compiler.compile_farm(EMPTY)
    assert farm_rule_of(empty)["expr"][-1] == {"reject": None}  # sctp: ICMP port unreachable
    tcp_empty = compiler.compile_farm(FarmSpec(**{**EMPTY.__dict__, "protocol": "tcp"}))
    assert farm_rule_of(tcp_empty)["expr"][-1] == {"reject": {"type": "tcp reset"}}
    off = compiler.compile_farm(OFF)
    assert off.creates == [] and off.objects.chains == ()


def test_a_backend_healthd_saw_down_leaves_the_scheduler_like_a_disabled_one():
    down = FarmSpec(**{**WEB.__dict__, "backends": (WEB.backends[0], replace(WEB.backends[1], healthy=False))})
    assert [b.id for b in down.active_backends] == [1]
    ruleset = compiler.compile_farm(down)
    assert {"farm-web", "be-web-1"} <= set(ruleset.objects.chains) and "be-web-2" not in ruleset.objects.chains
    assert scheduler_of(ruleset, "farm-web")["key"]["numgen"]["mod"] == 1
    assert ruleset.digest != compiler.compile_farm(WEB).digest
    assert down.traffic == "balanced"


def test_with_every_backend_down_the_fallback_takes_new_connections():
    ruleset = compiler.compile_farm(ALL_DOWN)
    assert ALL_DOWN.traffic == "fallback"
    assert {"farm-alldown", "be-alldown-fallback"} <= set(ruleset.objects.chains)
    assert farm_rule_of(ruleset)["expr"][-1] == {"jump": {"target": "be-alldown-fallback"}}
    fallback_rule = next(
        c["add"]["rule"] for c in ruleset.creates if c["add"].get("rule", {}).get("chain") == "be-alldown-fallback"
    )
    assert {"dnat": {"family": "ip", "addr": "198.18.1.13", "port": 5353}} in fallback_rule["expr"]
    recovered = FarmSpec(**{**ALL_DOWN.__dict__, "backends": (replace(ALL_DOWN.backends[0], healthy=True),)})
    assert recovered.traffic == "balanced"
    assert "be-alldown-fallback" not in compiler.compile_farm(recovered).objects.chains


def test_every_packet_of_a_farm_is_counted_by_direction_and_by_backend():
    """Per-packet accounting is one lookup in a shared counter map, whatever the number of farms and backends:
    the direction picks the map, the backend's address (the packet's destination going in, its source coming
    out) and the farm's mark give the backend's counter for that direction."""
    ruleset = compiler.compile_farm(WEB)
    assert not [c for c in ruleset.creates if c["add"].get("rule", {}).get("chain", "").startswith("traffic")]
    elements = {
        (e["name"], compiler.canonical(e["elem"][0][0])): e["elem"][0][1]
        for c in ruleset.creates
        if (e := c["add"].get("element")) and e["name"].startswith("traffic")
    }
    mark = WEB.mark
    expected = {}
    for backend in WEB.backends:  # the disabled backend still counts its draining connections
        for direction in ("in", "out"):
            key = compiler.canonical({"concat": [backend.address, mark]})
            expected[(f"traffic4_{direction}", key)] = f"traffic-be-web-{backend.id}-{direction}"
    assert elements == expected
    counters = {name for kind, name in ruleset.objects.objects if kind == "counter"}
    assert set(expected.values()) <= counters
    assert not {"traffic-in-web", "traffic-out-web", "traffic-be-web-3"} & counters  # the collector's sums
    forward = compiler.compile_hooks([WEB])["hook:forward"]
    rules = [c["add"]["rule"]["expr"] for c in forward.creates if "rule" in c["add"]]
    mark, direction = {"ct": {"key": "mark"}}, {"ct": {"key": "direction"}}

    def count(ct_direction: str, field: str, data: str) -> list:
        key = {"concat": [{"payload": {"protocol": "ip", "field": field}}, mark]}
        return [
            {"match": {"op": "==", "left": direction, "right": ct_direction}},
            {"counter": {"map": {"key": key, "data": data}}},
        ]

    assert rules == [count("original", "daddr", "@traffic4_in"), count("reply", "saddr", "@traffic4_out")]


def test_a_farms_fallback_address_is_counted_and_a_shared_address_once():
    """Traffic to the fallback address has counters of its own; backends that share an address are counted on
    the lowest id (one key, one counter), and the others' counters exist, at zero, for the collector's sums."""
    twins = replace(
        WEB,
        backends=(BackendSpec(id=7, address="198.18.1.11"), BackendSpec(id=8, address="198.18.1.11", port=81)),
        fallback=BackendSpec(id=0, address="198.18.1.99"),
    )
    ruleset = compiler.compile_farm(twins)
    elements = {
        json.loads(compiler.canonical(e["elem"][0][0]))["concat"][0] + "/" + e["elem"][0][1]
        for c in ruleset.creates
        if (e := c["add"].get("element")) and e["name"] in ("traffic4_in", "traffic4_out")
    }
    assert elements == {
        "198.18.1.11/traffic-be-web-7-in",
        "198.18.1.11/traffic-be-web-7-out",
        "198.18.1.99/traffic-be-web-fallback-in",
        "198.18.1.99/traffic-be-web-fallback-out",
    }
    counters = {name for kind, name in ruleset.objects.objects if kind == "counter"}
    assert {"traffic-be-web-8-in", "traffic-be-web-8-out"} <= counters
    no_backend = replace(twins, backends=())
    assert "hook:forward" in compiler.compile_hooks([no_backend])  # its fallback's traffic is counted
    assert "hook:forward" not in compiler.compile_hooks([replace(no_backend, fallback=None)])  # nothing to count


def test_the_scheduler_map_is_named_and_every_chain_it_jumps_to_restores_the_farm_mark():
    """An anonymous map per farm made a full apply quadratic in the kernel (see ``nat_scheduler``)."""
    for farm in (WEB, DNS6, replace(WEB, backends=(_b(1), _b(2), _b(3)))):
        unit = compiler.compile_farm(farm)
        data = scheduler_of(unit, f"farm-{farm.name}")["data"]["set"]
        for _key, verdict in data:
            target = verdict["jump"]["target"]
            first = last_rule_first(unit, target)
            assert first[0] == {"mangle": {"key": {"ct": {"key": "mark"}}, "value": farm.mark}}, (farm.name, target)
        assert '"set": [' not in json.dumps([c for c in unit.creates if "rule" in c["add"]])  # no anonymous set


def last_rule_first(unit, chain: str) -> list:
    return [c["add"]["rule"]["expr"] for c in unit.creates if c["add"].get("rule", {}).get("chain") == chain][0]


def test_hooks_exist_only_while_a_farm_needs_them():
    """No farm: no base chain at all, only the skeleton's digest chain (no hook). A DNAT farm adds
    prerouting (with the schedule chains NAT farms jump to) and forward (accounting); SNAT adds
    postrouting; the options with a per-packet cost (guard, stateless, intra-connect, offload) add theirs
    only when a farm uses them."""
    assert compiler.compile_hooks([]) == {}
    chains, _maps = compiler.hooks.skeleton_objects()
    assert chains == [compiler.hooks.BASE_CHAIN]
    assert '"hook"' not in json.dumps(compiler.base_commands())
    dnat = replace(DNS6, id=20, name="d")
    assert set(compiler.compile_hooks([dnat])) == {"hook:prerouting", "hook:forward"}
    shards = [compiler.schedulers.schedule_chain_name(n) for n in range(compiler.schedulers.SCHEDULE_SHARDS)]
    assert set(compiler.compile_hooks([dnat])["hook:prerouting"].objects.chains) == {"prerouting", *shards}
    assert set(compiler.compile_hooks([WEB])) == {"hook:prerouting", "hook:forward", "hook:postrouting"}
    assert compiler.compile_hooks([replace(WEB, enabled=False)]) == {}
    guarded = replace(dnat, tcp_strict=True)
    hooks = compiler.compile_hooks([guarded])
    assert set(hooks) == {"hook:prerouting", "hook:forward", "hook:guard"}
    guard_rules = [c for c in hooks["hook:guard"].creates if "rule" in c["add"]]
    assert len(guard_rules) == 1  # one IPv6 farm of one protocol: one lookup, not four
    offloaded = compiler.compile_hooks([replace(dnat, flow_offload=True)])["hook:forward"]
    forward = [c["add"]["rule"]["expr"] for c in offloaded.creates if "rule" in c["add"]]
    assert forward[0] == [{"vmap": {"key": {"ct": {"key": "mark"}}, "data": "@offload_marks"}}]
    assert "@offload_marks" not in json.dumps(compiler.compile_hooks([dnat])["hook:forward"].creates)
    assert set(compiler.compile_hooks([replace(dnat, intra_connect=True)])) == {
        "hook:prerouting",
        "hook:forward",
        "hook:output",
    }


def test_a_table_of_stateless_farms_alone_holds_nothing_that_makes_the_kernel_track_packets():
    """A NAT chain or a ct expression anywhere in the table registers conntrack for the whole namespace,
    a lookup every packet pays; stateless farms notrack their datagrams and need only defragmentation
    (tproxy statements in a chain no packet reaches). The first NAT farm brings prerouting and the
    schedule chains; when it goes, its chain is deleted before the chains it jumped to."""
    stateless = FarmSpec(
        id=3, name="u", vip="198.18.100.3", protocol="udp", ports=((53, 53),), mode="stlsdnat", backends=(_b(1), _b(2))
    )
    alone = json.dumps(compiler.full_document([stateless]))
    assert '"ct"' not in alone and '"nat"' not in alone, alone
    assert alone.count('"tproxy"') == 2  # IPv4 and IPv6 defragmentation
    dnat = FarmSpec(
        id=4, name="d", vip="198.18.100.4", ports=((80, 80),), mode="dnat", scheduler="weight", backends=(_b(1), _b(2))
    )
    both = compiler.compile_units([stateless, dnat], [])
    assert '{"jump": {"target": "schedule-4"}}' in json.dumps(both["farm:4"].creates)
    applied = {k: u.objects for k, u in both.items()}
    document, changed = compiler.incremental_document(applied, compiler.compile_units([stateless], []))
    assert set(changed) == {"farm:4", "hook:prerouting", "hook:forward"}
    deleted = [c["delete"]["chain"]["name"] for c in document["nftables"] if "chain" in c.get("delete", {})]
    assert deleted.index("farm-d") < deleted.index("schedule-4") and "prerouting" in deleted, deleted


def _stateless_u(scheduler: str, backends: tuple[BackendSpec, ...]) -> FarmSpec:
    """A stateless UDP farm ``u`` with ``scheduler`` (hashing the client's address, for ``hash``)."""
    hashed = ("srcip",) if scheduler == "hash" else ()
    return replace(
        DNS6,
        id=3,
        name="u",
        vip="198.18.100.3",
        mode="stlsdnat",
        scheduler=scheduler,
        sched_param=hashed,
        backends=backends,
    )


@pytest.mark.parametrize("scheduler", ["rr", "hash", "symhash", "weight", "maglev"])
def test_a_stateless_farm_makes_its_datagrams_pay_for_no_counter_and_no_return(scheduler):
    """Nothing reads a stateless farm's packets (the collector measures what conntrack sees; the dashboard
    says the farm is not measured): a counter there cost every datagram about 1 % for nobody. The pick is
    the farm chain's last rule, so it goes to the backend's chain rather than jumping there and back."""
    backends = (_b(1), BackendSpec(id=2, address="198.18.1.12", port=5353))
    farm = _stateless_u(scheduler, backends)
    for variant in (farm, replace(farm, log=True), replace(farm, backends=())):
        creates = json.dumps(compiler.compile_farm(variant).creates)
        assert '"counter": {' not in creates and '{"counter": "' not in creates, creates
        assert '"jump"' not in creates, creates
    rules = [c["add"]["rule"] for c in compiler.compile_farm(farm).creates if "rule" in c.get("add", {})]
    pick = next(r for r in rules if r["chain"] == "farm-u")["expr"]
    assert pick[0] == {"notrack": None} and len(pick) == 2, pick
    targets = {verdict["goto"]["target"] for _key, verdict in pick[1]["vmap"]["data"]["set"]}
    assert targets == {"be-u-1", "be-u-2"}


@pytest.mark.parametrize("scheduler", ["rr", "hash", "symhash", "weight", "maglev"])
def test_a_stateless_farm_of_portless_backends_writes_the_pick_from_a_map_of_addresses(scheduler):
    """With no backend port to rewrite, the pick is the hand-written rule's: the farm chain's one rule writes
    the destination from a map of the backends' addresses, and a datagram meets no backend chain. The
    map has the keys the verdict map would have (weights, hashes, maglev's slots alike)."""
    backends = (_b(1, weight=2), _b(2))
    farm = _stateless_u(scheduler, backends)
    unit = compiler.compile_farm(farm)
    assert not [c for c in unit.objects.chains if c.startswith("be-")], unit.objects.chains
    assert {c for c in unit.objects.chains if c.startswith("reply-")} == {"reply-u-1", "reply-u-2"}
    for variant in (farm, replace(farm, log=True)):
        rules = [c["add"]["rule"] for c in compiler.compile_farm(variant).creates if "rule" in c.get("add", {})]
        chain = [r["expr"] for r in rules if r["chain"] == "farm-u"]
        assert chain[0][0] == {"notrack": None}, chain
        (rewrite,) = [e for e in chain[-1] if "mangle" in e]
        assert rewrite["mangle"]["key"] == {"payload": {"protocol": "ip", "field": "daddr"}}
        chained = compiler.stateless._goto_backends(compiler.schedulers.scheduler_map(farm, backends))["vmap"]
        written = rewrite["mangle"]["value"]["map"]
        assert written["key"] == chained["key"]
        addresses = {"be-u-1": "198.18.1.11", "be-u-2": "198.18.1.12"}
        expected = [[k, addresses[v["goto"]["target"]]] for k, v in chained["data"]["set"]]
        assert written["data"]["set"] == expected
    # One backend with a port of its own: both rewrites need one pick, through the backends' chains.
    mixed = compiler.compile_farm(replace(farm, backends=(_b(1), _b(2, port=5353))))
    assert {"be-u-1", "be-u-2"} <= set(mixed.objects.chains)


def test_the_stateless_hook_tests_the_farms_ports_before_its_lookup():
    """A backend's answer goes to the client's port: the port match ends its miss of the dispatch lookup
    before the concatenated key's hash. Overlapping ranges are joined; farms that serve every port, or
    DNAT farms' ports, put no port there; the same ports give the same hook unit whatever the farms."""

    def stateless(i: int, ports) -> FarmSpec:
        return FarmSpec(
            id=i,
            name=f"u{i}",
            vip=f"198.18.{100 + i // 250}.{i % 250 + 1}",
            protocol="udp",
            ports=ports,
            mode="stlsdnat",
            backends=(_b(i % 200),),
        )

    def first(farms: list[FarmSpec]) -> list:
        return [rule[0] for rule in _hook_rules(compiler.compile_hooks(farms), "stateless")]

    dport = {"payload": {"protocol": "th", "field": "dport"}}
    dnat = FarmSpec(id=9, name="d", vip="198.18.100.9", ports=((80, 80),), mode="dnat", backends=(_b(1),))
    one = first([stateless(1, ((53, 53),)), dnat])
    assert one == [{"match": {"op": "==", "left": dport, "right": 53}}] + [one[1]], one
    assert one[1]["match"]["left"] == {"meta": {"key": "l4proto"}}  # the replies' rule keeps its protocol match
    farms = [stateless(1, ((53, 53),)), stateless(2, ((5000, 5010),)), stateless(3, ((5005, 5020), (5021, 5021)))]
    rules = _hook_rules(compiler.compile_hooks(farms), "stateless")
    ports = {"set": [53, {"range": [5000, 5021]}]}
    assert [rule[0] for rule in rules[:2]] == [{"match": {"op": "==", "left": dport, "right": ports}}] * 2
    assert [_looked_up(rule) for rule in rules[:2]] == [["stateless4"], ["stateless4_ranges"]]
    assert compiler.compile_hooks(farms[::-1]) == compiler.compile_hooks(farms)
    every = _hook_rules(compiler.compile_hooks([*farms, stateless(4, ())]), "stateless")
    assert [_looked_up(rule) for rule in every] == [
        ["stateless4"],
        ["stateless4_ranges"],
        ["stateless_replies4"],
        ["stateless_replies4_ranges"],
    ]
    assert all("vmap" in rule[0] for rule in every[:2]), every
    many = [stateless(10 + i, ((1000 + 2 * i, 1000 + 2 * i),)) for i in range(compiler.hooks.STATELESS_PORTS_MAX + 1)]
    assert "vmap" in _hook_rules(compiler.compile_hooks(many), "stateless")[0][0]


def test_removing_a_farm_unhooks_its_traffic_counters_first():
    objects = compiler.compile_farm(DNS6).objects
    cmds = compiler.removal_commands(objects, set())
    verbs = [(verb, kind, body.get("name")) for c in cmds for verb, x in c.items() for kind, body in x.items()]
    counter = ("delete", "counter", "traffic-be-dns6-4-in")
    assert verbs.index(("delete", "element", "traffic6_in")) < verbs.index(counter)


def _chains_and_sets(unit) -> tuple[set[str], set[str]]:
    o = unit.objects
    return set(o.chains), {name for kind, name in o.objects if kind == "set"}


def test_snat_sends_a_reused_client_port_back_and_a_held_one_elsewhere():
    """Issue 7: TCP SNAT farms with a numgen scheduler learn client ports per backend (nat.keeps_reused_ports)."""
    farm = replace(WEB, backends=(_b(1), _b(2), _b(3)))
    chains, sets = _chains_and_sets(compiler.compile_farm(farm))
    assert sets == {f"{kind}-web-{i}" for kind in ("reuse", "ports") for i in (1, 2, 3)}
    assert {f"pick-web-{i}" for i in (1, 2, 3)} | {f"elsewhere-web-{i}" for i in (1, 2, 3)} <= chains
    vmap = scheduler_of(compiler.compile_farm(farm), "farm-web")
    assert [e[1] for e in vmap["data"]["set"]] == [{"jump": {"target": f"pick-web-{i}"}} for i in (1, 2, 3)]
    creates = compiler.compile_farm(farm).creates
    rules = {}
    for c in creates:
        rule = c["add"].get("rule")
        if rule:
            rules.setdefault(rule["chain"], []).append(rule["expr"])
    # the scheduler's pick first, then the others in turn; held everywhere: the pick (NAT picks a port)
    assert [r[-1]["goto"]["target"] for r in rules["elsewhere-web-2"]] == ["be-web-3", "be-web-1", "be-web-2"]
    assert [r[-1]["jump"]["target"] for r in rules["farm-web"][1:4]] == ["be-web-1", "be-web-2", "be-web-3"]
    # a UDP farm, a DNAT farm, persistence and hash schedulers need none of it; a single backend needs no pick
    for other in (
        replace(farm, protocol="udp"),
        replace(farm, mode="dnat"),
        replace(farm, scheduler="weight", persistence=("srcip",)),
        replace(farm, scheduler="hash", sched_param=("srcip", "srcport")),
        replace(farm, scheduler="symhash"),
    ):
        chains, sets = _chains_and_sets(compiler.compile_farm(other))
        assert not {x for x in sets if x.startswith(("reuse-", "ports-"))}, other
        assert not any(c.startswith(("pick-", "elsewhere-")) for c in chains), other
    chains, sets = _chains_and_sets(compiler.compile_farm(replace(farm, backends=(_b(1),))))
    assert sets == {"reuse-web-1", "ports-web-1"} and not any(c.startswith("pick-") for c in chains)
    # protocol all: only TCP is learnt and looked up
    every = compiler.compile_farm(replace(farm, protocol="all", ports=()))
    learnt = [c["add"]["rule"]["expr"] for c in every.creates if c["add"].get("rule", {}).get("chain") == "be-web-1"]
    assert learnt[0][0] == {"mangle": {"key": {"ct": {"key": "mark"}}, "value": 1}}  # the farm's mark back first
    assert learnt[0][1] == {"match": {"op": "==", "left": {"meta": {"key": "l4proto"}}, "right": "tcp"}}


def element_commands(document: dict) -> list[dict]:
    return [c for c in document["nftables"] if "element" in next(iter(c.values()))]


def one_change(old: FarmSpec, new: FarmSpec, *, legacy: bool = False) -> dict:
    """The incremental document that turns farm ``old`` into ``new``."""
    applied = compiler.compile_farm(old).objects
    if legacy:  # as recorded before the verdicts of shared-map elements were kept
        applied = compiler.UnitObjects.from_json({k: v for k, v in applied.to_json().items() if k != "element_values"})
    key = compiler.farm_key(new.id)
    document, changed = compiler.incremental_document({key: applied}, {key: compiler.compile_farm(new)})
    assert changed == [key]
    return document


def test_a_change_inside_a_farm_sends_no_element_command():
    """A weight or a backend's state leaves the farm's entries in the shared maps as they are: any element
    command makes libnftables read the elements of every interval set first (a cost that grows with farms,
    in the scratch namespace and wherever libnftables writes the change). Only the farm's scheduler
    elements change: its own map's, or those of its slot of the shared ``schedules`` map."""
    heavier = replace(WEB_REWEIGHTED, backends=(replace(WEB.backends[0], weight=5), WEB.backends[1]))
    enabled = replace(WEB, backends=(*WEB.backends[:2], replace(WEB.backends[2], state="enabled")))
    for old, new in ((WEB, WEB_REWEIGHTED), (WEB_REWEIGHTED, heavier), (WEB, enabled)):
        document = one_change(old, new)
        farm_maps = [c for c in element_commands(document) if "targets-" in json.dumps(c)]
        sched = [c for c in element_commands(document) if _is_scheduler_element(c)]
        elements = [c for c in element_commands(document) if c not in sched and c not in farm_maps]
        # a weight farm's own targets map is filled when it becomes one (rr -> weight), not on a weight change
        assert [list(c)[0] for c in farm_maps] == {WEB_REWEIGHTED: ["add", "add"], heavier: [], enabled: []}[new]
        if new is WEB_REWEIGHTED:  # backend 3 is gone: only its entries in the traffic counter map leave
            names = sorted(c["delete"]["element"]["name"] for c in elements)
            assert [list(c)[0] for c in elements] == ["delete"] * 2 and names == ["traffic4_in", "traffic4_out"]
        else:
            assert document["nftables"] and not elements, new
        rewritten = any(c.get("add", {}).get("rule", {}).get("chain") == "farm-web" for c in document["nftables"])
        assert rewritten == (new is not heavier)  # a random pick's modulus does not follow the weights


def _is_scheduler_element(command: dict) -> bool:
    body = next(iter(command.values()))["element"]
    return compiler.schedulers.is_schedules_map(body["name"]) or body["name"].startswith("sched-")


def _rules_and_flushed_chains(document: dict) -> tuple[set[str], set[str]]:
    rules = {c["add"]["rule"]["chain"] for c in document["nftables"] if "rule" in c.get("add", {})}
    flushed = {c["flush"]["chain"]["name"] for c in document["nftables"] if "chain" in c.get("flush", {})}
    return rules, flushed


def test_a_weight_change_rewrites_only_the_scheduler_map_and_the_digest_chain():
    """Issue 13: any rule that can jump or translate makes the kernel validate every jump of the whole
    table at commit (~115 ms at 10,000 farms), so a weight change of a random scheduler (weight, and
    leastconn whose weights the worker keeps changing) adds only the digest chain's counter rule:
    the pick's modulus does not depend on the weights, the scheduler map's elements (no verdicts: an
    element that jumps costs a validation too) change alone, and every other chain stays with its rules."""
    for scheduler in ("maglev", "leastconn", "weight"):  # Maglev: its table's size follows the backends, not weights
        farm = replace(DNS6, scheduler=scheduler)
        heavier = replace(farm, backends=(farm.backends[0], replace(farm.backends[1], weight=7)))
        document = one_change(farm, heavier)
        rules, flushed = _rules_and_flushed_chains(document)
        assert rules == flushed == {"digest-dns6"}, document
        text = json.dumps(document)
        if scheduler == "maglev":  # its own map, refilled
            assert '"flush": {"map"' in text and "sched-dns6-id" in text
        else:  # its slot of the shared map: the old shares leave, the new come, nothing else is flushed
            changed = [(verb, next(iter(c.values()))["element"]["name"]) for c in element_commands(document)
                       for verb in c]  # fmt: skip
            shard = compiler.schedulers.schedules_map_name(farm.id)
            assert changed == [("delete", shard)] * 2 + [("add", shard)] * 2
            assert '"flush": {"map"' not in text
        assert not any("jump" in json.dumps(c) for c in element_commands(document))  # jumps cost a validation too
        chains = [c for c in document["nftables"] if "chain" in c.get("add", {}) or "chain" in c.get("delete", {})]
        assert chains == [{"add": {"chain": f.chain("digest-dns6")}}]
    # the shares stay the weights' shares: 1 and 7 of 8
    elements = [
        c["add"]["element"]["elem"] for c in compiler.compile_farm(heavier).creates if "element" in c.get("add", {})
    ]
    sched = [e for elems in elements for e in elems if isinstance(e[0], dict) and "range" in e[0]]
    widths = [high - low + 1 for (low, high) in (key["range"] for key, _verdict in sched)]
    span = compiler.schedulers.WEIGHT_SPAN
    assert sum(widths) == span and abs(widths[0] - span / 8) < 1 and abs(widths[1] - span * 7 / 8) < 1


def test_a_change_keeps_the_chains_whose_rules_did_not_change():
    """A backend's weight in a round-robin farm changes the pick (its modulus), not the backends' chains;
    a unit recorded before chain digests were kept has every chain rewritten."""
    rules, flushed = _rules_and_flushed_chains(one_change(WEB, WEB_REWEIGHTED))
    assert rules == flushed - {"be-web-3", "pick-web-3", "elsewhere-web-3"} == {"farm-web", "digest-web"}
    old = compiler.compile_farm(WEB).objects
    legacy = compiler.UnitObjects.from_json({k: v for k, v in old.to_json().items() if k != "chain_digests"})
    document, _ = compiler.incremental_document({"farm:1": legacy}, {"farm:1": compiler.compile_farm(WEB_REWEIGHTED)})
    assert _rules_and_flushed_chains(document)[1] == set(old.chains)


def test_a_moved_port_or_a_renamed_farm_still_replaces_its_elements():
    moved = one_change(WEB, replace(WEB, ports=((80, 80), (8443, 8443), (8000, 8100))))
    text = json.dumps(element_commands(moved))
    assert "8443" in text and "443]" in text  # the old port leaves, the new one comes
    assert '"tcp", 80]' not in text and "8000" not in text  # the ports that stay are not touched
    renamed = element_commands(one_change(WEB, replace(WEB, name="www")))
    shared = [name for name, _key in compiler.compile_farm(WEB).objects.elements if not name.startswith("targets-")]
    assert len([c for c in renamed if "delete" in c]) == len(shared)  # its own targets map goes whole
    assert "farm-www" in json.dumps(renamed)


def test_units_recorded_without_verdicts_replace_their_elements():
    document = one_change(WEB, WEB_REWEIGHTED, legacy=True)
    deleted = [c for c in element_commands(document) if "delete" in c]
    assert len(deleted) == len(compiler.compile_farm(WEB).objects.elements) > 0


def test_a_change_without_element_commands_applies_and_keeps_the_farm_reachable(throwaway_netns):
    assert nft(throwaway_netns, "-j", "-f", str(GOLDEN / "full.json")).returncode == 0
    document = one_change(WEB, WEB_REWEIGHTED)
    result = nft(throwaway_netns, "-j", "-f", "-", document=document)
    assert result.returncode == 0, result.stderr
    dispatch = nft(throwaway_netns, "list", "map", "inet", "lbweb", "dispatch4").stdout
    assert "198.18.100.1 . tcp . 443 : goto farm-web" in dispatch
    farm_chain = nft(throwaway_netns, "list", "chain", "inet", "lbweb", "farm-web").stdout
    assert f"numgen random mod {compiler.schedulers.WEIGHT_SPAN}" in farm_chain


def _hook_rules(hooks: dict, chain: str) -> list[list]:
    creates = hooks[compiler.names.hook_key(chain)].creates
    return [c["add"]["rule"]["expr"] for c in creates if c["add"].get("rule", {}).get("chain") == chain]


def _looked_up(expr: list) -> list[str]:
    """The named maps and sets one rule looks up ('@name' anywhere in it)."""
    return [s[1:] for s in json.dumps(expr).split('"') if s.startswith("@")]


def _bench_farms(backends: int, farms: int) -> list[FarmSpec]:
    """A DNAT farm, a SNAT farm and a stateless UDP farm on single ports, then ``farms`` more DNAT farms."""
    many = tuple(BackendSpec(id=i, address=f"198.18.1.{10 + i % 200}") for i in range(1, backends + 1))
    specs = [
        FarmSpec(id=1, name="d", vip="198.18.100.1", ports=((80, 80),), mode="dnat", backends=many),
        FarmSpec(id=2, name="s", vip="198.18.100.2", ports=((80, 80),), mode="snat", backends=many),
        FarmSpec(
            id=3, name="u", vip="198.18.100.3", protocol="udp", ports=((53, 53),), mode="stlsdnat", backends=many[:3]
        ),
    ]
    for i in range(farms):
        vip = f"198.19.{i // 250}.{i % 250 + 1}"
        specs.append(FarmSpec(id=10 + i, name=f"x{i}", vip=vip, ports=((80, 80),), mode="dnat", backends=many[:3]))
    return specs


def test_per_packet_work_is_the_same_for_3_or_100_backends_and_1_or_10000_farms():
    """Issue 13: the rules a packet meets do not grow with backends or farms, and the hooks every packet
    passes look up only hash maps when no farm has a port range (an interval map keyed by a concatenation
    costs in proportion to its elements). An established TCP packet of a DNAT farm meets, beside a
    stateless UDP farm: one failed port match and one failed protocol match (raw), and the one
    counter-map lookup of the per-backend accounting (forward: the rule of the packet's direction; the
    other rule stops at its direction match); a stateless datagram's reply a port match
    and one lookup."""
    small = compiler.compile_hooks(_bench_farms(3, 0))
    for backends, farms in ((100, 0), (3, 10_000)):
        assert compiler.compile_hooks(_bench_farms(backends, farms)) == small, (backends, farms)
    assert set(small) == {"hook:prerouting", "hook:stateless", "hook:forward", "hook:postrouting"}  # no guard
    udp = {"match": {"op": "==", "left": {"meta": {"key": "l4proto"}}, "right": "udp"}}
    stateless = _hook_rules(small, "stateless")
    assert [_looked_up(r) for r in stateless] == [["stateless4"], ["stateless_replies4"]]
    assert stateless[1][0] == udp  # a TCP packet stops at the first expression of the replies' rule
    port = {"match": {"op": "==", "left": {"payload": {"protocol": "th", "field": "dport"}}, "right": 53}}
    assert stateless[0][0] == port  # ... and of the dispatch rule, unless it is bound to the farm's port 53
    forward = _hook_rules(small, "forward")
    assert [_looked_up(r) for r in forward] == [["traffic4_in"], ["traffic4_out"]]  # one a packet: its direction
    maps = {c["add"]["map"]["name"]: c["add"]["map"] for c in compiler.base_commands() if "map" in c["add"]}
    for rule in stateless + forward:
        for name in _looked_up(rule):
            assert "interval" not in maps[name].get("flags", ()), name
    # New connections: the exact dispatch map first, and its entries end the hook (goto, not jump).
    prerouting = _hook_rules(small, "prerouting")
    assert _looked_up(prerouting[0]) == ["dispatch4"] and "interval" not in maps["dispatch4"].get("flags", ())
    for farm in _bench_farms(3, 0):
        unit = compiler.compile_farm(farm)
        pairs = zip(unit.objects.elements, unit.objects.element_values, strict=True)
        services = [v for (name, _k), v in pairs if name.startswith(("dispatch", "stateless"))]
        assert services and all("goto" in v for v in services), farm.name
    # A farm's own chain for a new connection is as long with 100 backends as with 3.
    three, hundred = (compiler.compile_farm(_bench_farms(n, 0)[0]) for n in (3, 100))
    assert last_rule_first(three, "farm-d") == last_rule_first(hundred, "farm-d")


def test_a_port_range_adds_its_interval_lookup_only_where_a_farm_has_one():
    ranged = FarmSpec(id=1, name="r", vip="198.18.100.1", ports=((8000, 8100),), mode="dnat", tcp_strict=True)
    single = replace(ranged, ports=((80, 80),))
    assert [_looked_up(r) for r in _hook_rules(compiler.compile_hooks([single]), "guard")] == [["guard4"]]
    assert [_looked_up(r) for r in _hook_rules(compiler.compile_hooks([ranged]), "guard")] == [["guard4_ranges"]]
    elements = compiler.compile_farm(ranged).objects.elements
    assert ("dispatch4_ranges", {"concat": ["198.18.100.1", "tcp", {"range": [8000, 8100]}]}) in elements
    stateless = FarmSpec(
        id=2, name="u", vip="198.18.100.2", protocol="udp", ports=((5000, 5010),), mode="stlsdnat", backends=(_b(1),)
    )
    rules = _hook_rules(compiler.compile_hooks([stateless]), "stateless")
    assert [_looked_up(r) for r in rules] == [["stateless4_ranges"], ["stateless_replies4_ranges"]]


# -- nftlb's mode local: the service on the appliance itself ------------------------------

LOCAL = FarmSpec(
    id=30,
    name="onbox",
    vip="198.18.100.30",
    ports=((443, 443),),
    mode="local",
    est_connlimit=10,
    new_rtlimit=20,
    rst_rtlimit=5,
    tcp_strict=True,
    log=True,
    policies=(PolicySpec(id=9, name="deny9", elements=("198.18.42.0/24",)),),
)


def _rules(unit: compiler.UnitRuleset) -> dict[str, list]:
    out: dict[str, list] = {}
    for command in unit.creates:
        if "rule" in command.get("add", {}):
            rule = command["add"]["rule"]
            out.setdefault(rule["chain"], []).append(rule["expr"])
    return out


def test_a_local_farm_filters_limits_and_logs_then_accepts_without_nat():
    """nftlb's run_farm_local: limits in the farm's filter chain, policies at ingress, no DNAT, no SNAT; here
    the farm's chain (first packet) ends in accept, its guard chain (every packet) holds policies and tcp-strict."""
    unit = compiler.compile_farm(LOCAL)
    text = json.dumps(unit.creates)
    for absent in ('"dnat"', '"snat"', '"masquerade"', '"numgen"', '"jhash"', "sched-", "be-onbox"):
        assert absent not in text, absent
    rules = _rules(unit)
    farm = rules["farm-onbox"]
    assert farm[0] == [{"counter": "farm-onbox"}, {"mangle": {"key": {"ct": {"key": "mark"}}, "value": 30}}]
    assert farm[-1] == [{"accept": None}]
    assert any("ct count" in json.dumps(r) and "saddr" in json.dumps(r) for r in farm)  # per client, as nftlb
    assert any('"limit"' in json.dumps(r) and '"inv": true' in json.dumps(r) for r in farm)  # new-rtlimit
    assert any('"prefix": "IN-onbox "' in json.dumps(r) for r in farm)  # log input
    guard = json.dumps(rules["guard-onbox"])
    assert "@policy-deny9-v4" in guard and '"invalid"' in guard and '"rst"' in guard
    elements = {(name, json.dumps(key)) for name, key in unit.objects.elements}
    assert ("dispatch4", json.dumps(f.concat("198.18.100.30", "tcp", 443))) in elements
    not_local = (
        "snat_farms",
        compiler.names.traffic_map(4, "in"),
        compiler.names.traffic_map(4, "out"),
        compiler.names.ROUTE_MARKS,
    )
    assert not any(name in not_local for name, _key in elements)
    assert {"traffic-in-onbox", "traffic-out-onbox"} <= {name for _kind, name in unit.objects.objects}


def test_a_local_farm_counts_its_bytes_in_input_and_output_once_each():
    """A local farm's packets never cross forward: its bytes are counted in the input hook (client to service)
    and in the output hook (replies), each packet once, also for a connection from the appliance itself."""
    hooks = compiler.compile_hooks([LOCAL])
    assert set(hooks) == {"hook:prerouting", "hook:guard", "hook:local-in", "hook:local-out"}  # no forward
    by_direction = {}
    for key in ("hook:local-in", "hook:local-out"):
        ((rule,),) = _rules(hooks[key]).values()
        assert rule[1] == f.counter_map_ref(f.concat(f.ct("mark"), f.ct("direction")), compiler.names.TRAFFIC_DIR_MAP)
        by_direction[key] = rule[0]["match"]["right"]
    assert by_direction == {"hook:local-in": "original", "hook:local-out": "reply"}
    intra = compiler.compile_hooks([replace(LOCAL, intra_connect=True)])
    assert "hook:output" in intra  # nftlb's output chains: the appliance's own connections are limited too
    assert compiler.compile_hooks([replace(LOCAL, enabled=False)]) == {}


def test_a_local_farm_is_taken_by_nft(throwaway_netns):
    v6 = replace(LOCAL, id=31, name="onbox6", vip="2001:2:0:100::30", protocol="all", ports=(), policies=())
    document = compiler.full_document([LOCAL, replace(v6, intra_connect=True)], list(LOCAL.policies))
    result = nft(throwaway_netns, "-j", "-f", "-", document=document)
    assert result.returncode == 0, result.stderr
    listing = nft(throwaway_netns, "list", "chain", "inet", "lbweb", "farm-onbox").stdout
    assert "accept" in listing and "dnat" not in listing


def test_merge_elements_sends_each_sets_additions_as_one_command_after_what_they_jump_to():
    """libnftables pays per command: a full document's single-element additions go as one per set, at the
    place of the set's last one (after every chain they jump to); a set emptied after an addition stays."""
    farms = [FarmSpec(id=i, name=f"m{i}", vip=f"198.18.100.{i}", ports=((80, 80),), mode="dnat",
                      backends=(BackendSpec(id=10 * i + 1, address=f"198.18.1.{i}"),)) for i in (1, 2, 3)]  # fmt: skip
    doc = compiler.full_document(farms)
    merged = compiler.merge_elements(doc)["nftables"]
    additions = [c["add"]["element"] for c in merged if "element" in c.get("add", {})]
    names = [a["name"] for a in additions]
    assert len(names) == len(set(names))  # one command per set
    dispatch = next(a for a in additions if a["name"] == "dispatch4")
    assert len(dispatch["elem"]) == 3
    position = merged.index({"add": {"element": dispatch}})
    assert all(
        merged.index({"add": {"chain": {"family": "inet", "table": "lbweb", "name": f"farm-m{i}"}}}) < position
        for i in (1, 2, 3)
    )
    every = sorted(
        json.dumps(e) for c in doc["nftables"] if "element" in c.get("add", {}) for e in c["add"]["element"]["elem"]
    )
    assert sorted(json.dumps(e) for a in additions for e in a["elem"]) == every
    flushed = {
        "nftables": [*doc["nftables"], {"flush": {"map": {"family": "inet", "table": "lbweb", "name": "dispatch4"}}}]
    }
    assert (
        sum(
            1
            for c in compiler.merge_elements(flushed)["nftables"]
            if c.get("add", {}).get("element", {}).get("name") == "dispatch4"
        )
        == 3
    )


def test_a_unit_map_keeps_the_digest_of_the_units_it_holds():
    """The worker's units keep one digest of the configuration up to date as they change (recorded with
    every apply): whatever the order of the changes, it is the digest of the same units in a plain dict."""
    from compiler.units import UnitMap, combined_digest

    first = compiler.compile_units(ALL_FARMS, [DENY, ALLOW])
    changed = compiler.compile_units([WEB_REWEIGHTED, *ALL_FARMS[1:]], [DENY])
    kept = UnitMap(first)
    assert kept.combined == combined_digest(dict(first))
    for key in list(kept):
        if key not in changed:
            kept.pop(key)
    kept.update(changed)
    kept.setdefault("farm:999", changed["farm:1"])
    del kept["farm:999"]
    assert kept.combined == combined_digest(dict(changed)) != combined_digest(dict(first))
    kept.clear()
    assert kept.combined == combined_digest({})


def test_a_farm_that_does_not_count_its_bytes_leaves_no_counting_on_any_packet():
    """``count_bytes`` off: the farm has no traffic counter and no element in the counter maps, and when no farm
    counts, the forward hook (a base chain every forwarded packet enters) is not there at all; its connections
    are still counted in the nat chains. A local farm loses its input and output hooks the same way."""
    uncounted = replace(WEB, count_bytes=False)
    unit = compiler.compile_farm(uncounted)
    counters = [c["add"]["counter"]["name"] for c in unit.creates if "counter" in c["add"]]
    assert counters and not [name for name in counters if name.startswith("traffic-")]
    assert compiler.names.backend_chain_name(uncounted, 1) in counters  # new connections, per backend
    assert not [c for c in unit.creates if "element" in c["add"] and c["add"]["element"]["name"].startswith("traffic")]
    assert set(compiler.compile_hooks([uncounted])) == {"hook:prerouting", "hook:postrouting"}
    # beside a farm that counts, the hook stays for that farm's packets only (its elements)
    other = replace(DNS6, id=20, name="d")
    assert "hook:forward" in compiler.compile_hooks([uncounted, other])
    # nftlb's "forward" log still needs the hook, without the counting rules
    logged = compiler.compile_hooks([replace(uncounted, log_forward=True)])["hook:forward"]
    assert "traffic4_in" not in json.dumps(logged.creates) and compiler.names.LOG_FORWARD_MAP in json.dumps(
        logged.creates
    )
    local = replace(LOCAL, count_bytes=False)
    assert set(compiler.compile_hooks([local])) == {"hook:prerouting", "hook:guard"}
    assert not [c for c in compiler.compile_farm(local).creates if "traffic" in json.dumps(c)]
