"""Issue 39, item 8: every value that reaches keepalived's or conntrackd's file is checked in ``clean()`` against
that engine's grammar, so a cluster PUT the worker would refuse is refused with the field named and nothing
saved; values keepalived can carry whole (a password with ``#``, ``!`` or a space) reach it whole; and, proved on
random values (hypothesis), whatever ``clean()`` accepts the engines take with its meaning intact
(``tests/support/cluster_engines.py``: ``keepalived -t``, keepalived's dump, conntrackd's parser).

The API tests run in a namespace with the node's interfaces (``tests.cluster.test_cluster_api.node``).
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings

from cluster.engine_check import CheckFailed, check_conntrackd, check_keepalived
from cluster.models import Cluster, Node
from compiler.cluster import grammar, render
from dataplane.cluster.applier import build_spec
from farms.models import AuditEvent
from tests.cluster.test_cluster_api import node  # noqa: F401 (a fixture)
from tests.support.cluster_engines import (
    CONNTRACKD_FIELDS,
    KEEPALIVED_FIELDS,
    EngineLab,
    body,
    examples,
    keepalived_dump,
    parse,
    validation_errors,
)
from tests.support.lab_ha import reachable_dir

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]
in_node = pytest.mark.usefixtures("node")
EXAMPLES = 300  # 25 s on a quiet machine, about a minute under load: half pass validation, each runs keepalived twice
BUDGET_SECONDS = 120


def put(client, values: dict):
    return client.put("/api/v1/cluster/", body(values), format="json")


def saved() -> tuple:
    cluster = Cluster.load()
    nodes = list(Node.objects.order_by("name").values("name", "address", "sync_address", "priority"))
    return cluster.auth_pass, cluster.interface, cluster.track_interfaces, nodes, AuditEvent.objects.count()


@pytest.mark.parametrize(
    ("values", "field", "words"),
    [
        ({"auth_pass": "a\n}\n}\nx"}, "auth_pass", "Printable ASCII"),  # was keywords in keepalived's parser
        ({"auth_pass": 'a"b'}, "auth_pass", "double quote"),
        ({"auth_pass": "ab "}, "auth_pass", "either end"),
        ({"auth_pass": "}"}, "auth_pass", "end of the block"),  # found by bench/fuzz: the block ended there
        ({"nodes[1].address": "fe80::1%eth0"}, "nodes[1].address", "scope id"),
        ({"nodes[1].address": "2001:2::12"}, "nodes[1].address", "one family"),  # a v6 node, a v4 peer
        ({"nodes[1].sync_address": "2001:2:0:3::2"}, "nodes[1].sync_address", "one family"),  # conntrackd's
        ({"nodes[1].name": "n2\n}"}, "nodes[1].name", "host name"),
        ({"nodes[1].name": "n{2}"}, "nodes[1].name", "host name"),
        ({"management_address": "2001:2::100/64"}, "management_address", "family"),
        ({"sync_interface": "beef"}, "sync_interface", "conntrackd reads"),
        ({"interface": "lo"}, "interface", "loopback"),
        ({"track_interfaces": "eth9"}, "track_interfaces", "Not an interface of this node"),  # keepalived -t's
    ],
)
@in_node
def test_what_an_engine_would_refuse_is_refused_with_its_field_and_nothing_is_saved(client, values, field, words):
    assert put(client, {}).status_code == 200
    before = saved()
    response = put(client, values)
    assert response.status_code == 400, response.content
    assert words in " ".join(response.json().get(field, [])), response.json()
    assert saved() == before


@pytest.mark.parametrize("password", ["ab#cdefg", "ab!cdefg", "ab cd"])
@in_node
def test_a_password_with_comment_marks_or_a_space_reaches_keepalived_whole(client, password, tmp_path):
    """keepalived reads '#' and '!' as a comment and a space as the end of the word: unquoted, 'ab#cdefg' was the
    password 'ab'. The worker's file for it, run by keepalived: its dump shows the password as typed."""
    assert put(client, {"auth_pass": password}).status_code == 200
    cluster = Cluster.load()
    local, peer = Node.objects.get(name="n1"), Node.objects.get(name="n2")
    spec = build_spec(cluster, local, peer, tmp_path, ROOT)
    path = tmp_path / "keepalived.conf"
    path.write_text(render.keepalived_conf(replace(spec, handler=("/usr/bin/true",))))  # no plan here to run
    assert parse(keepalived_dump(path, tmp_path))["Password"] == password


@in_node
def test_vrrp3_adverts_of_more_than_a_second_are_written_as_keepalived_takes_them(client, tmp_path):
    """conntrackd's check runs every whole second: keepalived refused 'interval 2.5' in the worker's file, after the
    PUT had said 200."""
    response = put(client, {"vrrp_version": 3, "auth_pass": "", "advert_interval": 2.5})
    assert response.status_code == 200, response.content
    spec = build_spec(Cluster.load(), Node.objects.get(name="n1"), Node.objects.get(name="n2"), tmp_path, ROOT)
    with reachable_dir("lbweb-advert") as work:
        (work / "keepalived.conf").write_text(render.keepalived_conf(spec))
        check_keepalived(work / "keepalived.conf")  # raises on a refusal


@in_node
def test_a_value_the_grammar_misses_is_still_refused_by_the_engine_before_it_is_saved(client, monkeypatch):
    """The API asks keepalived and conntrackd themselves, as the worker does: with a rule of the grammar missing
    (here: the loopback as VRRP interface), keepalived -t's refusal is the answer, and nothing is saved."""
    monkeypatch.setattr(grammar, "vrrp_interface_problem", grammar.interface_problem)
    assert put(client, {}).status_code == 200
    before = saved()
    response = put(client, {"interface": "lo"})
    assert response.status_code == 400, response.content
    assert "keepalived -t refused keepalived.conf" in response.json()["__all__"][0]
    assert "loopback" in response.json()["__all__"][0]
    assert saved() == before


@pytest.fixture(scope="module")
def engines():
    if os.geteuid() != 0:
        pytest.fail("needs root (a network namespace)")
    with EngineLab("prop", enter=False) as lab:
        yield lab


def test_whatever_clean_accepts_the_engines_take_with_its_meaning_intact(engines):
    """Random printable and unicode values (and those of issue 39) in each field that reaches either file, one
    field at a time: each value ``clean()`` accepts passes ``keepalived -t`` and conntrackd's parser, keepalived's
    dump shows the value given, and no value adds a word, a line, an instance or a block."""
    counts = {"accepted": 0, "refused": 0}
    started = time.monotonic()

    @hypothesis_settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )
    @given(examples({**KEEPALIVED_FIELDS, **CONNTRACKD_FIELDS}))
    def example(values):
        if validation_errors(values):
            counts["refused"] += 1
            return
        counts["accepted"] += 1
        for engine in ("keepalived_verdict", "conntrackd_verdict"):
            verdict = engines.run(lambda lab, engine=engine: getattr(lab, engine)(values))
            assert verdict.ok, f"{engine} {values!r}: {verdict.message}"

    example()
    assert time.monotonic() - started < BUDGET_SECONDS, "the short run outgrew its budget: lower EXAMPLES"
    assert counts["accepted"] >= EXAMPLES // 4, f"too few values got through validation to prove anything: {counts}"


def test_each_word_the_grammar_keeps_from_conntrackd_is_one_of_its_own(engines):
    """``conntrackd_word_problem`` refuses conntrackd's keywords, patterns and short hex words as interface names:
    each is proved to be a syntax error to conntrackd 1.4.7 itself, so none is refused for nothing; and the
    neighbours it lets through are names to conntrackd ('persistent': its pattern wants a capital T at the end)."""
    patterns = ["on", "ON", "off", "Yes", "no", "alarm", "FTFW", "nack", "NoTrack", "persistenT", "PERSISTENT"]
    words = [*sorted(grammar.CONNTRACKD_KEYWORDS), *patterns, "a", "F00", "beef"]
    base = render.conntrackd_conf(engines.spec({}))
    not_refused = []
    for word in words:
        assert grammar.conntrackd_word_problem(word), word
        path = engines.dir / "conntrackd.conf"
        path.write_text(base.replace("Interface sync0", f"Interface {word}"))
        try:
            engines.run(lambda _lab, path=path: check_conntrackd(path))
            not_refused.append(word)
        except CheckFailed as exc:
            if "syntax error" not in exc.detail:
                not_refused.append(f"{word}: {exc.detail}")
    assert not_refused == []
    for name in ("persistent", "only", "beef0", "eth9", "TCPx", "Interfaces"):
        assert grammar.conntrackd_word_problem(name) is None, name
        path.write_text(base.replace("Interface sync0", f"Interface {name}"))
        with pytest.raises(CheckFailed, match=f"{name} is an invalid interface"):  # read as a name: not here
            engines.run(lambda _lab, path=path: check_conntrackd(path))
