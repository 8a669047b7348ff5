"""What BIRD 2's configuration parser takes as one value, written down once.

The models' ``clean()`` (``bgp/models.py``) refuses anything else with a message that names the field, and the
generator (``render.py``) refuses to write anything else, so no value an operator types can become a keyword, a
comment or a block in BIRD's file. Only one value is written as text: the TCP-MD5 password, inside BIRD's double
quotes (its lexer, ``cf-lex.l``, reads ``"[^"\\n]*"`` as one string, with no escapes). Every other value is a
number or an address, parsed here and written back as Python prints it. ``tests/bgp/test_fields.py`` proves it
against BIRD itself (``bird -p``), by examples and a property-based run.

Each ``*_problem`` function returns why a value cannot be written, or None.
"""

from __future__ import annotations

import ipaddress
import re

ASN_MAX = 2**32 - 1
TCP_MD5_KEY_BYTES = 80  # TCP_MD5SIG_MAXKEYLEN: the kernel refuses a longer key
GRACEFUL_SHUTDOWN = (65535, 0)  # RFC 8326's well-known community
COMMUNITY = re.compile(r"([0-9]{1,10}):([0-9]{1,10})(?::([0-9]{1,10}))?")


def asn_problem(value: int) -> str | None:
    if type(value) is not int or not 1 <= value <= ASN_MAX:
        return f"An AS number from 1 to {ASN_MAX} (4-byte ASNs are fine)."
    if value == 23456:
        return "AS 23456 is AS_TRANS (RFC 6793), a placeholder: use the real AS number."
    return None


def router_id_problem(value: str) -> str | None:
    """BIRD's ``router id``: a 32-bit id written as an IPv4 address, never 0.0.0.0."""
    try:
        ip = ipaddress.IPv4Address(value)
    except ValueError:
        return "A router id written as an IPv4 address, e.g. 198.18.40.1 (usually this node's own address)."
    if int(ip) == 0:
        return "Not 0.0.0.0: BIRD refuses a zero router id."
    return None


def peer_address_problem(value: str) -> str | None:
    """A BGP neighbour: a unicast address (no scope id: a link-local neighbour needs an interface lbweb does not
    ask for)."""
    try:
        ip = ipaddress.ip_address(value)
    except ValueError:
        return "An IPv4 or IPv6 address."
    if "%" in value:
        return "No scope id ('%eth0'): give the peer's global address."
    if ip.is_unspecified or ip.is_loopback or ip.is_multicast or ip.is_link_local:
        return "A unicast address of the router (not unspecified, loopback, multicast or link-local)."
    if ip.version == 6 and ip.ipv4_mapped is not None:
        return f"An IPv4-mapped IPv6 address: write the IPv4 address itself ({ip.ipv4_mapped})."
    return None


def password_problem(value: str) -> str | None:
    """The TCP-MD5 key (RFC 2385), written as BIRD's quoted string."""
    if any(not " " <= c <= "~" for c in value):
        return "Printable ASCII only (letters, digits, spaces, punctuation): no line break, tab or accented letter."
    if '"' in value:
        return "No double quote: BIRD's quoted string cannot carry one."
    if len(value.encode()) > TCP_MD5_KEY_BYTES:
        return f"At most {TCP_MD5_KEY_BYTES} characters: the kernel's TCP-MD5 key is at most 80 bytes."
    if value != value.strip():
        return "No space at either end (invisible when typed, and the router must have the same password)."
    return None


def hold_time_problem(value: int) -> str | None:
    if type(value) is not int or not (value == 0 or 3 <= value <= 65535):
        return "Seconds from 3 to 65535, or 0 (no keepalives: the session never times out by itself)."
    return None


def keepalive_problem(value: int, hold_time: int) -> str | None:
    """With no hold time, no keepalives are sent and the value is not written (BIRD refuses any keepalive time
    above the hold time)."""
    if hold_time == 0:
        return None
    if type(value) is not int or not 1 <= value <= 65535:
        return "Seconds from 1 to 65535."
    if hold_time and value * 3 > hold_time:
        return f"At most a third of the hold time ({hold_time // 3} s): three keepalives fit in one hold time."
    return None


def multihop_problem(value: int) -> str | None:
    if type(value) is not int or not 0 <= value <= 255:
        return "0 (the router is on a directly connected link) or a TTL from 1 to 255."
    return None


def multihop_bfd_problem(multihop: int, bfd: bool, source_address: str) -> str | None:
    """BIRD runs multihop BFD from a known address only ("Multihop BGP with BFD requires specified local address")."""
    if multihop and bfd and not source_address:
        return "A multihop session with BFD needs this node's source address (BFD sends from it)."
    return None


def med_problem(value: int | None) -> str | None:
    if value is not None and (type(value) is not int or not 0 <= value <= ASN_MAX):
        return f"A MED from 0 to {ASN_MAX}, or empty (none sent)."
    return None


def bfd_problem(interval_ms: int, multiplier: int) -> str | None:
    if type(interval_ms) is not int or not 10 <= interval_ms <= 10000:
        return "Milliseconds from 10 to 10000 between BFD packets."
    if type(multiplier) is not int or not 1 <= multiplier <= 255:
        return "A BFD detection multiplier from 1 to 255."
    return None


Community = tuple[int, int] | tuple[int, int, int]


def parse_communities(text: str) -> tuple[Community, ...]:
    """``65000:100 65000:1:2`` (spaces or commas between): standard (RFC 1997, two 16-bit halves) and large
    (RFC 8092, three 32-bit parts) communities, in order, without repeats. ValueError names the one that does not
    parse."""
    found: list[Community] = []
    for word in text.replace(",", " ").split():
        match = COMMUNITY.fullmatch(word)
        if match is None:
            raise ValueError(f"{word!r}: write ASN:VALUE (e.g. 65000:100) or ASN:VALUE:VALUE (a large community)")
        parts = tuple(int(p) for p in match.groups() if p is not None)
        limit = 65535 if len(parts) == 2 else ASN_MAX
        if any(p > limit for p in parts):
            what = "each half of a community is 0 to 65535" if len(parts) == 2 else f"each part is 0 to {limit}"
            raise ValueError(f"{word!r}: {what}")
        if parts not in found:
            found.append(parts)  # type: ignore[arg-type]
    return tuple(found)


def communities_problem(text: str) -> str | None:
    try:
        parse_communities(text)
    except ValueError as exc:
        return str(exc)
    return None
