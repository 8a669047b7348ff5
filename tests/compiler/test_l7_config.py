"""The HAProxy configuration generator (compiler/haproxy/config.py): golden files, determinism, purity, and HAProxy's
own verdict (``haproxy -c``) on every file it writes; the split between runtime changes and reloads."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest

from compiler.haproxy import config
from compiler.haproxy.spec import EngineSpec, FarmSpec, HeaderRule, RedirectRule, ServerSpec, ServiceSpec
from dataplane.l7.engine import BASE_CONFIG, ConfigError, check, runtime_view, structure
from tests import support
from tests.support import l7_specs

GOLDEN = support.GOLDEN / "l7"
UPDATE = os.environ.get("LBWEB_UPDATE_GOLDEN") == "1"
BASE = "/run/lbweb-haproxy/conf"
SPECS = {
    "full": l7_specs.full,
    "edge": l7_specs.edge,
    "http": lambda: EngineSpec((l7_specs.http_farm(),)),
    "empty": EngineSpec,
}


@pytest.mark.parametrize("name", SPECS)
def test_golden_files(name):
    bundle = config.render(SPECS[name](), BASE)
    for path, text in bundle.files.items():
        if path.startswith("certs/"):
            continue  # the operator's PEM, copied as it is
        golden = GOLDEN / name / path
        if UPDATE or not golden.exists():
            golden.parent.mkdir(parents=True, exist_ok=True)
            golden.write_bytes(text.encode())
        assert text.encode() == golden.read_bytes(), (
            f"{golden} differs: run with LBWEB_UPDATE_GOLDEN=1 after checking the change"
        )


def test_deterministic_and_keys_marked_secret():
    first, second = config.render(l7_specs.full(), BASE), config.render(l7_specs.full(), BASE)
    assert first.files == second.files and first.digest() == second.digest()
    assert first.secret == {"certs/c1.pem", "certs/c2.pem"}


def test_pure_no_django():
    code = (
        "import sys, compiler.haproxy.config, dataplane.l7.engine, dataplane.l7.runtime; print('django' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=BASE_CONFIG.parents[1]
    )
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("name", SPECS)
def test_haproxy_accepts_every_generated_configuration(name):
    check(SPECS[name]())  # raises ConfigError with HAProxy's alerts


def test_haproxy_refusal_is_reported_with_its_words():
    farm = dataclasses.replace(
        l7_specs.http_farm(), services=(ServiceSpec(9, "bad", host_regex="(unclosed", servers=()),)
    )
    with pytest.raises(ConfigError, match="regex|missing"):
        check(EngineSpec((farm,)))


def test_values_are_quoted_and_percent_escaped():
    text = config.render(EngineSpec((l7_specs.http_farm(),)), BASE).config
    assert 'http-request set-header X-Lb "lbweb 100%% \\"quoted\\""' in text


def _with_server(spec: EngineSpec, **changes) -> EngineSpec:
    farm = spec.farms[0]
    service = farm.services[0]
    server = dataclasses.replace(service.servers[0], **changes)
    service = dataclasses.replace(service, servers=(server, *service.servers[1:]))
    return dataclasses.replace(spec, farms=(dataclasses.replace(farm, services=(service, *farm.services[1:])),))


@pytest.mark.parametrize(
    "changes",
    [{"weight": 7}, {"state": "drain"}, {"state": "disabled"}, {"healthy": False}, {"capacity": 3}, {"capacity": None}],
)
def test_weight_state_health_capacity_are_runtime_changes(changes):
    spec = EngineSpec((l7_specs.http_farm(),))
    changed = _with_server(spec, **changes)
    assert structure(spec) == structure(changed)
    assert runtime_view(spec) != runtime_view(changed)


@pytest.mark.parametrize("changes", [{"port": 81}, {"address": "198.18.1.13"}, {"priority": 2}, {"tls": True}])
def test_other_server_changes_need_a_reload(changes):
    spec = EngineSpec((l7_specs.http_farm(),))
    assert structure(spec) != structure(_with_server(spec, **changes))


def test_a_farm_without_services_still_loads():
    check(EngineSpec((FarmSpec(5, "bare", "http", "198.18.100.5", (80,)),)))


def test_server_line_states():
    service = ServiceSpec(1, "s")
    assert config.server_line(ServerSpec(1, "198.18.1.11", 80, state="drain", weight=5), service).startswith(
        "server b1 198.18.1.11:80 weight 0"
    )
    assert " disabled" in config.server_line(ServerSpec(1, "198.18.1.11", 80, healthy=False), service)


def test_a_long_host_list_fits_haproxys_64_words_a_line():
    """HAProxy reads at most 64 words a line: 100 host names go on several acl lines of one name (an OR)."""
    hosts = tuple(f"h{i}.example.com" for i in range(100)) + tuple(f"*.w{i}.example.com" for i in range(70))
    farm = dataclasses.replace(l7_specs.http_farm(), services=(ServiceSpec(9, "many", hosts=hosts, servers=()),))
    text = config.render(EngineSpec((farm,)), BASE).config
    lines = [line for line in text.splitlines() if line.startswith("    acl s9_host")]
    assert len(lines) == 4 + 3 and all(len(line.split()) <= 64 for line in lines)
    check(EngineSpec((farm,)))


def test_typed_values_stay_words_haproxy_reads_as_typed():
    """Issue 39, items 2 and 3: values that ended a quote, started a comment or an expression."""
    from bench.fuzz.haproxy_words import fetch_argument, log_format_text, words

    service = ServiceSpec(
        9, "odd", host_regex="-i", persistence="header", persistence_header="X-K#'$", servers=(),
        headers=(HeaderRule("request", "X-Real#comment"), HeaderRule("request", "X-Q'", "' injected if TRUE #")),
    )  # fmt: skip
    farm = dataclasses.replace(
        l7_specs.http_farm(), services=(service,), headers=(), redirects=(RedirectRule("/x", "/x%[env(HOME)]"),)
    )
    text = config.render(EngineSpec((farm,)), BASE).config
    read = {tuple(words(line)[:3]): words(line) for line in text.splitlines() if words(line)}
    assert read[("http-request", "del-header", "X-Real#comment")] == ["http-request", "del-header", "X-Real#comment"]
    assert read[("http-request", "set-header", "X-Q'")] == [
        "http-request",
        "set-header",
        "X-Q'",
        "' injected if TRUE #",
    ]
    assert fetch_argument(read[("stick", "on", 'req.hdr("X-K#\'$")')][2], "req.hdr") == "X-K#'$"
    (redirect,) = [w for key, w in read.items() if key[:2] == ("http-request", "redirect")]
    assert log_format_text(redirect[3]) == "/x%[env(HOME)]"
    (acl,) = [w for key, w in read.items() if key[:2] == ("acl", "s9_host")]
    assert acl[-2:] == ["--", "-i"]  # a pattern, not the ignore-case flag
    check(EngineSpec((farm,)))


def test_a_value_past_validation_still_cannot_add_a_line_or_a_word():
    """Validation refuses these; the generator's escaping holds on its own all the same (a row written by hand, or
    before a rule existed): every value stays one word on its line."""
    from bench.fuzz.haproxy_words import fetch_argument, words

    evil = "a\nlisten evil\n"
    service = ServiceSpec(
        9, "odd", hosts=("b.test\nlisten evil",), persistence="cookie", cookie_name="LB#x" + evil,
        servers=(ServerSpec(91, "198.18.1.11", 443, tls=True, tls_sni="s.test) if TRUE" + evil),),
        headers=(HeaderRule("request", "X-A" + evil, evil),),
    )  # fmt: skip
    farm = dataclasses.replace(l7_specs.http_farm(), services=(service,), headers=(), redirects=())
    text = config.render(EngineSpec((farm,)), BASE).config
    clean = dataclasses.replace(
        service, hosts=("b.test",), cookie_name="LB", headers=(HeaderRule("request", "X-A", "a"),),
        servers=(ServerSpec(91, "198.18.1.11", 443, tls=True, tls_sni="s.test"),),
    )  # fmt: skip
    reference = config.render(EngineSpec((dataclasses.replace(farm, services=(clean,)),)), BASE).config
    assert [len(words(line)) for line in text.split("\n")] == [len(words(line)) for line in reference.split("\n")]
    assert "\nlisten" not in text
    read = [words(line) for line in text.split("\n")]
    assert ["http-request", "set-header", "X-A" + evil, evil] in read
    assert ["cookie", "LB#x" + evil, "insert", "indirect", "nocache", "httponly"] in read
    (server,) = [w for w in read if w[:2] == ["server", "b91"]]
    assert fetch_argument(server[-1], "str") == "s.test) if TRUE" + evil


def test_ports_beyond_what_a_farm_binds_are_said_not_bound():
    """Issue 39, item 6: the first MAX_PORTS ports are bound, the rest are named in the configuration (and the farm's
    status, ``dataplane.l7.applier.unserved``), never silently dropped."""
    from l7.specs import MAX_PORTS, _not_bound, _ports

    bound, beyond = _ports("80,9001-9100")
    assert len(bound) == MAX_PORTS and bound[:2] == (80, 9001) and bound[-1] == 9063
    assert beyond == "9064-9100"
    assert _ports("1-65535")[1] == "65-65535" and _ports("80,443") == ((80, 443), "")
    assert _not_bound("9064-9100", "8001") == "ports 9064-9100 and redirect ports 8001"
    farm = dataclasses.replace(l7_specs.http_farm(), ports=bound, unbound_ports=_not_bound(beyond))
    text = config.render(EngineSpec((farm,)), BASE).config
    assert "    bind 198.18.100.1:9063\n    # not bound, beyond the ports an HTTP farm binds: ports 9064-9100\n" in text
    check(EngineSpec((farm,)))
