"""Every DSR combination the API accepts compiles to a document libnftables accepts (checked by nft, no traffic)."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import uuid

import pytest

import compiler
from compiler import dsr
from compiler.spec import BackendSpec, FarmSpec

SCHEDULERS = {"rr": (), "weight": (), "hash": ("srcip", "srcport"), "hash-addr": ("srcip",), "symhash": ()}


def combinations() -> list[FarmSpec]:
    specs = []
    for n, (protocol, family, (scheduler, fields), weights) in enumerate(
        itertools.product(("tcp", "udp", "sctp", "all"), (4, 6), SCHEDULERS.items(), ((1, 1), (1, 3)))
    ):
        scheduler = scheduler.removesuffix("-addr")
        if protocol != "udp" and scheduler not in ("hash", "symhash"):
            continue  # refused by validation: a connection must be hashed
        if protocol == "all" and "srcport" in fields:
            continue  # refused by validation: no ports to hash
        address = "198.18.2.{}" if family == 4 else "2001:2:0:2::{}"
        specs.append(
            FarmSpec(
                id=n,
                name=f"m{n}",
                vip="198.18.102.1" if family == 4 else "2001:2:0:102::1",
                protocol=protocol,
                ports=() if protocol == "all" else ((514, 514), (1000, 2000)),
                mode="dsr",
                scheduler=scheduler,
                sched_param=fields,
                interface="d0",
                interface_mac="02:00:00:00:00:01",
                backends=tuple(
                    BackendSpec(i, address.format(10 + i), weight=w, mac=f"02:00:00:00:00:1{i}")
                    for i, w in enumerate(weights)
                ),
            )
        )
    return specs


@pytest.fixture
def netns_with_d0():
    if os.geteuid() != 0:
        pytest.fail("nft --check in a namespace needs root")
    name = f"lbt-dsr-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "-n", name, "link", "add", "d0", "type", "veth", "peer", "name", "d1"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def test_every_dsr_combination_is_accepted_by_nft(netns_with_d0):
    specs = combinations()
    commands = [c for spec in specs for c in dsr.compile_farm(spec, f"farm:{spec.id}").creates]
    cmd = ["ip", "netns", "exec", netns_with_d0, "nft", "--check", "-j", "-f", "-"]
    result = subprocess.run(cmd, input=json.dumps(compiler.document(commands)), capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert len(specs) > 30


def test_fragment_rules_only_where_a_datagram_could_be_split():
    for spec in combinations():
        ingress, farm = [], []
        for command in dsr.compile_farm(spec, "k").creates:
            rule = command.get("add", {}).get("rule")
            if rule:
                (ingress if rule["chain"] == "ingress" else farm).append(json.dumps(rule["expr"]))
        address_hash = spec.scheduler == "hash" and "srcport" not in spec.sched_param
        # UDP: later fragments (no port) are let in; a port-less "all" farm lets them in anyway
        assert sum("frag" in r for r in ingress) == (spec.protocol == "udp"), spec
        # every fragment of a datagram goes to one backend, unless the farm already hashes addresses only
        expected = spec.protocol in ("udp", "all") and not address_hash
        assert sum("frag" in r for r in farm) == expected, spec
