"""The LDAP Test: reach a server, TLS, the service account's bind, and for a given user the search, the password and
the groups, with the same libldap options, searches and group type as a login (accounts/ldap_config.py)."""

from __future__ import annotations

import socket
import ssl
from types import SimpleNamespace

import ldap
import ldap.filter
import ldapurl

from ..choices import LdapSecurityChoices
from ..directory import strongest
from ..ldap_config import connection_options, group_search, group_type, user_search
from ..models import LdapSettings
from ..validation import normalised_dn
from . import CheckResult


def _host_port(uri: str) -> tuple[str, int]:
    parsed = ldapurl.LDAPUrl(uri)
    default = 636 if parsed.urlscheme == "ldaps" else 389
    hostport = parsed.hostport
    if hostport.startswith("["):
        host, _, rest = hostport[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") else default
    host, _, port = hostport.partition(":")
    return host, int(port) if port else default


def _describe(error: ldap.LDAPError) -> str:
    info = error.args[0] if error.args and isinstance(error.args[0], dict) else {}
    words = info.get("desc", type(error).__name__)
    extra = info.get("info")
    return f"{words} ({extra})" if extra and extra != "(unknown error code)" else words


def _connect(row: LdapSettings, uri: str, *, verify: bool = True):
    connection = ldap.initialize(uri, bytes_mode=False)
    options = connection_options(row)
    if not verify:
        options[ldap.OPT_X_TLS_REQUIRE_CERT] = ldap.OPT_X_TLS_NEVER
        options[ldap.OPT_X_TLS_NEWCTX] = options.pop(ldap.OPT_X_TLS_NEWCTX)
    for option, value in options.items():
        connection.set_option(option, value)
    if row.security == LdapSecurityChoices.STARTTLS:
        connection.start_tls_s()
    return connection


def _reachable(row: LdapSettings, result: CheckResult) -> str | None:
    """The first URI whose host accepts a TCP connection, as libldap tries them; None when none does."""
    problems = []
    for uri in row.uris:
        host, port = _host_port(uri)
        try:
            socket.create_connection((host, port), timeout=row.timeout).close()
        except OSError as error:
            problems.append(f"{uri}: {error.strerror or error}")
            continue
        result.passed("reach", f"{uri} accepts connections")
        return uri
    result.failed("reach", "cannot reach " + "; ".join(problems) if problems else "no server URI is set")
    return None


def _tls(row: LdapSettings, uri: str, result: CheckResult) -> bool:
    if row.security == LdapSecurityChoices.NONE:
        result.passed("tls", "no TLS (passwords cross the network in clear)")
        return True
    host, port = _host_port(uri)
    if row.security == LdapSecurityChoices.LDAPS:
        context = ssl.create_default_context(cafile=connection_options(row).get(ldap.OPT_X_TLS_CACERTFILE))
        try:
            with (
                socket.create_connection((host, port), timeout=row.timeout) as raw,
                context.wrap_socket(raw, server_hostname=host),
            ):
                pass
        except ssl.SSLCertVerificationError as error:
            result.failed("tls", f"TLS failure with {uri}: {error.verify_message}")
            return False
        except (ssl.SSLError, OSError) as error:
            result.failed("tls", f"TLS failure with {uri}: {error}")
            return False
    try:
        _connect(row, uri).unbind_s()
    except ldap.LDAPError as error:
        try:
            _connect(row, uri, verify=False).unbind_s()
        except ldap.LDAPError:
            result.failed("tls", f"TLS failure with {uri}: the TLS handshake fails ({_describe(error)})")
        else:
            result.failed(
                "tls",
                f"TLS failure with {uri}: the server's certificate does not verify (not signed by the CA given, "
                f"or not issued for {host})",
            )
        return False
    result.passed("tls", f"{'StartTLS' if row.security == LdapSecurityChoices.STARTTLS else 'LDAPS'}: the "
                  f"certificate of {host} verifies")  # fmt: skip
    return True


def check_ldap(row: LdapSettings, username: str = "", password: str = "") -> CheckResult:
    result = CheckResult()
    uri = _reachable(row, result)
    if uri is None or not _tls(row, uri, result):
        return result
    try:
        service = _connect(row, uri)
        service.simple_bind_s(row.bind_dn, row.bind_password)
    except ldap.INVALID_CREDENTIALS:
        who = row.bind_dn or "an anonymous bind"
        return result.failed("bind", f"bad bind: the server refused {who} with this password")
    except ldap.LDAPError as error:
        return result.failed("bind", f"bind failed: {_describe(error)}")
    result.passed("bind", f"bound as {row.bind_dn or 'anonymous'}")
    if not username:
        return result
    try:
        found = user_search(row).execute(service, {"user": username})
    except ldap.LDAPError as error:
        return result.failed("user", f"the user search failed: {_describe(error)}")
    if not found:
        shown = row.user_search_filter % {"user": ldap.filter.escape_filter_chars(username)}
        return result.failed("user", f"user not found: nothing under {row.user_search_base} matches {shown}")
    if len(found) > 1:
        return result.failed("user", f"{len(found)} entries match {username!r}: the filter must find one")
    dn, attrs = found[0]
    result.passed("user", f"found {dn}")
    try:
        _connect(row, uri).simple_bind_s(dn, password)
    except ldap.INVALID_CREDENTIALS:
        return result.failed("password", f"bad password for {dn}")
    except ldap.LDAPError as error:
        return result.failed("password", f"the user's bind failed: {_describe(error)}")
    result.passed("password", "the password is right")
    try:
        user = SimpleNamespace(dn=dn, attrs=attrs, connection=service, _username=username)
        groups = group_type(row).user_groups(user, group_search(row))
    except ldap.LDAPError as error:
        return result.failed("groups", f"the group search failed: {_describe(error)}")
    member_of = {normalised_dn(group_dn) for group_dn, _ in groups}
    result.role = strongest(role for role, group in row.group_dns().items() if normalised_dn(group) in member_of)
    if result.role is None:
        listed = ", ".join(sorted(member_of)) or f"no group under {row.group_search_base}"
        return result.failed("groups", f"in no mapped group (member of: {listed})")
    result.passed("groups", f"role {result.role}")
    return result
