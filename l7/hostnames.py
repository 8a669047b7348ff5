"""The names a certificate lbweb makes is for: host names as the DNS and TLS clients read them.

A certificate carries A-labels only (``xn--t-9fab.test``, never ``été.test``: cryptography refuses the
other, and so would a client), so an internationalised name is converted by IDNA 2008 with UTS #46's
mapping (the ``idna`` package: what browsers do with what a person types; case is folded). A name is
refused, with why, when it is not one a client can match: labels of letters, digits and hyphens (not at
either end), 1 to 63 characters each, 253 in all, none empty; a wildcard only as the whole first label
(``*.example.com``). An IP address is taken as it is (the certificate names it as an address).
"""

from __future__ import annotations

import ipaddress

import idna

RULES = (
    "a host name is labels of letters, digits and hyphens (not at either end), 1 to 63 characters each and "
    "253 in all, separated by dots; a wildcard only as the whole first label, e.g. *.example.com"
)


def a_label_name(name: str) -> str:
    """``name`` as a certificate carries it (A-labels, lower case, no final dot), or ValueError saying why."""
    text = name.strip()
    if not text:
        raise ValueError("an empty name")
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        pass
    wildcard, rest = (True, text[2:]) if text.startswith("*.") else (False, text)
    rest = rest[:-1] if rest.endswith(".") and not rest.endswith("..") else rest
    try:
        encoded = idna.encode(rest, uts46=True, std3_rules=True).decode("ascii")
    except (idna.IDNAError, UnicodeError) as exc:
        raise ValueError(f"'{name}' is not a host name ({exc}): {RULES}") from None
    if len(encoded) + (2 if wildcard else 0) > 253:
        raise ValueError(f"'{name}' is longer than 253 characters as the DNS writes it: {RULES}")
    return f"*.{encoded}" if wildcard else encoded


def certificate_names(names: list[str]) -> list[str]:
    """Every name as a certificate carries it, in order, without duplicates; ValueError naming each bad one."""
    converted, problems = [], []
    for name in names:
        try:
            converted.append(a_label_name(name))
        except ValueError as exc:
            problems.append(str(exc))
    if problems:
        raise ValueError("; ".join(problems))
    return list(dict.fromkeys(converted))
