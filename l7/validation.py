"""Rules for HTTP and HTTPS farms and their options. Pure (no Django import): the models' ``clean()`` call these
and raise the field-keyed errors they return, so the UI, the API and the configuration import refuse the same input
with the same words.

Every value here ends up in HAProxy's configuration, so each is held to what HAProxy takes there and means the same
to it (its configuration manual, section 2.2, "Quoting and escaping"; ``compiler/haproxy/config.py`` writes them):
a character HAProxy cannot carry in a field is refused, never dropped or changed. Values the generator quotes
(header names and values, paths, redirect targets, regexes) may hold quotes, ``#``, ``$`` or backslashes; names it
writes bare (cookie names, SNI host names) take only characters that mean nothing to HAProxy's parser. Patterns are
compiled by PCRE2, HAProxy's engine (``l7/pcre2.py``), not by Python's ``re``. Checks match whole values
(``fullmatch``): a ``$`` in a Python pattern also matches before a final line break.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata

from compiler.haproxy.config import ERROR_REASONS
from compiler.ports import PortSyntaxError, parse_ports

from . import pcre2

TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # an HTTP header name (RFC 9110 token)
# A cookie name HAProxy writes bare: an RFC 6265 token without '#' (a comment there) or "'" (a quote), and not
# starting with '$' (HAProxy skips such cookies as attributes: $Version, $Path).
COOKIE = re.compile(r"[!%&*+.^_`|~0-9A-Za-z-][!$%&*+.^_`|~0-9A-Za-z-]*")
COOKIE_CHARACTER = re.compile(r"[!$%&*+.^_`|~0-9A-Za-z-]")
LABEL = r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"
HOST = re.compile(rf"(\*\.)?({LABEL}\.)*{LABEL}")
HOST_NAME = re.compile(rf"({LABEL}\.)*{LABEL}")
HOST_CHARACTER = re.compile(r"[A-Za-z0-9.-]")
ASCII = re.compile(r"[\x00-\x7f]")
# RFC 3986: what a path and a URL hold unencoded ('%' of percent-encoding included), as clients send them
PATH_CHARACTERS = re.compile(r"[A-Za-z0-9._~!$&'()*+,;=:@/%-]+")
URL_CHARACTERS = re.compile(r"[A-Za-z0-9._~!$&'()*+,;=:@/%?#\[\]-]+")
ABSOLUTE_OR_PATH = re.compile(r"(/|[A-Za-z][A-Za-z0-9+.-]*:)")
REGEX_CHARACTERS = re.compile(r"[\x20-\x7e]+")
MAX_PORTS = 64  # HAProxy listens on each port of an HTTP farm (one socket each): a range stays small
MAX_HEADER_NAME = 256
MAX_HEADER_VALUE = 1000
MAX_URL = 2000
# Headers HAProxy writes itself: the message's framing, and TE, which it keeps from servers (hop by hop, but for
# "trailers"). A rule setting one is dropped or breaks the message.
OWN_HEADERS = frozenset({"content-length", "transfer-encoding", "te"})
L4_ONLY = {
    "source_addr": "",
    "source_ports": "",
    "new_rtlimit": 0,
    "rst_rtlimit": 0,
    "helper": "",
    "flow_offload": False,
    "interface": "",
    "tcp_strict": False,
}
REDIRECT_CODES = (301, 302, 303, 307, 308)
ERROR_STATUSES = tuple(ERROR_REASONS)  # the statuses HAProxy's errorfile takes and lbweb names
CHARACTER_NAMES = {
    " ": "a space", "\t": "a tab", "\n": "a line break", "\r": "a carriage return", "'": "a quote (')",
    '"': 'a double quote (")',
}  # fmt: skip


def character(text: str, allowed: re.Pattern) -> str:
    """The first character of ``text`` outside ``allowed``, named for a message ("a line break (character 4)")."""
    for i, c in enumerate(text):
        if not allowed.fullmatch(c):
            name = CHARACTER_NAMES.get(c) or (f"'{c}'" if c.isprintable() and c.isascii() else f"U+{ord(c):04X}")
            return f"{name} (character {i + 1})"
    return "nothing"


def unprintable(text: str) -> str | None:
    """The first control character (C0, DEL, C1) or lone surrogate of ``text``, named; None if there is none.
    HAProxy's configuration cannot carry a line break, and a surrogate is not even UTF-8."""
    for i, c in enumerate(text):
        if unicodedata.category(c) in ("Cc", "Cs"):
            return f"{CHARACTER_NAMES.get(c) or f'U+{ord(c):04X}'} (character {i + 1})"
    return None


def l7_farm_errors(farm, e: dict[str, str]) -> None:
    """A farm of mode http/https: TCP on the ports HAProxy binds, routing settings in its services, no kernel-only
    options."""
    if farm.protocol != "tcp":
        e["protocol"] = "HTTP and HTTPS farms are TCP."
    if farm.scheduler != "rr" or farm.sched_param:
        e["scheduler"] = "HTTP farms choose backends per service (its scheduler); leave the farm's at rr."
    if farm.persistence:
        e["persistence"] = "HTTP farms keep clients per service (cookie, source, header); leave the farm's empty."
    for name, default in L4_ONLY.items():
        if getattr(farm, name) != default:
            e[name] = f"{name} applies to kernel (L4) farms only."
    if farm.when_all_down != "reject" or farm.fallback_address:
        e["when_all_down"] = "An HTTP farm without a serving backend answers 503 (its error page)."
    if "ports" not in e:
        problem = listen_ports_errors(farm.ports)
        if problem:
            e["ports"] = problem


def listen_ports_errors(ports: str) -> str | None:
    """HAProxy binds each port an HTTP farm lists: at least one (it has no "every port"), at most ``MAX_PORTS``.
    Syntax errors are the farm's own check's to report."""
    try:
        ranges = parse_ports(ports)
    except PortSyntaxError:
        return None
    if not ranges:
        return "HAProxy listens on the ports an HTTP farm lists (it has no 'every port'): give them, e.g. 80."
    return port_count_errors(ranges)


def port_count_errors(ranges: list[tuple[int, int]]) -> str | None:
    count = sum(high - low + 1 for low, high in ranges)
    if count > MAX_PORTS:
        return (
            f"HAProxy listens on each port of an HTTP farm: at most {MAX_PORTS} ports, and these are {count}. "
            f"List the ports the farm serves (a range of up to {MAX_PORTS} ports, or a few single ports)."
        )
    return None


def header_name_errors(name) -> str | None:
    if not isinstance(name, str) or not name:
        return "give the header's name."
    if len(name) > MAX_HEADER_NAME:
        return f"a header name of at most {MAX_HEADER_NAME} characters."
    if not TOKEN.fullmatch(name):
        return f"a header name is letters, digits and !#$%&'*+-.^_`|~ (RFC 9110), without {character(name, TOKEN)}."
    if name.lower() in OWN_HEADERS:
        return f"HAProxy writes {name} itself (it frames each message hop by hop): a rule cannot set or delete it."
    return None


def header_value_errors(value) -> str | None:
    if not isinstance(value, str):
        return "the value is text (leave it out to delete the header)."
    if not value:
        return "HAProxy cannot set a header to nothing: give a value, or leave value out to delete the header."
    if len(value) > MAX_HEADER_VALUE:
        return f"a value of at most {MAX_HEADER_VALUE} characters."
    bad = unprintable(value)
    if bad:
        return f"a header value cannot hold {bad}."
    if value != value.strip(" "):
        return "HTTP drops the spaces around a header's value: take them out."
    return None


def header_rules_errors(rules) -> str | None:
    """``rules``: [{"direction": "request"|"response", "name": ..., "value": ... or absent to delete}]."""
    if not isinstance(rules, list):
        return "A list of {direction, name, value} objects."
    for i, rule in enumerate(rules):
        if not isinstance(rule, dict) or set(rule) - {"direction", "name", "value"}:
            return f"Rule {i + 1}: an object with direction, name and (to set) value."
        if rule.get("direction") not in ("request", "response"):
            return f"Rule {i + 1}: direction is 'request' or 'response'."
        problem = header_name_errors(rule.get("name"))
        if problem is None and rule.get("value") is not None:
            problem = header_value_errors(rule["value"])
        if problem:
            return f"Rule {i + 1}: {problem}"
    return None


def url_errors(text, what: str, path: bool = False) -> str | None:
    """A path (``path``: starting with /, without query or fragment) or a URL (absolute, or a path) as clients send
    it: the characters of RFC 3986, everything else percent-encoded (HAProxy compares and writes bytes: a path
    prefix with a space or an é would never match what clients send, a Location with them is not a URL)."""
    if not isinstance(text, str) or not text:
        return f"give the {what}."
    allowed = PATH_CHARACTERS if path else URL_CHARACTERS
    if path and not text.startswith("/"):
        return f"the {what} starts with /."
    if not path and not ABSOLUTE_OR_PATH.match(text):
        return f"the {what} is a URL (https://example.com/new) or a path (/new), not {text[:40]!r}."
    if len(text) > MAX_URL:
        return f"the {what} has at most {MAX_URL} characters."
    if not allowed.fullmatch(text):
        return (
            f"the {what} holds only the characters of a URL (RFC 3986): percent-encode the rest (%20 for a space, "
            f"%22 for a quote, %C3%A9 for é); not {character(text, allowed)}."
        )
    return None


def redirect_rules_errors(rules) -> str | None:
    """``rules``: [{"path_prefix": "/old", "target": "https://...", "code": 301, "keep_path": false}]. A ``%`` in
    a target is kept literal (the generator doubles it: HAProxy reads the target as a log-format string)."""
    if not isinstance(rules, list):
        return "A list of {path_prefix, target, code, keep_path} objects."
    for i, rule in enumerate(rules):
        if not isinstance(rule, dict) or set(rule) - {"path_prefix", "target", "code", "keep_path"}:
            return f"Redirect {i + 1}: an object with path_prefix, target, code and keep_path."
        problem = url_errors(rule.get("path_prefix"), "path prefix", path=True) or url_errors(
            rule.get("target"), "target"
        )
        if problem:
            return f"Redirect {i + 1}: {problem}"
        code = rule.get("code", 302)
        if isinstance(code, bool) or not isinstance(code, int) or code not in REDIRECT_CODES:
            return f"Redirect {i + 1}: code is one of {', '.join(map(str, REDIRECT_CODES))}."
        if not isinstance(rule.get("keep_path", False), bool):
            return f"Redirect {i + 1}: keep_path is true or false."
    return None


def error_pages_errors(pages) -> str | None:
    """``pages``: {"503": "<html>...</html>", ...}."""
    if not isinstance(pages, dict):
        return "An object: status code -> HTML."
    for status, body in pages.items():
        if not str(status).isdigit() or int(status) not in ERROR_STATUSES:
            return f"Status {ascii(status)}: one of {', '.join(map(str, ERROR_STATUSES))}."
        if not isinstance(body, str) or len(body.encode(errors="replace")) > 16000:
            return f"Status {status}: HTML text of at most 16,000 bytes."
        if any(unicodedata.category(c) == "Cs" for c in body):
            return f"Status {status}: the page is not valid text (a lone surrogate)."
    return None


def hosts_errors(hosts: str) -> str | None:
    """Host names separated by spaces, each exact or a wildcard ``*.example.com``: checked as typed, before the
    model joins them with single spaces (a control character is refused, not taken for a space)."""
    bad = unprintable(hosts)
    if bad:
        return f"Host names are separated by spaces, without {bad}."
    if not hosts.isascii():
        shown = character(hosts, ASCII)
        return f"Host names are ASCII (an IDN as its xn-- name, e.g. xn--t-9ga.example for été.example), not {shown}."
    for host in hosts.split():
        if not HOST.fullmatch(host.lower()):
            return f"'{host}' is not a host name or a wildcard such as *.example.com."
    return None


def host_name_errors(name: str, what: str = "host name") -> str | None:
    """One DNS name (letters, digits, '-', '.'; no wildcard), e.g. the SNI HAProxy sends to a backend."""
    if not name.isascii() or not HOST_NAME.fullmatch(name.lower()) or len(name) > 253:
        shown = character(name, HOST_CHARACTER)
        detail = f"not {shown}" if shown != "nothing" else "labels of 1-63 characters, not starting or ending with -"
        return f"One {what}: letters, digits, '-' and '.', e.g. api.example.com ({detail})."
    return None


def regex_errors(pattern: str) -> str | None:
    """A pattern HAProxy's PCRE2 compiles, as it does for ``-m reg -i`` (``l7/pcre2.py``). Printable ASCII only: a
    Host header is ASCII (an IDN arrives as its xn-- name), and PCRE2 matches HAProxy's bytes, not characters."""
    if not REGEX_CHARACTERS.fullmatch(pattern):
        shown = character(pattern, REGEX_CHARACTERS)
        return f"A host regex is printable ASCII (IDNs as their xn-- names), without {shown}."
    problem = pcre2.compile_error(pattern, caseless=True)
    if problem:
        return f"PCRE2, HAProxy's regex engine, refuses it: {problem}."
    return None


def path_prefix_errors(prefix: str) -> str | None:
    if not prefix:
        return None
    problem = url_errors(prefix, "path prefix", path=True)
    return problem[0].upper() + problem[1:] if problem else None


def cookie_name_errors(name: str) -> str | None:
    """None for an empty name too: the field's own check asks for one."""
    if name and not COOKIE.fullmatch(name):
        shown = "a '$' first" if name.startswith("$") else character(name, COOKIE_CHARACTER)
        return f"A cookie name: letters, digits and !$%&*+-.^_`|~ (not first: $), without {shown}."
    return None


def persistence_header_errors(name: str) -> str | None:
    if not name:
        return "Header persistence needs the header's name."
    problem = header_name_errors(name)
    return problem[0].upper() + problem[1:] if problem else None


# HAProxy's retry-on keywords lbweb offers (a closed set: only these words are ever written). Response statuses
# and the response-level failures are retried for idempotent methods only (compiler/haproxy/config.py).
RETRY_ON = ("conn-failure", "empty-response", "junk-response", "response-timeout", "500", "502", "503", "504")
MAX_TRUSTED = 32


def retry_on_words(text: str) -> tuple[tuple[str, ...], str | None]:
    """(the keywords of ``text`` in ``RETRY_ON``'s order, None) or ((), why it is refused)."""
    bad = unprintable(text)
    if bad:
        return (), f"Keywords separated by spaces, without {bad}."
    given = text.split()
    unknown = [w for w in given if w not in RETRY_ON]
    if unknown:
        return (), f"'{unknown[0][:40]}' is not one of {', '.join(RETRY_ON)}."
    return tuple(w for w in RETRY_ON if w in given), None


def trusted_sources(text: str) -> tuple[tuple[str, ...], str | None]:
    """(each address or network of ``text``, written as Python's ``ipaddress`` writes it, None) or ((), why).

    Only that canonical form reaches HAProxy's file: what was typed never does."""
    bad = unprintable(text)
    if bad:
        return (), f"Addresses or networks separated by spaces, without {bad}."
    out: list[str] = []
    for item in text.split():
        try:
            if "%" in item:  # an IPv6 zone (fe80::1%eth0) names an interface, not a source
                raise ValueError(item)
            network = ipaddress.ip_network(item, strict=False)
        except ValueError:
            return (), f"'{item[:60]}' is not an address or a network (198.18.0.10, 198.18.0.0/24, 2001:2::/48)."
        if str(network) not in out:
            out.append(str(network))
    if len(out) > MAX_TRUSTED:
        return (), f"At most {MAX_TRUSTED} addresses or networks."
    return tuple(out), None
