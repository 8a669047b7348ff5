"""BGP's pure generator (``compiler/bgp``): golden BIRD files that BIRD itself accepts (``bird -p``), the route
health injection decisions with their reasons, and the generator's refusals of values BIRD would misread."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from bgp.engine_check import CheckFailed, check_bird, check_text
from compiler.bgp import grammar, render, routes
from compiler.bgp.routes import FarmState
from compiler.bgp.spec import BgpSpec, PeerSpec, RouteSpec
from tests.support import GOLDEN

UPDATE = os.environ.get("LBWEB_UPDATE_GOLDEN") == "1"

FARMS = [
    FarmState("web", "198.18.100.1", True, False, True, 2, med=10, communities=((65000, 100), (65000, 1, 2))),
    FarmState("web-tls", "198.18.100.1", True, False, True, 1),  # the same VIP, other ports: one route
    FarmState("dns6", "2001:2:0:100::53", True, False, True, 1, communities=((65000, 6),)),
    FarmState("off", "198.18.100.2", False, False, True, 1),
    FarmState("broken", "198.18.100.3", True, True, True, 1),
    FarmState("new", "198.18.100.4", True, False, False, 1),
    FarmState("down", "198.18.100.5", True, False, True, 0),
    FarmState("quiet", "198.18.100.6", True, False, True, 1, announce=False),
]
PEERS = (
    PeerSpec(1, "198.18.40.2", 65001, password="md5 # {k}; !x", hold_time=9, keepalive_time=3),
    PeerSpec(2, "2001:2:0:40::2", 4200000000, multihop=2, bfd=False, source_address="2001:2:0:40::1"),
)


def spec(drained: bool = False, elapsed: float = 0.0) -> BgpSpec:
    announced, _why = routes.decide(FARMS, drained=drained, drain_elapsed=elapsed, drain_seconds=30)
    return BgpSpec("198.18.40.1", 65000, PEERS, announced, bfd_interval_ms=100, bfd_multiplier=3)


def golden(name: str, produced: str) -> None:
    path = GOLDEN / name
    if UPDATE or not path.exists():
        path.write_text(produced)
    assert produced == path.read_text(), f"{path} differs: run with LBWEB_UPDATE_GOLDEN=1 after checking the change"


@pytest.mark.parametrize(
    ("name", "drained", "elapsed"),
    [("bgp-bird.conf", False, 0.0), ("bgp-bird-draining.conf", True, 5.0), ("bgp-bird-drained.conf", True, 31.0)],
)
def test_golden_files_that_bird_accepts(name, drained, elapsed):
    text = render.bird_conf(spec(drained, elapsed))
    golden(name, text)
    check_bird(GOLDEN / name)
    assert render.bird_conf(spec(drained, elapsed)) == text  # deterministic


def test_each_farm_has_its_reason():
    _routes, why = routes.decide(FARMS, drained=False, drain_elapsed=0, drain_seconds=30)
    assert why == {
        "broken": "withdrawn: the farm failed to apply on this node",
        "dns6": "announced",
        "down": "withdrawn: no backend takes new connections",
        "new": "withdrawn: this node's kernel does not hold the farm yet",
        "off": "withdrawn: the farm is off",
        "quiet": "withdrawn: the farm is not announced by BGP (its setting)",
        "web": "announced",
        "web-tls": "announced",
    }


def test_vips_are_host_routes_with_their_farms_attributes():
    announced, _ = routes.decide(FARMS, drained=False, drain_elapsed=0, drain_seconds=30)
    assert announced == (
        RouteSpec("198.18.100.1/32", 10, ((65000, 100), (65000, 1, 2))),
        RouteSpec("2001:2:0:100::53/128", None, ((65000, 6),)),
    )


def test_a_drained_node_sends_graceful_shutdown_first_then_withdraws():
    draining, why = routes.decide(FARMS, drained=True, drain_elapsed=29.9, drain_seconds=30)
    assert all(r.graceful_shutdown and grammar.GRACEFUL_SHUTDOWN in r.communities for r in draining)
    assert len(draining) == 2 and why["web"].startswith("announced with graceful shutdown")
    gone, why = routes.decide(FARMS, drained=True, drain_elapsed=30, drain_seconds=30)
    assert gone == () and why["web"] == "withdrawn: the node is drained"
    assert why["down"] == "withdrawn: no backend takes new connections"  # its own reason comes first


def test_bird_refuses_what_the_generator_would_never_write():
    with pytest.raises(CheckFailed, match="Unterminated string"):
        check_text('router id 1.2.3.4;\nprotocol bgp x { local as 1; neighbor 1.2.3.5 as 2; password "a\n"; }\n')


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda s: replace(s, router_id="0.0.0.0"), "router id"),
        (lambda s: replace(s, local_asn=0), "local AS"),
        (lambda s: replace(s, bfd_interval_ms=5), "BFD"),
        (lambda s: replace(s, peers=(replace(PEERS[0], password='a"; import all; "'),)), "double quote"),
        (lambda s: replace(s, peers=(replace(PEERS[0], password="a\n}"),)), "Printable ASCII"),
        (lambda s: replace(s, peers=(replace(PEERS[0], address="198.18.40.2; import all"),)), "peer address"),
        (lambda s: replace(s, peers=(replace(PEERS[0], hold_time=2),)), "hold time"),
        (lambda s: replace(s, peers=(replace(PEERS[0], keepalive_time=4),)), "keepalive"),
        (lambda s: replace(s, peers=(replace(PEERS[1], source_address="198.18.40.1"),)), "family"),
        (lambda s: replace(s, peers=(PEERS[0], replace(PEERS[1], key=1))), "one key"),
        (lambda s: replace(s, routes=(RouteSpec("198.18.100.0/24"),)), "host route"),
        (lambda s: replace(s, routes=(RouteSpec("198.18.100.1/32", communities=((70000, 1),)),)), "community"),
        (lambda s: replace(s, routes=(RouteSpec("198.18.100.1/32", med=-1),)), "MED"),
    ],
)
def test_the_generator_refuses_a_value_bird_would_misread(change, words):
    with pytest.raises(ValueError, match=words):
        render.bird_conf(change(spec()))


def test_communities_parse_as_written():
    assert grammar.parse_communities("65000:100, 65000:1:2 65000:100") == ((65000, 100), (65000, 1, 2))
    for bad, words in (("65000", "ASN:VALUE"), ("65536:1", "0 to 65535"), ("1:2:4294967296", "each part")):
        with pytest.raises(ValueError, match=words):
            grammar.parse_communities(bad)
