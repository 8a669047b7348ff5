"""The authentication settings, one row each (pk 1), and the accounts the directories made.

* :class:`LoginPolicy`: whether local accounts may log in, and from which role up a second factor is required.
* :class:`LdapSettings`, :class:`RadiusSettings`, :class:`OidcSettings`: one directory each, off until enabled.
* :class:`DirectoryAccount`: marks a Django account as made by a directory at its first login (a directory never
  takes over a local account of the same name, and a local password never opens a directory's account).

Second factors are django-otp's own models (``otp_totp.TOTPDevice``, ``otp_static.StaticDevice`` for the recovery
codes), so a backup of the database holds them like any other row.

Secrets (the LDAP bind password, the RADIUS shared secret, the OIDC client secret) are stored in the database,
which only lbweb can read (mode 0600 in a 0700 directory; lbweb/paths.py). They must be usable, not hashed: lbweb
sends them to the server. They are never shown again: the API says only whether one is set, the audit trail only
when it changed (``*_changed``), and the settings pages leave the field blank.
"""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from farms.roles import ROLES

from . import validation
from .choices import (
    LdapGroupTypeChoices,
    LdapSecurityChoices,
    RadiusRoleAttributeChoices,
    SecondFactorRoleChoices,
    SourceChoices,
)

DN = 500  # longest DN, URI list or filter kept


class SingletonSettings(models.Model):
    """A settings row of which there is one (pk 1); ``load()`` gives it, or its defaults when never saved."""

    # Secret fields: name -> the field holding when it last changed (what the audit trail shows instead).
    SECRETS: dict[str, str] = {}

    class Meta:
        abstract = True

    @classmethod
    def load(cls):
        return cls.objects.filter(pk=1).first() or cls(pk=1)

    def audit_state(self) -> dict:
        """Every field an operator sets; a secret only as "set (changed …)" or "not set", never its value."""
        state = {}
        for field in self._meta.concrete_fields:
            name = field.name
            if name == "id" or name in self.SECRETS.values():
                continue
            if name in self.SECRETS:
                changed = getattr(self, self.SECRETS[name])
                value = getattr(self, name)
                state[name] = (
                    f"set (changed {changed:%Y-%m-%d %H:%M:%S.%f} UTC)"
                    if value and changed
                    else ("set" if value else "not set")
                )
            else:
                state[name] = getattr(self, name)
        return state


class LoginPolicy(SingletonSettings):
    """What every login obeys, whichever directory checked the password."""

    local_logins = models.BooleanField(
        "local accounts may log in",
        default=True,
        help_text="Local accounts are tried after the directories. Off: only directory accounts log in "
        "(manage.py local_logins --enable turns it back on from the console).",
    )
    second_factor_role = models.CharField(
        "second factor required for",
        max_length=10,
        blank=True,
        default=SecondFactorRoleChoices.NOBODY,
        choices=SecondFactorRoleChoices.choices,
        help_text="Accounts of this role and above must enter a code from an authenticator app at each login; "
        "one that has none enrols at its next login.",
    )

    def __str__(self) -> str:
        return "login policy"


class LdapSettings(SingletonSettings):
    """LDAP or Active Directory (django-auth-ldap): a service account searches for the user, the user's own
    bind checks the password, and membership of a mapped group gives the role (the strongest one wins)."""

    SECRETS = {"bind_password": "bind_password_changed"}

    enabled = models.BooleanField(default=False)
    server_uris = models.CharField(
        "server URIs",
        max_length=DN,
        blank=True,
        help_text="One or more, separated by spaces, tried in order: ldap://dc1.example.com ldap://dc2.example.com",
    )
    security = models.CharField(
        max_length=10, choices=LdapSecurityChoices.choices, default=LdapSecurityChoices.STARTTLS
    )
    ca_certificate = models.TextField(
        "CA certificate",
        blank=True,
        help_text="PEM: the CA that signed the servers' certificates (blank: the system's)",
    )
    bind_dn = models.CharField(
        "bind DN", max_length=DN, blank=True, help_text="The service account that searches (blank: anonymous)"
    )
    bind_password = models.CharField(max_length=500, blank=True)
    bind_password_changed = models.DateTimeField(null=True, blank=True, editable=False)
    user_search_base = models.CharField(max_length=DN, blank=True, help_text="e.g. ou=people,dc=example,dc=com")
    user_search_filter = models.CharField(
        max_length=DN,
        default="(uid=%(user)s)",
        help_text="%(user)s is the login name; Active Directory: (sAMAccountName=%(user)s)",
    )
    group_search_base = models.CharField(max_length=DN, blank=True, help_text="e.g. ou=groups,dc=example,dc=com")
    group_type = models.CharField(
        max_length=20, choices=LdapGroupTypeChoices.choices, default=LdapGroupTypeChoices.GROUP_OF_NAMES
    )
    admin_group = models.CharField("admin group DN", max_length=DN, blank=True)
    operator_group = models.CharField("operator group DN", max_length=DN, blank=True)
    viewer_group = models.CharField("viewer group DN", max_length=DN, blank=True)
    timeout = models.PositiveSmallIntegerField(
        "timeout (s)", default=5, validators=[MinValueValidator(1), MaxValueValidator(60)]
    )

    def __str__(self) -> str:
        return "LDAP"

    @property
    def uris(self) -> list[str]:
        return self.server_uris.split()

    def group_dns(self) -> dict[str, str]:
        """role -> its group's DN, for the roles that have one."""
        return {role: getattr(self, f"{role}_group") for role in ROLES if getattr(self, f"{role}_group")}

    def clean(self) -> None:
        errors: dict[str, str] = {}
        scheme = "ldaps" if self.security == LdapSecurityChoices.LDAPS else "ldap"
        for uri in self.uris:
            problem = validation.ldap_uri_problem(uri, scheme)
            if problem:
                errors["server_uris"] = problem
                break
        for name in (
            "bind_dn",
            "user_search_base",
            "group_search_base",
            "admin_group",
            "operator_group",
            "viewer_group",
        ):
            value = getattr(self, name)
            problem = value and validation.dn_problem(value)
            if problem:
                errors[name] = problem
        problem = validation.search_filter_problem(self.user_search_filter)
        if problem:
            errors["user_search_filter"] = problem
        if self.ca_certificate.strip():
            problem = validation.pem_certificates_problem(self.ca_certificate)
            if problem:
                errors["ca_certificate"] = problem
        if self.enabled:
            for name, missing in (
                ("server_uris", "Give at least one server URI."),
                ("user_search_base", "Give the base the users are searched under."),
                ("group_search_base", "Give the base the groups are searched under."),
            ):
                if not getattr(self, name).strip():
                    errors.setdefault(name, missing)
            if not self.group_dns():
                errors["admin_group"] = "Map at least one group to a role: a user in no mapped group cannot log in."
        if errors:
            raise ValidationError(errors)


class RadiusSettings(SingletonSettings):
    """RADIUS (pyrad): an Access-Request with the user's name and password; the role comes from one attribute
    of the Access-Accept (the server sets it per user or group)."""

    SECRETS = {"secret": "secret_changed"}

    enabled = models.BooleanField(default=False)
    server = models.CharField(max_length=253, blank=True, help_text="Host name or address")
    secondary_server = models.CharField(max_length=253, blank=True, help_text="Asked when the first does not answer")
    port = models.PositiveIntegerField(default=1812)
    secret = models.CharField("shared secret", max_length=128, blank=True)
    secret_changed = models.DateTimeField(null=True, blank=True, editable=False)
    timeout = models.PositiveSmallIntegerField(
        "timeout (s)", default=3, validators=[MinValueValidator(1), MaxValueValidator(30)]
    )
    retries = models.PositiveSmallIntegerField(default=2, validators=[MinValueValidator(1), MaxValueValidator(5)])
    require_message_authenticator = models.BooleanField(
        default=True,
        help_text="Accept only replies carrying a Message-Authenticator (the BlastRADIUS countermeasure, "
        "CVE-2024-3596; FreeRADIUS sends one since 3.2.5). Off only for an older server on a trusted network.",
    )
    nas_identifier = models.CharField(
        "NAS-Identifier", max_length=64, default="lbweb", help_text="How lbweb names itself to the server"
    )
    role_attribute = models.CharField(
        max_length=20, choices=RadiusRoleAttributeChoices.choices, default=RadiusRoleAttributeChoices.FILTER_ID
    )
    admin_value = models.CharField(max_length=64, blank=True, default="lbweb-admin")
    operator_value = models.CharField(max_length=64, blank=True, default="lbweb-operator")
    viewer_value = models.CharField(max_length=64, blank=True, default="lbweb-viewer")

    def __str__(self) -> str:
        return "RADIUS"

    def role_values(self) -> dict[str, str]:
        return {role: getattr(self, f"{role}_value") for role in ROLES if getattr(self, f"{role}_value")}

    def servers(self) -> list[str]:
        return [host for host in (self.server, self.secondary_server) if host]

    def clean(self) -> None:
        errors: dict[str, str] = {}
        for name in ("server", "secondary_server"):
            value = getattr(self, name)
            problem = value and validation.host_problem(value)
            if problem:
                errors[name] = problem
        problem = validation.port_problem(self.port)
        if problem:
            errors["port"] = problem
        for name in ("admin_value", "operator_value", "viewer_value", "nas_identifier"):
            problem = validation.words_problem(getattr(self, name), "value")
            if problem:
                errors[name] = problem
        if self.enabled:
            if not self.server:
                errors.setdefault("server", "Give the RADIUS server.")
            if not self.secret:
                errors.setdefault("secret", "Give the shared secret the server has for lbweb.")
            if not self.role_values():
                errors.setdefault("admin_value", "Map at least one attribute value to a role.")
        if errors:
            raise ValidationError(errors)


class OidcSettings(SingletonSettings):
    """OpenID Connect single sign-on (mozilla-django-oidc): the authorization-code flow with the provider
    found from its issuer (``/.well-known/openid-configuration``); a claim of the user names the role."""

    SECRETS = {"client_secret": "client_secret_changed"}

    enabled = models.BooleanField(default=False)
    issuer = models.CharField(max_length=500, blank=True, help_text="e.g. https://login.example.com/realms/ops")
    client_id = models.CharField("client ID", max_length=255, blank=True)
    client_secret = models.CharField(max_length=500, blank=True)
    client_secret_changed = models.DateTimeField(null=True, blank=True, editable=False)
    ca_certificate = models.TextField(
        "CA certificate", blank=True, help_text="PEM: the CA of the provider's certificate (blank: the system's)"
    )
    scopes = models.CharField(max_length=200, default="openid profile email")
    username_claim = models.CharField(max_length=64, default="preferred_username")
    role_claim = models.CharField(
        max_length=64, default="groups", help_text="A claim holding a value or a list of values (groups, roles)"
    )
    admin_value = models.CharField(max_length=200, blank=True, default="lbweb-admins")
    operator_value = models.CharField(max_length=200, blank=True, default="lbweb-operators")
    viewer_value = models.CharField(max_length=200, blank=True, default="lbweb-viewers")
    button_label = models.CharField(max_length=60, default="Log in with single sign-on")

    def __str__(self) -> str:
        return "OpenID Connect"

    def role_values(self) -> dict[str, str]:
        return {role: getattr(self, f"{role}_value") for role in ROLES if getattr(self, f"{role}_value")}

    def clean(self) -> None:
        errors: dict[str, str] = {}
        if self.issuer:
            problem = validation.issuer_problem(
                self.issuer, allow_http_localhost=settings.LBWEB_OIDC_ALLOW_HTTP_LOCALHOST
            )
            if problem:
                errors["issuer"] = problem
        if "openid" not in self.scopes.split():
            errors["scopes"] = "The scopes must include openid."
        for name in ("username_claim", "role_claim"):
            problem = validation.words_problem(getattr(self, name), "claim name")
            if problem or not getattr(self, name):
                errors[name] = problem or "Name the claim."
        if self.ca_certificate.strip():
            problem = validation.pem_certificates_problem(self.ca_certificate)
            if problem:
                errors["ca_certificate"] = problem
        if self.enabled:
            for name, missing in (
                ("issuer", "Give the provider's issuer URL."),
                ("client_id", "Give the client ID the provider registered for lbweb."),
                ("client_secret", "Give the client secret the provider registered for lbweb."),
            ):
                if not getattr(self, name):
                    errors.setdefault(name, missing)
            if not self.role_values():
                errors.setdefault("admin_value", "Map at least one claim value to a role.")
        if errors:
            raise ValidationError(errors)


class DirectoryAccount(models.Model):
    """A Django account made by a directory at the user's first login: its source, the directory's name for it
    (an LDAP DN, an OIDC subject), and the role the directory gave at the last login."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="directory_account")
    source = models.CharField(max_length=10, choices=SourceChoices.choices)
    subject = models.CharField(max_length=500, blank=True, help_text="The LDAP DN or the OIDC subject (sub)")
    role = models.CharField(max_length=10, blank=True)
    last_login = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["source", "subject"], condition=~models.Q(subject=""), name="directory_account_subject"
            )
        ]

    def __str__(self) -> str:
        return f"{self.user.get_username()} ({self.get_source_display()})"
