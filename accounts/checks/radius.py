"""The RADIUS Test: whether each server answers with the shared secret, then for a given user the Access-Request a
login sends and the role its reply gives."""

from __future__ import annotations

import socket

from ..backends.radius import role_from
from ..models import RadiusSettings
from ..radius_client import RadiusUnreachable, authenticate, probe
from . import CheckResult

SILENT = (
    "no answer: the server is down or filtered, lbweb is not one of its clients, or the shared secret differs "
    "(a RADIUS server drops what it cannot authenticate)"
)


def _reach(row: RadiusSettings, server: str, result: CheckResult) -> bool | None:
    """True: the server answers with the secret; None: no answer to Status-Server (some servers ignore it)."""
    where = f"{server}:{row.port}"
    try:
        socket.getaddrinfo(server, row.port, type=socket.SOCK_DGRAM)
    except socket.gaierror as error:
        result.failed("reach", f"cannot reach {where}: the name does not resolve ({error.strerror})")
        return False
    outcome = probe(row, server)
    if outcome == "refused":
        result.failed("reach", f"cannot reach {where}: nothing listens there (port unreachable)")
        return False
    if outcome == "unverified":
        result.failed(
            "reach", f"{where} answered, but its reply does not verify with the shared secret: the secrets differ"
        )
        return False
    if outcome == "no-authenticator":
        result.failed(
            "reach", f"{where} answers with this secret, but without a Message-Authenticator: upgrade the server "
            "(BlastRADIUS, CVE-2024-3596) or turn off 'require Message-Authenticator'"
        )  # fmt: skip
        return False
    if outcome == "verified":
        result.passed("reach", f"{where} answers Status-Server with this shared secret")
        return True
    return None


def check_radius(row: RadiusSettings, username: str = "", password: str = "") -> CheckResult:
    result = CheckResult()
    if not row.servers():
        return result.failed("reach", "no server is set")
    outcomes = [_reach(row, server, result) for server in row.servers()]
    if not any(outcome is not False for outcome in outcomes):
        return result
    if not username:
        if not any(outcomes):
            return result.failed("reach", f"{SILENT} (Status-Server); give a user to try an Access-Request")
        return result
    try:
        answer = authenticate(row, username, password)
    except RadiusUnreachable as unreachable:
        return result.failed("password", f"{unreachable}: {SILENT}")
    if not answer.accepted:
        said = f" (it says: {answer.reply_message})" if answer.reply_message else ""
        return result.failed(
            "password", f"bad password or unknown user: {answer.server} answered Access-Reject{said}; RADIUS does "
            "not say which of the two"
        )  # fmt: skip
    result.passed("password", f"{answer.server} answered Access-Accept")
    values = answer.attributes.get(row.role_attribute, [])
    result.role = role_from(row, values)
    if result.role is None:
        return result.failed(
            "role", f"in no mapped group: the reply's {row.role_attribute} is {values or 'absent'}, no mapped value"
        )
    result.passed("role", f"role {result.role}")
    return result
