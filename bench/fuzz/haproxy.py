"""HAProxy's fields (the plug-in interface is in ``bench/fuzz/__init__.py``): every value an operator types that
``compiler/haproxy/config.py`` writes into HAProxy's configuration.

One example is four HTTP farms, every field at a neutral value (a marker such as ``X-Fuzz-m03q``); each drawn value
goes into its field alone and the model's ``full_clean()`` accepts or refuses it, as every path (API, pages,
import) runs it on a write (a refused value leaves the marker). The rows stay in memory, so an example costs two
HAProxy processes and no database write. The configuration is rendered and checked three ways:

(a) ``haproxy -c``, exactly as the worker checks it (``dataplane.l7.engine.check``);
(b) meaning: each accepted value is read back from the configuration as HAProxy's manual says it reads it
    (``haproxy_words``), and HAProxy itself is asked what it made of it (``haproxy_live``): headers an echo
    receives and the client gets, the cookie it sets and honours, the stick-table key, the SNI, the Location of a
    redirect, the patterns of its ACLs;
(c) nothing new: the configuration with the markers written back is the same, word for word, except where a
    marker was, and has the same lines and the same number of words on each.
"""

from __future__ import annotations

import base64
import re
import shutil
import string
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from django.core.exceptions import ValidationError
from hypothesis import strategies as st

from compiler.haproxy.config import render
from compiler.haproxy.spec import EngineSpec, FarmSpec, HeaderRule, RedirectRule, ServerSpec, ServiceSpec
from dataplane.l7.engine import ConfigError
from dataplane.l7.engine import check as haproxy_check
from l7.models import HttpService, L7Backend, L7Farm

from . import Outcome
from .haproxy_live import LiveHAProxy
from .haproxy_words import Unreadable, fetch_argument, log_format_text, words
from .text import hostile, prefixed

NAME = "haproxy"
CERTIFICATE = Path(__file__).resolve().parents[2] / "tests" / "support" / "fixtures" / "l7" / "example.pem"
TOKEN = string.ascii_letters + string.digits + "!#$%&'*+-.^_`|~"
VALUE = string.ascii_letters + string.digits + " !\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~é€"
HOSTS = string.ascii_lowercase + string.digits + "-.* "
HOST_NAME = string.ascii_letters + string.digits + "-."
REGEX = string.ascii_letters + string.digits + "\\()[]{}?*+.|^$-:<>=!,#'\" "
PATH = string.ascii_letters + string.digits + "-._~!$&'()*+,;=:@/%"
URL = PATH + "?#[]"
MARKER = re.compile(r"m(\d\d)q")
# Known traps, drawn as often as each kind of random text: names HTTP or HAProxy treat apart, HAProxy's own
# keywords, and the inputs of issue 39 that were accepted and then refused by HAProxy or changed its behaviour.
HEADER_NAMES = (
    "Host", "Connection", "Cookie", "Set-Cookie", "Upgrade", "TE", "Keep-Alive", "Proxy-Connection", "Trailer",
    "Content-Length", "Transfer-Encoding", "X-Forwarded-For", "Content-Type", "Date", "Server", "Via", "Location",
    "Expect", "Authorization", "if", "unless", "-m", "-i", "--", "{", "}", "X-Real#comment", "X-Q'", "X-A\n",
    "X-$HOME", "X-${HOME}", "X-%[a]", "X-K#", "X-K'", "x-\\", ":authority",
)  # fmt: skip
HEADER_VALUES = (
    "' injected if TRUE #", "a\nlisten evil", "%[env(HOME)]", "100%", "%%", "${HOME}", "$HOME", "\\", '\\"', "#",
    " x", "x ", "", "é€", "\t", "{ ssl_fc }", "\\x41", "\\n",
)  # fmt: skip
COOKIES = ("LB#x", "LB'x", "LBX\n", "LB x", "$Version", "insert", "LB=x", "LB;x", "LB,x", "é", "LB!x", "-i", "X" * 33)
SNIS = (
    "a.test b.test", "a.test\nlisten evil", "A.Test", "xn--t-9ga.test", "*.x.test", "198.18.0.1", "-a.test", "a..b",
    "a.test.", "a" * 64 + ".test", "é.test", "a_b.test", "a.test)", "a,b", "\u212a.test", "a.test\u00a0b.test",
)  # fmt: skip
REGEXES = (
    "(?a)x", "\\N{DIGIT ONE}", "(a)\\1", "-x", "$", "\\", ".*", "(?i)X", "a{2,1}", "(?<n>x)\\k<n>", "\\p{L}",
    "[[:alpha:]]", "(*UTF)x", "(*LIMIT_MATCH=1)a+", "é", "^(www\\.)?example\\.com$", "\\Qa\\E", "(?#c)x",
    "x#y", "x'y", 'x"y', "${HOME}", "%[x]", "(?x) a # b", "a\\z", "\\x{41}", "(?|(a)|(b))",
)  # fmt: skip
URLS = (
    "/x%[", "/x%[env(LBWEB_VAR_DIR)]", "/%%", "https://a.test/#f", "/a b", "/é", "//h.test/p", "javascript:x", "/\\",
    "/", "/a?b", "/#", "/a%20b", "https://a.test/?q=%25", "x", "/a\"b", "/a'b", "/a{b}",
)  # fmt: skip


def plain(word: str) -> str:
    return word


@dataclass(frozen=True)
class Field:
    """A fuzzed field: its marker (valid, unique), the text drawn for it, and how a configuration word holding it
    reads back (bare or quoted: as it is; a log-format string; a sample fetch's argument)."""

    number: int
    marker: str
    strategy: st.SearchStrategy[str]
    read: Callable[[str], str] = plain


def _field(
    number: int, template: str, alphabet: str, samples=(), read=plain, prefix: str = "", max_size: int = 40
) -> Field:
    text = hostile(alphabet, max_size=max_size, samples=samples)
    return Field(number, template.format(f"m{number:02d}q"), prefixed(prefix, text) if prefix else text, read)


SPEC = {
    "request_header_name": _field(1, "X-Fuzz-{}", TOKEN, HEADER_NAMES),
    "request_header_value": _field(2, "fuzz-{}", VALUE, HEADER_VALUES, log_format_text),
    "deleted_header_name": _field(3, "X-Fuzz-{}", TOKEN, HEADER_NAMES),
    "response_header_name": _field(4, "X-Fuzz-{}", TOKEN, HEADER_NAMES),
    "response_header_value": _field(5, "fuzz-{}", VALUE, HEADER_VALUES, log_format_text),
    "hosts": _field(
        6, "{}.fuzz.test", HOSTS, SNIS + ("a.test\tb.test", "A.TEST  *.b.test", " ".join(SNIS)), max_size=80
    ),
    "host_regex": _field(7, "{}", REGEX, REGEXES),
    "path_prefix": _field(8, "/{}", PATH, URLS, prefix="/"),
    "cookie_name": _field(9, "COOKIE-{}", TOKEN, COOKIES),
    "service_header_name": _field(10, "X-Fuzz-{}", TOKEN, HEADER_NAMES),
    "service_header_value": _field(11, "fuzz-{}", VALUE, HEADER_VALUES, log_format_text),
    "persistence_header": _field(12, "X-Fuzz-{}", TOKEN, HEADER_NAMES, lambda word: fetch_argument(word, "req.hdr")),
    "tls_sni": _field(13, "{}.fuzz.test", HOST_NAME, SNIS, lambda word: fetch_argument(word, "str")),
    "redirect_target": _field(14, "/{}", URL, URLS, log_format_text, prefix="/"),
    "redirect_path_prefix": _field(15, "/{}", PATH, URLS, prefix="/"),
}
FIELDS = tuple(SPEC)
BY_NUMBER = {field.number: name for name, field in SPEC.items()}
NEUTRAL = {name: field.marker for name, field in SPEC.items()}


def available() -> str | None:
    return None if shutil.which("haproxy") else "haproxy is not installed"


def values() -> st.SearchStrategy[dict[str, object]]:
    return st.fixed_dictionaries({name: field.strategy for name, field in SPEC.items()})


# -- the farms, as clean() leaves them --------------------------------------------------------------------------


def _farm_headers(v: dict) -> list[dict]:
    return [
        {"direction": "request", "name": v["request_header_name"], "value": "fuzz"},
        {"direction": "request", "name": "X-Fuzz-Value", "value": v["request_header_value"]},
        {"direction": "request", "name": v["deleted_header_name"]},
        {"direction": "response", "name": v["response_header_name"], "value": "fuzz"},
        {"direction": "response", "name": "X-Fuzz-Value", "value": v["response_header_value"]},
    ]


def _service_headers(v: dict) -> list[dict]:
    return [
        {"direction": "request", "name": v["service_header_name"], "value": "fuzz"},
        {"direction": "response", "name": "X-Fuzz-Service", "value": v["service_header_value"]},
    ]


def _redirects(v: dict) -> list[dict]:
    return [
        {"path_prefix": "/fuzz-location", "target": v["redirect_target"], "code": 302, "keep_path": False},
        {"path_prefix": "/fuzz-prefix", "target": v["redirect_target"], "code": 302, "keep_path": True},
        {"path_prefix": v["redirect_path_prefix"], "target": "/fuzz-target", "code": 302, "keep_path": False},
    ]


SERVICES = {"a": 11, "b": 12, "c": 13, "d": 14, "e": 15}
FARMS = {"headers": 1, "sticky": 2, "tls": 3, "redirects": 4}


def _service_values(name: str, v: dict) -> dict:
    return {
        "a": {"position": 1, "hosts": v["hosts"], "path_prefix": "/fz-a"},
        "b": {"position": 2, "host_regex": v["host_regex"], "path_prefix": "/fz-b"},
        "c": {"position": 3, "hosts": "c.fuzz.test", "path_prefix": v["path_prefix"]},
        "d": {
            "position": 4,
            "persistence": "cookie",
            "cookie_name": v["cookie_name"],
            "headers": _service_headers(v),
        },  # fmt: skip
        "e": {"persistence": "header", "persistence_header": v["persistence_header"]},
    }[name]


def _clean(instance, exclude: list[str]):
    """What every path runs on a write (the services' ``full_clean()``) but for the rows it belongs to: the
    field's checks and the model's ``clean()``."""
    instance.full_clean(exclude=exclude, validate_unique=False, validate_constraints=False)
    return instance


CLEAN: dict[str, Callable[[dict], object]] = {
    "farm headers": lambda v: _clean(L7Farm(headers=_farm_headers(v)), ["farm", "default_certificate"]),
    "redirects": lambda v: _clean(L7Farm(redirects=_redirects(v)), ["farm", "default_certificate"]),
    **{
        key: (lambda v, key=key: _clean(HttpService(name=key, **_service_values(key, v)), ["farm"])) for key in SERVICES
    },
    "tls": lambda v: _clean(L7Backend(tls=True, tls_sni=v["tls_sni"]), ["backend", "service"]),
}
CLEAN_OF = {
    **{name: "farm headers" for name in FIELDS if name.startswith(("request_", "response_", "deleted_"))},
    "hosts": "a",
    "host_regex": "b",
    "path_prefix": "c",
    "cookie_name": "d",
    "service_header_name": "d",
    "service_header_value": "d",
    "persistence_header": "e",
    "tls_sni": "tls",
    "redirect_target": "redirects",
    "redirect_path_prefix": "redirects",
}


def _message(exc: ValidationError) -> str:
    if hasattr(exc, "error_dict"):
        return "; ".join(f"{key}: {' '.join(msgs)}" for key, msgs in exc.message_dict.items())
    return " ".join(exc.messages)


def validate(drawn: dict[str, object], outcome: Outcome) -> dict[str, object]:
    """Each drawn value checked in its field alone (the other fields as accepted so far); returns the values the
    configuration holds, a refused field keeping its marker."""
    current = dict(NEUTRAL)
    for name in FIELDS:
        attempt = {**current, name: drawn[name]}
        try:
            CLEAN[CLEAN_OF[name]](attempt)
        except ValidationError as exc:
            outcome.refused[name] = _message(exc)
            continue
        current = attempt
        outcome.accepted[name] = drawn[name]
    return current


def _header_rules(rules: list[dict]) -> tuple[HeaderRule, ...]:
    return tuple(HeaderRule(r["direction"], r["name"], r.get("value")) for r in rules)  # as l7/specs.py reads them


def _redirect_rules(rules: list[dict]) -> tuple[RedirectRule, ...]:
    return tuple(RedirectRule(r["path_prefix"], r["target"], r["code"], r["keep_path"]) for r in rules)


def _servers(*ids: int, **options) -> tuple[ServerSpec, ...]:
    return tuple(ServerSpec(id=i, address=f"198.18.1.{i % 200}", port=80, **options) for i in ids)


def engine_spec(v: dict) -> tuple[EngineSpec, dict[str, object]]:
    """The four farms of an example, from the rows ``clean()`` leaves, read as ``l7/specs.py`` reads rows into the
    generator's spec; and the values as stored (``clean()`` writes the host list lower case, single-spaced)."""
    options, redirects = CLEAN["farm headers"](v), CLEAN["redirects"](v)
    rows = {key: CLEAN[key](v) for key in SERVICES}
    backend = CLEAN["tls"](v)

    def service(key: str, servers: tuple[ServerSpec, ...]) -> ServiceSpec:
        row = rows[key]
        return ServiceSpec(
            id=SERVICES[key], name=key, hosts=tuple(row.hosts.split()), host_regex=row.host_regex,
            path_prefix=row.path_prefix, persistence=row.persistence, persistence_header=row.persistence_header,
            cookie_name=row.cookie_name, servers=servers, headers=_header_rules(row.headers),
        )  # fmt: skip

    farm = {"mode": "http", "vip": "198.18.100.1", "forwarded_headers": False}
    farms = (
        FarmSpec(
            FARMS["headers"], "fuzz-headers", ports=(80,), headers=_header_rules(options.headers),
            services=(*(service(k, ()) for k in "abc"), service("d", _servers(101, 102))), **farm,
        ),
        FarmSpec(FARMS["sticky"], "fuzz-sticky", ports=(81,), services=(service("e", _servers(103)),), **farm),
        FarmSpec(
            FARMS["tls"], "fuzz-tls", ports=(82,), **farm,
            services=(ServiceSpec(-FARMS["tls"], "default", servers=_servers(104, tls=True, tls_sni=backend.tls_sni)),),
        ),
        FarmSpec(
            FARMS["redirects"], "fuzz-redirects", ports=(83,), redirects=_redirect_rules(redirects.redirects),
            **farm,
        ),
    )  # fmt: skip
    kept = {
        "hosts": rows["a"].hosts, "host_regex": rows["b"].host_regex, "path_prefix": rows["c"].path_prefix,
        "cookie_name": rows["d"].cookie_name, "persistence_header": rows["e"].persistence_header,
        "tls_sni": backend.tls_sni,
    }  # fmt: skip
    return EngineSpec(farms=farms), kept


# -- the checks ---------------------------------------------------------------------------------------------------


def check(drawn: dict[str, object]) -> Outcome:
    outcome = Outcome()
    current = validate(drawn, outcome)
    spec, kept = engine_spec(current)
    for name, value in kept.items():
        expected = " ".join(str(current[name]).lower().split()) if name == "hosts" else current[name]
        if value != expected:
            outcome.meaning_lost[name] = f"typed {current[name]!r}, stored {value!r}"
    try:
        haproxy_check(spec)
    except ConfigError as exc:
        outcome.engine_refusal = str(exc)
        return outcome
    # The same farms with each accepted value back at its marker, but for those that shape the configuration, which
    # stay as they are: hosts (a list: its acl lines follow its length), an empty value of an optional field (no
    # SNI, no regex: no words at all) and a path prefix of "/" (every path: no acl).
    keep = {"hosts"} | {name for name in FIELDS if current[name] == ""}
    keep |= {"path_prefix"} if current["path_prefix"] == "/" else set()
    neutral, _ = engine_spec({name: (current[name] if name in keep else NEUTRAL[name]) for name in FIELDS})
    scratch = Path(tempfile.mkdtemp(prefix="lbweb-fuzz-haproxy-"))
    try:
        compare(render(neutral, str(scratch)).config, render(spec, str(scratch)).config, current, keep, outcome)
        ask_haproxy(spec, scratch, current, outcome)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return outcome


def _lines(text: str) -> list[tuple[str, list[str] | Unreadable]]:
    out = []
    for line in text.split("\n"):
        try:
            read = words(line)
        except Unreadable as exc:
            read = exc
        if read:
            out.append((line, read))
    return out


def _fields_in(word: str) -> list[str]:
    return [BY_NUMBER[int(n)] for n in MARKER.findall(word) if int(n) in BY_NUMBER]


def compare(neutral: str, fuzzed: str, current: dict, keep: set[str], outcome: Outcome) -> None:
    """(c) and the first half of (b): line by line, word by word, against the configuration with the markers."""
    before, after = _lines(neutral), _lines(fuzzed)
    lost = outcome.meaning_lost
    if len(before) != len(after):
        lost["configuration"] = f"{len(after)} lines where the markers give {len(before)}:\n{fuzzed}"
        return
    for (line_n, words_n), (line_f, words_f) in zip(before, after, strict=True):
        involved = sorted({name for word in words_n for name in _fields_in(word)})
        if isinstance(words_f, Unreadable) or len(words_f) != len(words_n):
            what = words_f if isinstance(words_f, Unreadable) else f"{len(words_f)} words, not {len(words_n)}"
            lost[", ".join(involved) or "configuration"] = f"{line_f!r} reads as {what!s} (markers: {line_n!r})"
            continue
        for word_n, word_f in zip(words_n, words_f, strict=True):
            names = [name for name in _fields_in(word_n) if name not in keep]
            if not names:
                if word_n != word_f:
                    lost[", ".join(involved) or "configuration"] = f"{word_f!r} where {word_n!r} was: {line_f!r}"
                continue
            read = SPEC[names[0]].read
            try:
                expected, got = read(word_n), read(word_f)
            except Unreadable as exc:
                lost[names[0]] = f"{exc} in {line_f!r}"
                continue
            for name in names:
                expected = expected.replace(SPEC[name].marker, str(current[name]))
            if got != expected:
                lost[names[0]] = f"HAProxy reads {got!r}, not {expected!r}, in {line_f!r}"


# -- (b), HAProxy's own view --------------------------------------------------------------------------------------


def _simulate(rules: list[dict], start: dict[str, bytes]) -> dict[str, bytes]:
    """Header name (lower case) -> value after ``rules`` (set replaces, no value deletes), from ``start``."""
    out = dict(start)
    for rule in rules:
        if rule.get("value") is None:
            out.pop(rule["name"].lower(), None)
        else:
            out[rule["name"].lower()] = rule["value"].encode()
    return out


def _expect_headers(where: str, got: list[tuple[str, bytes]], expected: dict[str, bytes], names: set[str], lost):
    for name in sorted(names):
        values = [value for key, value in got if key == name]
        want = [expected[name]] if name in expected else []
        if values != want:
            lost[f"{where} header {name}"] = f"HAProxy gave {values!r}, expected {want!r}"


def ask_haproxy(spec: EngineSpec, scratch: Path, v: dict, outcome: Outcome) -> None:
    lost = outcome.meaning_lost
    bundle = render(spec, str(scratch))
    with LiveHAProxy(bundle, scratch, CERTIFICATE) as haproxy:
        _headers_and_cookie(haproxy, v, lost)
        table = f"s{SERVICES['e']}"
        keys_before = haproxy.table_keys(table)
        haproxy.get(f"f{FARMS['sticky']}", "/", {"Host": "x", v["persistence_header"]: "fuzz-key"})
        keys = haproxy.table_keys(table)
        if keys_before or keys != ["fuzz-key"]:
            lost["persistence_header"] = f"the stick table holds {keys!r} after a request with the header"
        sni = haproxy.get(f"f{FARMS['tls']}", "/", {"Host": "x"})
        if sni.status != 200 or base64.b64decode(sni.body).decode(errors="replace") != v["tls_sni"]:
            lost["tls_sni"] = f"the backend saw SNI {sni.body!r} (status {sni.status})"
        _redirects_answered(haproxy, v, lost)
        _acls(haproxy, bundle.config, v, lost)


def _headers_and_cookie(haproxy: LiveHAProxy, v: dict, lost: dict) -> None:
    frontend = f"f{FARMS['headers']}"
    sent = {"host": b"d.fuzz.test", "accept-encoding": b"identity"}
    deleted = v["deleted_header_name"].lower()
    if deleted not in sent:
        sent[deleted] = b"zap"
    request_rules = [r for r in _farm_headers(v) if r["direction"] == "request"]
    request_rules += [r for r in _service_headers(v) if r["direction"] == "request"]
    # Responses: the backend's rules first (the service's), then the frontend's (the farm's).
    response_rules = [r for r in _service_headers(v) if r["direction"] == "response"]
    response_rules += [r for r in _farm_headers(v) if r["direction"] == "response"]
    answer = haproxy.get(frontend, "/fuzz-echo", {k: v_.decode() for k, v_ in sent.items()})
    if answer.status != 200:
        lost["request headers"] = f"status {answer.status} from the echo: {answer.body[:200]!r}"
        return
    request_names = {r["name"].lower() for r in request_rules}
    _expect_headers("request", haproxy.echoed(answer), _simulate(request_rules, sent), request_names, lost)
    echo_sent = {"content-type": b"text/plain"}
    response_names = {r["name"].lower() for r in response_rules}
    # The persistence cookie is inserted after every http-response rule: it is not one of the rules' Set-Cookie.
    name = v["cookie_name"]
    inserted = [
        (k, value) for k, value in answer.headers if k == "set-cookie" and value.startswith(f"{name}=".encode())
    ]
    by_rules = [pair for pair in answer.headers if pair not in inserted]
    _expect_headers("response", by_rules, _simulate(response_rules, echo_sent), response_names, lost)
    if "cookie" in request_names or v["deleted_header_name"].lower() == "cookie":
        return  # a header rule of the example rewrites the client's cookies
    cookies = [value.decode(errors="replace") for _, value in inserted]
    servers = ["b101", "b102"]
    first = cookies[0].split(";")[0].partition("=") if len(cookies) == 1 else ("", "", "")
    if first[0] != name or first[2] not in servers:
        lost["cookie_name"] = f"Set-Cookie {cookies!r}, expected {name}=<one of {servers}>"
        return
    other = next(s for s in servers if s != first[2])
    for _ in range(2):
        haproxy.get(frontend, "/fuzz-echo", {"Host": "d.fuzz.test", "Cookie": f"{name}={other}"})
    served = haproxy.sessions(f"s{SERVICES['d']}")
    if served.get(other) != 2 or served.get(first[2]) != 1:
        lost["cookie_name"] = f"requests with cookie {name}={other} were served as {served!r}"


def _redirects_answered(haproxy: LiveHAProxy, v: dict, lost: dict) -> None:
    target = v["redirect_target"]
    frontend = f"f{FARMS['redirects']}"
    for path, location in (
        ("/fuzz-location/x", target),
        ("/fuzz-prefix/x", ("" if target == "/" else target) + "/fuzz-prefix/x"),
    ):
        answer = haproxy.get(frontend, path, {"Host": "x"})
        got = answer.header("location")
        if answer.status != 302 or got != [location.encode()]:
            lost["redirect_target"] = f"GET {path} answered {answer.status} Location {got!r}, not {location!r}"


def _acls(haproxy: LiveHAProxy, config: str, v: dict, lost: dict) -> None:
    """The patterns HAProxy holds for each ACL a fuzzed value is in, against the value."""
    held = haproxy.acl_patterns()
    lines = config.split("\n")
    a, b, c = (SERVICES[k] for k in "abc")
    expect: dict[str, tuple[list[int], list[str]]] = {
        "hosts": ([], sorted(h for h in v["hosts"].lower().split())),
        "host_regex": ([], [v["host_regex"]] if v["host_regex"] else []),
        "path_prefix": ([], [v["path_prefix"]] if v["path_prefix"] not in ("", "/") else []),
        "redirect_path_prefix": ([], [v["redirect_path_prefix"]]),
    }
    for number, line in enumerate(lines, start=1):
        if line.startswith(f"    acl s{a}_host "):
            expect["hosts"][0].append(number)
        elif line.startswith(f"    acl s{b}_host "):
            expect["host_regex"][0].append(number)
        elif line.startswith(f"    acl s{c}_path "):
            expect["path_prefix"][0].append(number)
        elif "redirect" in line and "/fuzz-target" in line:
            expect["redirect_path_prefix"][0].append(number)
    for name, (numbers, wanted) in expect.items():
        got = [pattern for number in numbers for pattern in held.get(number, [])]
        if name == "hosts":
            got = sorted(("*" + p) if p.startswith(".") else p for p in got)
        if got != wanted:
            lost[name] = f"HAProxy holds the patterns {got!r}, not {wanted!r}"
