"""Every value that reaches BIRD's file is checked in ``clean()`` against BIRD's grammar (``compiler.bgp.grammar``):
bad input gets a field-level error from the API and changes nothing; the TCP-MD5 password is write-only; and,
proved on random values (hypothesis), whatever ``clean()`` accepts BIRD takes (``bird -p``) with its meaning
intact (a running BIRD shows each route's MED and communities as typed), and no value adds a directive."""

from __future__ import annotations

import ipaddress
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
from django.core.exceptions import ValidationError
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from bgp.engine_check import check_text
from bgp.models import BgpPeer, BgpSettings, FarmAnnouncement
from compiler.bgp import render
from compiler.bgp.spec import BgpSpec, PeerSpec, RouteSpec
from farms.models import AuditEvent, Farm

pytestmark = pytest.mark.django_db
EXAMPLES = 150
HOSTILE = ["a\nb", "a}", "a{", 'a"b', "a;b", "a#b", "a/*b*/", "a\\", "é", "\t", " a", 'include "/etc/passwd";']


@pytest.fixture
def enabled(client):
    response = client.patch("/api/v1/bgp/", {"enabled": True, "router_id": "198.18.40.1"}, format="json")
    assert response.status_code == 200, response.content
    return client


def saved() -> tuple:
    peers = list(BgpPeer.objects.values())
    return peers, list(FarmAnnouncement.objects.values()), BgpSettings.load().local_asn, AuditEvent.objects.count()


PEER = {"name": "r1", "address": "198.18.40.2", "asn": 65001}


@pytest.mark.parametrize(
    ("url", "values", "field", "words"),
    [
        ("/api/v1/bgp/peers/", {"asn": 0}, "asn", "AS number"),
        ("/api/v1/bgp/peers/", {"asn": 2**32}, "asn", "AS number"),
        ("/api/v1/bgp/peers/", {"asn": 23456}, "asn", "AS_TRANS"),
        ("/api/v1/bgp/peers/", {"address": "198.18.40.2\n}"}, "address", "IPv4 or IPv6"),
        ("/api/v1/bgp/peers/", {"address": "fe80::1%eth0"}, "address", "scope id"),
        ("/api/v1/bgp/peers/", {"address": "127.0.0.1"}, "address", "unicast"),
        ("/api/v1/bgp/peers/", {"source_address": "2001:2:0:40::1"}, "source_address", "one family"),
        ("/api/v1/bgp/peers/", {"password": 'pa"ss'}, "password", "double quote"),
        ("/api/v1/bgp/peers/", {"password": "pa\nss"}, "password", "Printable ASCII"),
        ("/api/v1/bgp/peers/", {"password": "pass "}, "password", "either end"),
        ("/api/v1/bgp/peers/", {"password": "x" * 81}, "password", "80"),
        ("/api/v1/bgp/peers/", {"hold_time": 2}, "hold_time", "3 to 65535"),
        ("/api/v1/bgp/peers/", {"hold_time": 9, "keepalive_time": 4}, "keepalive_time", "third of the hold"),
        ("/api/v1/bgp/peers/", {"multihop": 256}, "multihop", "TTL"),
        ("/api/v1/bgp/peers/", {"multihop": 2, "bfd": True}, "source_address", "multihop session with BFD"),
        ("/api/v1/bgp/peers/", {"name": "r 1;"}, "name", ""),
    ],
)
def test_bad_peer_values_get_a_field_error_and_change_nothing(enabled, url, values, field, words):
    before = saved()
    response = enabled.post(url, {**PEER, **values}, format="json")
    assert response.status_code == 400, response.content
    assert words in " ".join(response.json().get(field, [])), response.json()
    assert saved() == before


@pytest.mark.parametrize(
    ("values", "field", "words"),
    [
        ({"local_asn": 0}, "local_asn", "AS number"),
        ({"router_id": "2001:2::1"}, "router_id", "IPv4 address"),
        ({"router_id": "0.0.0.0"}, "router_id", "zero"),
        ({"router_id": "1.2.3.4;}"}, "router_id", "IPv4 address"),
        ({"bfd_interval_ms": 5}, "bfd_interval_ms", "10 to 10000"),
        ({"bfd_multiplier": 0}, "bfd_multiplier", "1 to 255"),
    ],
)
def test_bad_settings_get_a_field_error_and_change_nothing(enabled, values, field, words):
    before = saved()
    response = enabled.patch("/api/v1/bgp/", values, format="json")
    assert response.status_code == 400, response.content
    assert words in " ".join(response.json().get(field, [])), response.json()
    assert saved() == before


@pytest.mark.parametrize(
    ("values", "field", "words"),
    [
        ({"communities": "65000:100 nope"}, "communities", "ASN:VALUE"),
        ({"communities": "65536:1"}, "communities", "0 to 65535"),
        ({"communities": "65000:1;\n}"}, "communities", "ASN:VALUE"),
        ({"med": 2**32}, "med", "MED"),
    ],
)
def test_bad_announcement_values_get_a_field_error_and_change_nothing(enabled, values, field, words):
    farm = Farm.objects.create(name="web", vip="198.18.100.1", ports="80")
    before = saved()
    response = enabled.patch(f"/api/v1/bgp/farms/{farm.pk}/", values, format="json")
    assert response.status_code == 400, response.content
    assert words in " ".join(response.json().get(field, [])), response.json()
    assert saved() == before


def test_an_announcement_is_saved_normalised_and_audited(enabled):
    farm = Farm.objects.create(name="web", vip="198.18.100.1", ports="80")
    response = enabled.patch(f"/api/v1/bgp/farms/{farm.pk}/", {"communities": "65000:1, 65000:1:2", "med": 5},
                             format="json")  # fmt: skip
    assert response.status_code == 200, response.content
    assert response.json() == {"farm": "web", "announce": True, "med": 5, "communities": "65000:1 65000:1:2"}
    event = AuditEvent.objects.latest("id")
    assert (event.action, event.object_type, event.farm_ref) == ("update", "farmannouncement", farm.pk)


def test_the_password_is_write_only_kept_when_omitted_and_cleared_by_an_empty_one(enabled):
    response = enabled.post("/api/v1/bgp/peers/", {**PEER, "password": "s3cret # {x}"}, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert "password" not in body and body["password_set"] is True
    url = f"/api/v1/bgp/peers/{body['id']}/"
    assert enabled.patch(url, {"hold_time": 30, "keepalive_time": 10}, format="json").json()["password_set"] is True
    assert BgpPeer.objects.get().password == "s3cret # {x}"
    assert "s3cret" not in str(AuditEvent.objects.latest("id").after)
    assert enabled.patch(url, {"password": ""}, format="json").json()["password_set"] is False


def test_a_drain_is_audited_and_kept(enabled):
    response = enabled.post("/api/v1/bgp/drain/", {"drained": True}, format="json")
    assert response.status_code == 200 and response.json()["drained"] is True and response.json()["drained_at"]
    assert AuditEvent.objects.latest("id").action == "drain"
    assert enabled.post("/api/v1/bgp/drain/", {"drained": False}, format="json").json()["drained"] is False


# -- proved on random values: clean() accepts => BIRD reads the value, whole, as that value ------------------

STRING = re.compile(r'"([^"\n]*)"')  # BIRD's lexer (cf-lex.l): a string is one token, with no escapes
SPEC = BgpSpec("198.18.40.1", 65000, (), (RouteSpec("198.18.100.1/32"),))  # no peer: each configure is done at once


def _directives(text: str) -> int:
    """Statements and blocks of a BIRD file, strings left out (what a value must never add)."""
    bare = STRING.sub('""', text)
    return bare.count(";") + bare.count("{")


def _peer_problem(**values) -> dict | None:
    peer = BgpPeer(**{**PEER, **values})
    try:
        peer.clean_fields()
        peer.clean()
    except ValidationError as exc:
        return exc.message_dict
    return None


texts = st.one_of(st.text(max_size=90), st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126)),
                  st.sampled_from(HOSTILE))  # fmt: skip


def _with_password(password: str) -> BgpSpec:
    return BgpSpec("198.18.40.1", 65000, (PeerSpec(1, "198.18.40.2", 65001, password=password),))


@hypothesis_settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(password=texts)
def test_any_password_clean_accepts_reaches_bird_whole_and_adds_nothing(password):
    if _peer_problem(password=password):
        with pytest.raises(ValueError, match="password"):  # the generator refuses it too
            render.bird_conf(_with_password(password))
        return
    text = render.bird_conf(_with_password(password))
    check_text(text)
    if password:
        assert password in STRING.findall(text)  # read back by BIRD's own string rule: the whole value
        assert _directives(text) == _directives(render.bird_conf(_with_password("x")))


PEERS_BASE = PeerSpec(1, "198.18.40.2", 65001, password="x")


@hypothesis_settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    address=st.one_of(st.ip_addresses().map(str), texts),
    asn=st.integers(min_value=-1, max_value=2**32 + 1),
    hold=st.integers(min_value=-1, max_value=70000),
    keepalive=st.integers(min_value=-1, max_value=70000),
    multihop=st.integers(min_value=0, max_value=300),
)
def test_any_peer_clean_accepts_bird_accepts(address, asn, hold, keepalive, multihop):
    values = dict(address=address, asn=asn, hold_time=hold, keepalive_time=keepalive, multihop=multihop)
    if _peer_problem(**values):
        return
    address = str(ipaddress.ip_address(address))
    peer = PeerSpec(1, address, asn, hold_time=hold, keepalive_time=keepalive, multihop=multihop)
    check_text(render.bird_conf(BgpSpec("198.18.40.1", 65000, (peer,))))


@hypothesis_settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(router_id=st.one_of(st.ip_addresses(v=4).map(str), texts), asn=st.integers(-1, 2**32 + 1),
       interval=st.integers(0, 20000), multiplier=st.integers(0, 300))  # fmt: skip
def test_any_settings_clean_accepts_bird_accepts(router_id, asn, interval, multiplier):
    settings = BgpSettings(enabled=True, router_id=router_id, local_asn=asn, bfd_interval_ms=interval,
                           bfd_multiplier=multiplier)  # fmt: skip
    try:
        settings.clean_fields()
        settings.clean()
    except ValidationError:
        return
    spec = BgpSpec(router_id, asn, (PEERS_BASE,), bfd_interval_ms=interval, bfd_multiplier=multiplier)
    check_text(render.bird_conf(spec))


class Bird:
    """One BIRD daemon in a namespace of its own, with no peer: what it holds is read back with birdc."""

    def __init__(self, tmp: Path):
        self.netns = f"lbt-bgpf-{os.getpid()}"
        self.conf, self.sock = tmp / "bird.conf", tmp / "bird.ctl"
        subprocess.run(["ip", "netns", "add", self.netns], check=True)
        self.conf.write_text(render.bird_conf(SPEC))
        self.proc = subprocess.Popen(["ip", "netns", "exec", self.netns, "/usr/sbin/bird", "-f", "-c",
                                      str(self.conf), "-s", str(self.sock)], stderr=subprocess.DEVNULL)  # fmt: skip
        deadline = time.monotonic() + 10
        while not self.sock.exists():
            assert time.monotonic() < deadline, "BIRD did not start"
            time.sleep(0.05)

    def birdc(self, *words: str) -> str:
        return subprocess.run(["birdc", "-s", str(self.sock), *words], capture_output=True, text=True,
                              check=True, timeout=10).stdout  # fmt: skip

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)
        subprocess.run(["ip", "netns", "del", self.netns], check=False)


@pytest.fixture(scope="module")
def bird(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.fail("needs root (a network namespace)")
    daemon = Bird(tmp_path_factory.mktemp("bgp-fields"))
    yield daemon
    daemon.close()


@hypothesis_settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(communities=st.one_of(texts, st.lists(st.tuples(st.integers(0, 65536), st.integers(0, 65536))).map(
    lambda cs: " ".join(f"{a}:{b}" for a, b in cs))), med=st.one_of(st.none(), st.integers(-1, 2**32)))  # fmt: skip
def test_any_community_and_med_clean_accepts_a_running_bird_holds_as_typed(bird, communities, med):
    row = FarmAnnouncement(farm=Farm(name="web", vip="198.18.100.1"), communities=communities, med=med)
    try:
        row.clean()
    except ValidationError:
        return
    parsed = row.parsed_communities()
    route = RouteSpec("198.18.100.1/32", med, parsed)
    bird.conf.write_text(render.bird_conf(BgpSpec("198.18.40.1", 65000, (), (route,))))
    assert "Reconfigured" in bird.birdc("configure")
    shown = bird.birdc("show", "route", "all", "198.18.100.1/32")
    standard = [c for c in parsed if len(c) == 2]
    large = [c for c in parsed if len(c) == 3]
    assert (f"BGP.med: {med}" in shown) == (med is not None)
    if standard:
        assert "BGP.community: " + " ".join(f"({a},{b})" for a, b in standard) in shown
    if large:
        assert "BGP.large_community: " + " ".join(f"({a}, {b}, {c})" for a, b, c in large) in shown
    assert not standard or "BGP.community" in shown
    assert large or "BGP.large_community" not in shown
