"""LDAP and Active Directory logins: django-auth-ldap, its settings read from the database at each login."""

from __future__ import annotations

from django_auth_ldap.backend import LDAPBackend

from ..choices import SourceChoices
from ..directory import directory_login, may_try, refused, strongest
from ..ldap_config import library_settings
from ..models import LdapSettings
from ..validation import normalised_dn


class LdapBackend(LDAPBackend):
    """django-auth-ldap with lbweb's rules: off unless enabled, never for a local account's name, only for a
    member of a mapped group (``REQUIRE_GROUP``), and the role from the strongest mapped group at every login.

    Django makes a backend per login, so the row read here is the one in force at that login; a session's
    requests (``get_user``) never read it.
    """

    _row: LdapSettings | None = None

    @property
    def row(self) -> LdapSettings:
        if self._row is None:
            self._row = LdapSettings.load()
        return self._row

    @property
    def settings(self):
        if self._settings is None:
            self._settings = library_settings(self.row)
        return self._settings

    def get_user(self, user_id):
        """The session's account, while it is active (django-auth-ldap's own does not check)."""
        user = super().get_user(user_id)
        return user if user is not None and user.is_active else None

    def authenticate(self, request, username=None, password=None, **kwargs):
        if username is None or password is None or not self.row.enabled:
            return None
        if not may_try(username, SourceChoices.LDAP):
            return None
        user = super().authenticate(request, username=username, password=password, **kwargs)
        if user is None:
            refused(request, "LDAP", username, "the directory did not accept the login (its Test says why)")
            return None
        member_of = {normalised_dn(dn) for dn in user.ldap_user.group_dns}
        role = strongest(role for role, dn in self.row.group_dns().items() if normalised_dn(dn) in member_of)
        if role is None:  # REQUIRE_GROUP let it through: a group deleted between the two reads
            refused(request, "LDAP", username, "in no mapped group")
            return None
        return directory_login(
            username=user.get_username(), source=SourceChoices.LDAP, role=role, subject=user.ldap_user.dn,
            email=user.email, request=request,
        )  # fmt: skip
