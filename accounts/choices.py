from django.db import models


class SourceChoices(models.TextChoices):
    """Where an account's password (or identity) is checked."""

    LOCAL = "local", "Local account"
    LDAP = "ldap", "LDAP / Active Directory"
    RADIUS = "radius", "RADIUS"
    OIDC = "oidc", "OpenID Connect"


class SecondFactorRoleChoices(models.TextChoices):
    """From which role up a second factor is required (roles as farms/roles.py ranks them)."""

    NOBODY = "", "Nobody (each account may still enrol one)"
    ADMIN = "admin", "Admins"
    OPERATOR = "operator", "Operators and admins"
    VIEWER = "viewer", "Everyone"


class LdapSecurityChoices(models.TextChoices):
    STARTTLS = "starttls", "StartTLS (ldap://, then TLS before the bind)"
    LDAPS = "ldaps", "LDAPS (ldaps://, TLS from the start)"
    NONE = "none", "None: passwords cross the network in clear (a lab only)"


class LdapGroupTypeChoices(models.TextChoices):
    """How the directory says who is in a group (django-auth-ldap's group types)."""

    GROUP_OF_NAMES = "groupOfNames", "groupOfNames (member: the user's DN), OpenLDAP"
    GROUP_OF_UNIQUE_NAMES = "groupOfUniqueNames", "groupOfUniqueNames (uniqueMember: the user's DN)"
    POSIX = "posixGroup", "posixGroup (memberUid: the user's uid)"
    ACTIVE_DIRECTORY = "activeDirectory", "Active Directory (member, nested groups followed)"


class RadiusRoleAttributeChoices(models.TextChoices):
    """The reply attribute whose value names the role (RFC 2865); the server sets it per user or group."""

    FILTER_ID = "Filter-Id", "Filter-Id (11)"
    CLASS = "Class", "Class (25)"
