"""Every value an operator types into an HTTP farm reaches HAProxy as typed (issue 39): validation refuses what
HAProxy cannot take, and what it accepts HAProxy takes with its meaning intact and no new directive.

The property test draws hostile values for every such field (``bench/fuzz/haproxy.py``: the models' ``clean()``,
``haproxy -c``, the configuration read back word by word, and HAProxy itself asked what it made of each value);
``bench/fuzz_engines.py`` runs it long. The other tests are issue 39's own inputs, through the API and a real
HAProxy (on UNIX sockets: no packet moves).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings

from bench.fuzz import Counts, haproxy
from bench.fuzz.haproxy_live import LiveHAProxy
from compiler.haproxy.config import render
from dataplane.l7.engine import check
from l7 import specs
from tests.l7.test_l7_api import backend, http_farm

# About 50 s on a 2-core machine (0.3 s an example: two haproxy processes, one -c and one serving), 3 minutes on
# one loaded by other work: bounded by the count, not a clock, and well inside pytest's 300 s.
EXAMPLES = int(os.environ.get("LBWEB_FUZZ_EXAMPLES", "150"))


def test_every_value_validation_accepts_haproxy_takes_as_typed():
    counts = Counts()

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,  # the same examples on every run: CI stays stable; the bench explores
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(haproxy.values())
    def example(values):
        outcome = haproxy.check(values)
        counts.add(outcome)
        assert outcome.ok, outcome.describe()

    example()
    print(counts.as_dict(), counts.by_field)
    for name in haproxy.FIELDS:  # every field saw values of both kinds: the property is not vacuous
        verdicts = counts.by_field[name]
        assert verdicts["accepted"] >= EXAMPLES // 5 and verdicts["refused"] >= EXAMPLES // 10, (name, verdicts)


# -- issue 39's inputs, through the API and a real HAProxy ---------------------------------------------------------


def serving(tmp_path):
    """HAProxy serving what the database holds, after the worker's own check."""
    spec = specs.snapshot()[1]
    check(spec)
    return LiveHAProxy(render(spec, str(tmp_path)), tmp_path, haproxy.CERTIFICATE)


@pytest.mark.django_db
def test_header_rules_mean_what_was_typed(client, tmp_path):
    """Item 3: ``X-Real#comment`` deleted ``X-Real``; ``X-Q'`` with ``' injected if TRUE #`` made the value the
    rule's condition. Item 2: ``X-K#`` and ``X-A'`` were accepted and HAProxy refused them."""
    farm = http_farm(client)
    backend(client, farm)
    rules = [
        {"direction": "request", "name": "X-Q'", "value": "' injected if TRUE #"},
        {"direction": "request", "name": "X-Real#comment"},
        {"direction": "request", "name": "X-K#", "value": "hash"},
        {"direction": "response", "name": "X-A'", "value": "100% $HOME %[env(HOME)] \\n"},
    ]
    response = client.patch(
        f"/api/v1/farms/{farm['id']}/http/", {"headers": rules, "forwarded_headers": False}, format="json"
    )
    assert response.status_code == 200, response.content
    with serving(tmp_path) as engine:
        answer = engine.get(f"f{farm['id']}", "/", {"Host": "x", "X-Real": "kept", "X-Real#comment": "dropped"})
        echoed = dict(engine.echoed(answer))
        assert echoed["x-q'"] == b"' injected if TRUE #"
        assert echoed["x-real"] == b"kept" and "x-real#comment" not in echoed
        assert echoed["x-k#"] == b"hash"
        assert answer.header("x-a'") == [b"100% $HOME %[env(HOME)] \\n"]


@pytest.mark.django_db
def test_redirect_targets_are_literal(client, tmp_path):
    """Item 3: ``/x%[env(LBWEB_VAR_DIR)]`` was evaluated (Location ``/x/run/lbweb-app/var``); item 2: ``/x%[`` was
    accepted and HAProxy refused it."""
    farm = http_farm(client)
    redirects = [
        {"path_prefix": "/env", "target": "/x%[env(LBWEB_VAR_DIR)]", "code": 302},
        {"path_prefix": "/open", "target": "/x%[", "code": 301},
        {"path_prefix": "/keep", "target": "https://example.com/a%20b", "code": 308, "keep_path": True},
    ]
    response = client.patch(f"/api/v1/farms/{farm['id']}/http/", {"redirects": redirects}, format="json")
    assert response.status_code == 200, response.content
    with serving(tmp_path) as engine:
        for path, status, location in (
            ("/env", 302, b"/x%[env(LBWEB_VAR_DIR)]"),
            ("/open", 301, b"/x%["),
            ("/keep/c", 308, b"https://example.com/a%20b/keep/c"),
        ):
            answer = engine.get(f"f{farm['id']}", path, {"Host": "x"})
            assert (answer.status, answer.header("location")) == (status, [location])


@pytest.mark.django_db
def test_a_persistence_header_with_a_hash_or_a_quote_keeps_its_clients(client, tmp_path):
    """Item 2: ``persistence_header`` ``X-K#`` or ``X-K'`` was accepted and HAProxy refused it."""
    farm = http_farm(client)
    made = client.post(
        "/api/v1/http-services/",
        {"farm": farm["id"], "name": "sticky", "persistence": "header", "persistence_header": "X-K#'"},
        format="json",
    )
    assert made.status_code == 201, made.content
    one = backend(client, farm)
    response = client.patch(f"/api/v1/backends/{one['id']}/http/", {"service": made.json()["id"]}, format="json")
    assert response.status_code == 200, response.content
    with serving(tmp_path) as engine:
        assert engine.get(f"f{farm['id']}", "/", {"Host": "x", "X-K#'": "client-7"}).status == 200
        assert engine.table_keys(f"s{made.json()['id']}") == ["client-7"]
