"""Every value an operator types into an HTTP farm reaches HAProxy as typed (issue 39): validation refuses what
HAProxy cannot take, and what it accepts HAProxy takes with its meaning intact and no new directive.

The property test draws hostile values for every such field (``bench/fuzz/haproxy.py``: the models' ``clean()``,
``haproxy -c``, the configuration read back word by word, and HAProxy itself asked what it made of each value);
``bench/fuzz_engines.py`` runs it long. The other tests are issue 39's own inputs, through the API and a real
HAProxy (on UNIX sockets: no packet moves).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import string
from collections import Counter

import pytest
from django.core.exceptions import ValidationError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.fuzz import Counts, haproxy
from bench.fuzz.haproxy_live import LiveHAProxy
from bench.fuzz.text import hostile
from compiler.haproxy.config import render
from compiler.haproxy.spec import EngineSpec
from dataplane.l7.engine import check
from l7 import specs, validation
from l7.models import L7Farm
from tests.l7.test_l7_api import backend, http_farm
from tests.support import l7_specs

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


# -- issue 43: retries and the PROXY protocol ---------------------------------------------------------------------

EDGE_REFUSED = [
    ({"retry_on": "503 #x"}, "retry_on"),
    ({"retry_on": "conn-failure\nlisten evil"}, "retry_on"),
    ({"retry_on": "all-retryable-errors"}, "retry_on"),
    ({"retries": 11}, "retries"),
    ({"retries": -1}, "retries"),
    ({"accept_proxy": True}, "proxy_trusted"),  # from anyone: any client would choose its own address
    ({"accept_proxy": True, "proxy_trusted": "lb.example.com"}, "proxy_trusted"),
    ({"proxy_trusted": "198.18.0.1 }"}, "proxy_trusted"),
    ({"proxy_trusted": "198.18.0.1/33"}, "proxy_trusted"),
    ({"proxy_trusted": "fe80::1%eth0"}, "proxy_trusted"),
    ({"proxy_trusted": '198.18.0.1"'}, "proxy_trusted"),
    ({"proxy_trusted": "198.18.0.1\\"}, "proxy_trusted"),
]
BACKEND_REFUSED = [
    ({"slowstart": 3601}, "slowstart"),
    ({"slowstart": -1}, "slowstart"),
    ({"passive_errors": 101}, "passive_errors"),
    ({"send_proxy": "sometimes"}, "send_proxy"),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("values", "field"), EDGE_REFUSED)
def test_bad_retry_and_proxy_options_are_field_errors_that_change_nothing(client, values, field):
    farm = http_farm(client)
    before = client.get(f"/api/v1/farms/{farm['id']}/http/").json()
    response = client.patch(f"/api/v1/farms/{farm['id']}/http/", values, format="json")
    assert response.status_code == 400 and list(response.json()) == [field], response.content
    assert client.get(f"/api/v1/farms/{farm['id']}/http/").json() == before


@pytest.mark.django_db
@pytest.mark.parametrize(("values", "field"), BACKEND_REFUSED)
def test_bad_backend_options_are_field_errors_that_change_nothing(client, values, field):
    one = backend(client, http_farm(client))
    before = client.get(f"/api/v1/backends/{one['id']}/http/").json()
    response = client.patch(f"/api/v1/backends/{one['id']}/http/", values, format="json")
    assert response.status_code == 400 and list(response.json()) == [field], response.content
    assert client.get(f"/api/v1/backends/{one['id']}/http/").json() == before


@pytest.mark.django_db
def test_retry_and_proxy_options_are_stored_as_haproxy_reads_them(client):
    farm = http_farm(client)
    values = {"retry_on": " 503  conn-failure 503 ", "accept_proxy": True, "proxy_trusted": "198.18.0.9 198.18.7.1/24"}
    response = client.patch(f"/api/v1/farms/{farm['id']}/http/", values, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["retry_on"] == "conn-failure 503"
    assert response.json()["proxy_trusted"] == "198.18.0.9/32 198.18.7.0/24"
    one = backend(client, farm)
    values = {"slowstart": 30, "passive_errors": 5, "send_proxy": True}
    assert client.patch(f"/api/v1/backends/{one['id']}/http/", values, format="json").json()["send_proxy"] is True
    text = specs.preview("/nonexistent")["diff"]
    assert "+    tcp-request connection reject unless { src 198.18.0.9/32 198.18.7.0/24 }\n" in text
    assert "+    retry-on conn-failure 503\n" in text and " accept-proxy\n" in text
    assert "send-proxy-v2 slowstart 30s check inter 1h" in text and "error-limit 5 on-error mark-down" in text


RETRY_TEXT = string.ascii_letters + string.digits + "-_ \t\n#\"'\\{}$%"
TRUSTED_TEXT = string.hexdigits + "./: %\n#\"'\\{}$"


def _cleaned(field: str, text: str) -> str | None:
    """``text`` as ``L7Farm.clean()`` stores it in ``field``, None when it is refused (at that field only)."""
    options = L7Farm(**{field: text}, accept_proxy=field == "proxy_trusted")
    try:
        options.full_clean(exclude=["farm", "default_certificate"], validate_unique=False, validate_constraints=False)
    except ValidationError as exc:
        assert list(exc.message_dict) == [field], exc.message_dict
        return None
    return getattr(options, field)


def test_retry_and_trusted_sources_reach_haproxy_as_words_it_reads_as_typed():
    """The two typed fields of issue 43 are written only in a canonical form (keywords of a closed set, addresses
    as ``ipaddress`` writes them): what validation takes, ``haproxy -c`` takes, and its line holds those words and
    no other; the rest is refused at its field."""
    from bench.fuzz.haproxy_words import words

    seen = {"retry_on": Counter(), "proxy_trusted": Counter()}

    @settings(max_examples=EXAMPLES // 3, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
    @given(
        retry_on=hostile(RETRY_TEXT, max_size=60, samples=(*validation.RETRY_ON, "503 500 conn-failure", "503 #")),
        trusted=st.one_of(
            hostile(TRUSTED_TEXT, max_size=60, samples=("198.18.0.1", "2001:2::/48 198.18.0.0/15", "::1%lo")),
            st.lists(st.ip_addresses().map(str), min_size=1, max_size=4).map(" ".join),
        ),
    )
    def example(retry_on, trusted):
        keywords, networks = _cleaned("retry_on", retry_on), _cleaned("proxy_trusted", trusted)
        seen["retry_on"]["refused" if keywords is None else "accepted"] += 1
        seen["proxy_trusted"]["refused" if not networks else "accepted"] += 1
        keywords, networks = (keywords or "").split(), (networks or "198.18.0.9/32").split()
        assert all(str(ipaddress.ip_network(n)) == n for n in networks)
        farm = dataclasses.replace(
            l7_specs.http_farm(), accept_proxy=True, proxy_trusted=tuple(networks), retry_on=tuple(keywords)
        )
        text = render(EngineSpec((farm,)), "/run/lbweb-haproxy/conf").config
        read = [words(line) for line in text.splitlines()]
        assert ["tcp-request", "connection", "reject", "unless", "{", "src", *networks, "}"] in read
        assert read.count(["retry-on", *keywords]) == (3 if keywords else 0)  # one per backend of the farm
        check(EngineSpec((farm,)))

    example()
    for name, verdicts in seen.items():  # both kinds of value, in both fields: the property is not vacuous
        assert verdicts["accepted"] >= 5 and verdicts["refused"] >= 5, (name, verdicts)
