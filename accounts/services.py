"""The only writers of the authentication settings and of second factors, each audited in its transaction.

A secret (bind password, RADIUS secret, OIDC client secret) is changed only when a new value is given: ``None``
keeps the stored one, ``""`` clears it. The audit trail records that it changed (its ``*_changed`` time), never
the value (``SingletonSettings.audit_state``).
"""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django_otp.plugins.otp_static.models import StaticDevice
from django_otp.plugins.otp_totp.models import TOTPDevice

from farms.audit import record
from lbweb.writes import validated_save

from . import second_factor
from .models import LdapSettings, LoginPolicy, OidcSettings, RadiusSettings, SingletonSettings

POLICY_FIELDS = ("local_logins", "second_factor_role")
LDAP_FIELDS = (
    "enabled",
    "server_uris",
    "security",
    "ca_certificate",
    "bind_dn",
    "bind_password",
    "user_search_base",
    "user_search_filter",
    "group_search_base",
    "group_type",
    "admin_group",
    "operator_group",
    "viewer_group",
    "timeout",
)
RADIUS_FIELDS = (
    "enabled",
    "server",
    "secondary_server",
    "port",
    "secret",
    "timeout",
    "retries",
    "require_message_authenticator",
    "nas_identifier",
    "role_attribute",
    "admin_value",
    "operator_value",
    "viewer_value",
)
OIDC_FIELDS = (
    "enabled",
    "issuer",
    "client_id",
    "client_secret",
    "ca_certificate",
    "scopes",
    "username_claim",
    "role_claim",
    "admin_value",
    "operator_value",
    "viewer_value",
    "button_label",
)
FIELDS = {
    LoginPolicy: POLICY_FIELDS,
    LdapSettings: LDAP_FIELDS,
    RadiusSettings: RADIUS_FIELDS,
    OidcSettings: OIDC_FIELDS,
}


def _update(model: type[SingletonSettings], values: dict, actor) -> SingletonSettings:
    """Validate and save the row's new values, and audit the change (before and after, secrets as "set")."""
    row = model.load()
    saved_before = model.objects.filter(pk=1).exists()
    before = row.audit_state() if saved_before else None
    values = dict(values)
    for secret, changed in model.SECRETS.items():
        value = values.pop(secret, None)
        if value is not None and value != getattr(row, secret):
            values[secret] = value
            setattr(row, changed, timezone.now())
    validated_save(row, FIELDS[model], values)
    record(actor=actor, action="update", object_type=model._meta.model_name, object_id=1, object_name=str(row),
           before=before, after=row.audit_state())  # fmt: skip
    return row


@transaction.atomic
def login_policy_update(*, actor=None, **values) -> LoginPolicy:
    """Switch local logins on or off, and set from which role up a second factor is required.

    Local logins go off only while a directory is enabled: otherwise nobody could log in at all."""
    row = _update(LoginPolicy, values, actor)
    if not row.local_logins and not _directory_enabled():
        raise ValidationError(
            {
                "local_logins": "Enable LDAP, RADIUS or single sign-on first: with local logins off, nobody else could "
                "log in."
            }  # fmt: skip
        )
    return row


def _directory_enabled() -> bool:
    return any(model.load().enabled for model in (LdapSettings, RadiusSettings, OidcSettings))


def _directory_update(model: type[SingletonSettings], values: dict, actor) -> SingletonSettings:
    row = _update(model, values, actor)
    if not row.enabled and not LoginPolicy.load().local_logins and not _directory_enabled():
        raise ValidationError(
            {
                "enabled": "Local logins are off and this is the last directory: switch local logins on first, or "
                "nobody could log in."
            }  # fmt: skip
        )
    return row


@transaction.atomic
def ldap_update(*, actor=None, **values) -> LdapSettings:
    return _directory_update(LdapSettings, values, actor)


@transaction.atomic
def radius_update(*, actor=None, **values) -> RadiusSettings:
    return _directory_update(RadiusSettings, values, actor)


@transaction.atomic
def oidc_update(*, actor=None, **values) -> OidcSettings:
    return _directory_update(OidcSettings, values, actor)


def local_logins_enable(*, actor=None) -> LoginPolicy:
    """The console's way back in (``manage.py local_logins --enable``): no check of the directories."""
    with transaction.atomic():
        row = LoginPolicy.load()
        before = row.audit_state() if row.pk and LoginPolicy.objects.filter(pk=1).exists() else None
        row.local_logins = True
        row.save()
        record(actor=actor, action="update", object_type="loginpolicy", object_id=1, object_name=str(row),
               before=before, after=row.audit_state())  # fmt: skip
    return row


# -- second factors ------------------------------------------------------------------------------------------


def totp_unconfirmed(user) -> TOTPDevice:
    """The device ``user`` is enrolling (a new secret the first time; the same one until confirmed)."""
    device = TOTPDevice.objects.filter(user=user, confirmed=False).first()
    return device or TOTPDevice.objects.create(user=user, name=second_factor.TOTP_NAME, confirmed=False)


@transaction.atomic
def totp_confirm(*, user, token: str, actor=None) -> list[str] | None:
    """Confirm the enrolling device with a code it computed: it becomes the account's second factor (any older
    one is removed) and ten recovery codes are made. Returns the codes (shown once), or None for a wrong code."""
    device = TOTPDevice.objects.select_for_update().filter(user=user, confirmed=False).first()
    if device is None or not device.verify_token("".join(token.split())):
        return None
    TOTPDevice.objects.filter(user=user, confirmed=True).delete()
    device.confirmed = True
    device.save(update_fields=["confirmed"])
    codes = second_factor.recovery_codes_new(user)
    after = {"second_factor": "authenticator app", "recovery_codes": len(codes)}
    record(actor=actor or user, action="enrol", object_type="second factor", object_id=user.pk,
           object_name=user.get_username(), after=after)  # fmt: skip
    return codes


@transaction.atomic
def recovery_codes_renew(*, user, actor=None) -> list[str]:
    codes = second_factor.recovery_codes_new(user)
    record(actor=actor or user, action="renew", object_type="second factor", object_id=user.pk,
           object_name=user.get_username(), after={"recovery_codes": len(codes)})  # fmt: skip
    return codes


@transaction.atomic
def second_factor_remove(*, user, actor=None) -> None:
    """Remove ``user``'s second factor (an admin's reset for a lost phone, or the user's own choice when the
    policy does not require one); an account the policy requires one of enrols again at its next login."""
    if actor is not None and actor.pk == user.pk and second_factor.required_by_policy(user):
        raise ValidationError("Your role must use a second factor: you can replace it, not remove it.")
    TOTPDevice.objects.filter(user=user).delete()
    StaticDevice.objects.filter(user=user).delete()
    record(actor=actor, action="remove", object_type="second factor", object_id=user.pk,
           object_name=user.get_username(), before={"second_factor": "authenticator app"}, after=None)  # fmt: skip
