"""django-auth-ldap's settings made from the database row (:class:`accounts.models.LdapSettings`), shared by the
login backend and the Test, so the Test checks exactly what a login will do.

The CA certificate is written to a file (accounts/ca_files.py); a changed CA is a new file, read by a new TLS
context (``OPT_X_TLS_NEWCTX``, set last).
"""

from __future__ import annotations

import ldap
from django_auth_ldap.config import (
    GroupOfNamesType,
    GroupOfUniqueNamesType,
    LDAPGroupQuery,
    LDAPSearch,
    LDAPSettings,
    NestedActiveDirectoryGroupType,
    PosixGroupType,
)

from .ca_files import ca_file
from .choices import LdapGroupTypeChoices, LdapSecurityChoices
from .models import LdapSettings

GROUP_TYPES = {
    LdapGroupTypeChoices.GROUP_OF_NAMES: (GroupOfNamesType, "(objectClass=groupOfNames)"),
    LdapGroupTypeChoices.GROUP_OF_UNIQUE_NAMES: (GroupOfUniqueNamesType, "(objectClass=groupOfUniqueNames)"),
    LdapGroupTypeChoices.POSIX: (PosixGroupType, "(objectClass=posixGroup)"),
    LdapGroupTypeChoices.ACTIVE_DIRECTORY: (NestedActiveDirectoryGroupType, "(objectClass=group)"),
}


def connection_options(row: LdapSettings) -> dict:
    """libldap's options for each connection: timeouts, no referral chasing (a referral would send the user's
    password to another server), the server's certificate always checked, against the CA when one is given."""
    options = {
        ldap.OPT_PROTOCOL_VERSION: ldap.VERSION3,
        ldap.OPT_NETWORK_TIMEOUT: float(row.timeout),
        ldap.OPT_TIMEOUT: float(row.timeout),
        ldap.OPT_REFERRALS: 0,
        ldap.OPT_X_TLS_REQUIRE_CERT: ldap.OPT_X_TLS_DEMAND,
    }
    if row.ca_certificate.strip():
        options[ldap.OPT_X_TLS_CACERTFILE] = str(ca_file(row.ca_certificate))
    options[ldap.OPT_X_TLS_NEWCTX] = 0  # last: the TLS context is made from the options above
    return options


def user_search(row: LdapSettings) -> LDAPSearch:
    return LDAPSearch(row.user_search_base, ldap.SCOPE_SUBTREE, row.user_search_filter)


def group_type(row: LdapSettings):
    return GROUP_TYPES[row.group_type][0]()


def group_search(row: LdapSettings) -> LDAPSearch:
    return LDAPSearch(row.group_search_base, ldap.SCOPE_SUBTREE, GROUP_TYPES[row.group_type][1])


def required_groups(row: LdapSettings) -> LDAPGroupQuery | None:
    """Membership of any mapped group: django-auth-ldap refuses everyone else before it makes an account."""
    query = None
    for dn in row.group_dns().values():
        query = LDAPGroupQuery(dn) if query is None else query | LDAPGroupQuery(dn)
    return query


def library_settings(row: LdapSettings) -> LDAPSettings:
    """An ``LDAPSettings`` holding the row's values (a prefix nobody defines: nothing comes from Django's
    settings, so an ``AUTH_LDAP_*`` left in an environment cannot change a login)."""
    return LDAPSettings(
        prefix="LBWEB_ACCOUNTS_LDAP_FROM_DATABASE_",
        defaults={
            "SERVER_URI": " ".join(row.uris),
            "START_TLS": row.security == LdapSecurityChoices.STARTTLS,
            "CONNECTION_OPTIONS": connection_options(row),
            "BIND_DN": row.bind_dn,
            "BIND_PASSWORD": row.bind_password,
            "USER_SEARCH": user_search(row),
            "GROUP_SEARCH": group_search(row),
            "GROUP_TYPE": group_type(row),
            "REQUIRE_GROUP": required_groups(row),
            "USER_ATTR_MAP": {"email": "mail", "first_name": "givenName", "last_name": "sn"},
            "ALWAYS_UPDATE_USER": True,
            "CACHE_TIMEOUT": 0,
        },
    )
