"""What may stand as one value in lbweb's rsyslog configuration, written down once.

The model's ``clean()`` (``remotelog/models.py``) refuses anything else with a message that names the field, and the
generator (``render.py``) refuses to write anything else, so no value an operator types can end a string, start a
directive or a comment in rsyslog's RainerScript. Every value rsyslog reads from lbweb is an address, a DNS name, a
number, one of lbweb's own words, or a path the worker chose; none of them can hold a quote, a backslash, a space,
``#``, ``$``, ``{`` or a line break.

Each ``*_problem`` function returns why a value cannot be written, or None.
"""

from __future__ import annotations

import ipaddress
import re

from .spec import KINDS, TRANSPORTS

LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
DNS_NAME = re.compile(rf"(?=.{{1,253}}$){LABEL}(?:\.{LABEL})*\.?")
PEER_NAME = re.compile(rf"(?=.{{1,253}}$)(?:\*\.)?{LABEL}(?:\.{LABEL})*")  # rsyslog's permitted peer: *.example.org
PATH = re.compile(r"/[A-Za-z0-9/._+-]{1,200}")  # the worker's own paths (state and runtime directories)


def host_problem(value: str) -> str | None:
    """An IPv4 or IPv6 address (no zone, no brackets), or a DNS name."""
    if not value:
        return "An address or a DNS name is required."
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        if ":" in value:
            return "Not an IPv6 address (give it without brackets and without a port)."
        if not DNS_NAME.fullmatch(value) or value.replace(".", "").isdigit():
            return (
                "Neither an IP address nor a DNS name: letters, digits and '-' in labels of at most 63, "
                "separated by dots."
            )
        return None
    if address.is_multicast or address.is_unspecified:
        return "A server's own address (not multicast, not 0.0.0.0 or ::)."
    return None


def port_problem(value: int) -> str | None:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 65535:
        return "A port from 1 to 65535 (syslog: 514 over UDP and TCP, 6514 over TLS)."
    return None


def peer_name_problem(value: str) -> str | None:
    """The name the server's certificate must carry (empty: any name, the chain alone is checked)."""
    if value and not PEER_NAME.fullmatch(value):
        return "A DNS name the server's certificate carries (a first label of '*' is a wildcard), or nothing."
    return None


def transport_problem(value: str) -> str | None:
    return None if value in TRANSPORTS else f"One of {', '.join(TRANSPORTS)}."


def kinds_problem(value) -> str | None:
    if not all(kind in KINDS for kind in value):
        return f"Kinds of event among {', '.join(KINDS)}."
    return None


def path_problem(value: str) -> str | None:
    if not PATH.fullmatch(value) or "/../" in value + "/" or "//" in value:
        return "An absolute path of letters, digits and /._+- (the worker's own)."
    return None
