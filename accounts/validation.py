"""The checks behind the authentication settings' ``clean()``: each returns the problem in words, or None.

They are strict on purpose: a value that a library would accept and misread (an LDAP URL with a search in it, a
DN with an empty value) is refused with the reason, so a typo shows on the field instead of as "login failed".
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

import ldap.dn
import ldapurl
from cryptography import x509

# A DNS name (RFC 1123 labels) or an address.
_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")


def host_problem(host: str) -> str | None:
    """A server's host: an IPv4 or IPv6 address, or a DNS name."""
    if not host:
        return "Give a host name or an address."
    try:
        ipaddress.ip_address(host)
        return None
    except ValueError:
        pass
    name = host[:-1] if host.endswith(".") else host
    if len(name) > 253 or not all(_LABEL.match(label) for label in name.split(".")):
        return f"{host!r} is neither an address nor a host name."
    return None


def port_problem(port: int | None) -> str | None:
    if port is None or not 1 <= int(port) <= 65535:
        return "A port is a number from 1 to 65535."
    return None


def ldap_uri_problem(uri: str, scheme: str) -> str | None:
    """One server: ``scheme://host[:port]``, nothing after it (a DN, attributes or a filter in the URL would
    be ignored by the login, so they are refused rather than silently dropped)."""
    if not ldapurl.isLDAPUrl(uri) or uri.lower().startswith("ldapi://"):
        return f"{uri!r} is not an LDAP URI: write ldap://HOST[:PORT] or ldaps://HOST[:PORT]."
    parsed = ldapurl.LDAPUrl(uri)
    if parsed.urlscheme != scheme:
        return f"{uri!r}: with this security setting the URI starts with {scheme}://."
    if parsed.dn or parsed.attrs or parsed.filterstr or parsed.extensions:
        return f"{uri!r}: give only the scheme, the host and the port (the search base has its own field)."
    host, _, port = parsed.hostport.rpartition(":") if not parsed.hostport.endswith("]") else (parsed.hostport, "", "")
    if not host:  # no port given
        host, port = parsed.hostport, ""
    host = host.strip("[]")
    problem = host_problem(host)
    if problem:
        return f"{uri!r}: {problem}"
    if port and (not port.isdigit() or port_problem(int(port))):
        return f"{uri!r}: the port is a number from 1 to 65535."
    return None


def dn_problem(dn: str) -> str | None:
    """A distinguished name as RFC 4514 writes it (``cn=lbweb-admins,ou=groups,dc=example,dc=com``)."""
    try:
        parts = ldap.dn.str2dn(dn)
    except ldap.DECODING_ERROR:
        return f"{dn!r} is not a DN: write attribute=value pairs separated by commas, e.g. ou=people,dc=example,dc=com."
    if not parts or any(not value for rdn in parts for _, value, _ in rdn):
        return f"{dn!r} is not a DN: every attribute needs a value."
    return None


def normalised_dn(dn: str) -> str:
    """The DN in one spelling (django-auth-ldap compares group DNs lower-cased, as returned by the server)."""
    return ldap.dn.dn2str(ldap.dn.str2dn(dn)).lower()


def search_filter_problem(text: str) -> str | None:
    """An LDAP filter in parentheses, balanced, with ``%(user)s`` where the login name goes."""
    if not (text.startswith("(") and text.endswith(")")):
        return "A filter is written in parentheses, e.g. (uid=%(user)s)."
    depth = 0
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth < 0:
            return "The parentheses of the filter do not match."
    if depth:
        return "The parentheses of the filter do not match."
    if "%(user)s" not in text:
        return "Put %(user)s where the login name goes, e.g. (sAMAccountName=%(user)s)."
    try:
        text % {"user": "x"}
    except (KeyError, ValueError, TypeError):
        return "Only %(user)s may follow a % sign (write %% for a percent sign)."
    return None


def pem_certificates_problem(text: str) -> str | None:
    """One or more CA certificates in PEM."""
    try:
        certificates = x509.load_pem_x509_certificates(text.encode())
    except ValueError:
        return "This is not a certificate in PEM (-----BEGIN CERTIFICATE----- …)."
    return None if certificates else "This is not a certificate in PEM (-----BEGIN CERTIFICATE----- …)."


def issuer_problem(url: str, *, allow_http_localhost: bool) -> str | None:
    """An OpenID Connect issuer: an https URL (http only for a provider on this machine, when the setting
    ``LBWEB_OIDC_ALLOW_HTTP_LOCALHOST`` allows it: a test provider), with no query or fragment."""
    try:
        parts = urlsplit(url)
        hostname = parts.hostname or ""
        parts.port  # noqa: B018 (raises ValueError on a bad port)
    except ValueError:
        return f"{url!r} is not a URL."
    if parts.query or parts.fragment or not hostname or parts.username or parts.password:
        return "Give the issuer as the provider states it: https://HOST[/PATH], no query, no credentials."
    if parts.scheme == "https":
        return host_problem(hostname)
    local = hostname == "localhost" or _is_loopback(hostname)
    if parts.scheme == "http" and local and allow_http_localhost:
        return None
    if parts.scheme == "http" and local:
        return (
            "The issuer must be https (http is allowed for a test provider on this machine only when "
            "LBWEB_OIDC_ALLOW_HTTP_LOCALHOST=1)."
        )
    return "The issuer must be an https URL."


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def words_problem(text: str, what: str) -> str | None:
    """A value that must be one word (a claim name, a RADIUS attribute value): no spaces or control characters."""
    if any(char.isspace() or ord(char) < 32 for char in text):
        return f"The {what} is one word: no spaces."
    return None
