"""The accounts' parts of a backup (``system/backup``): every account with its role and second factors, and the
authentication settings with their secrets.

``accounts``: each account's name, details, password hash (never the password: Django keeps none), flags, roles
(its groups by name), what made it (a directory's mark) and its django-otp devices (the TOTP key, the recovery
codes). A restore makes the accounts equal to the backup's, matched by name: an account the backup lacks is
deleted with its tokens and sessions. API tokens are not in a backup: they are short-lived, and a restore does not
revive one that was revoked.

``authentication``: the login policy and the LDAP, RADIUS and OpenID Connect settings, secrets included (the
archive is encrypted; the settings pages and the API still never show them). Restored through the services, so
their checks apply: a directory that local logins depend on is enabled before local logins go off.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django_otp.plugins.otp_static.models import StaticDevice, StaticToken
from django_otp.plugins.otp_totp.models import TOTPDevice

from compiler.types import Json
from farms.config_io import ImportError_, ImportResult, validation_errors

from . import services
from .models import DirectoryAccount, LdapSettings, LoginPolicy, OidcSettings, RadiusSettings

USER_FIELDS = ("username", "email", "first_name", "last_name", "password", "is_active", "is_staff", "is_superuser")
ACCOUNT_FIELDS = (*USER_FIELDS, "date_joined", "groups", "directory", "totp", "recovery")
DIRECTORY_FIELDS = ("source", "subject", "role")
TOTP_FIELDS = ("name", "confirmed", "key", "step", "t0", "digits", "tolerance", "drift", "last_t")
STATIC_FIELDS = ("name", "confirmed", "tokens")
SETTINGS = {
    "login_policy": (LoginPolicy, services.POLICY_FIELDS, services.login_policy_update),
    "ldap": (LdapSettings, services.LDAP_FIELDS, services.ldap_update),
    "radius": (RadiusSettings, services.RADIUS_FIELDS, services.radius_update),
    "oidc": (OidcSettings, services.OIDC_FIELDS, services.oidc_update),
}


def _row(obj, fields) -> Json:
    return {name: getattr(obj, name) for name in fields}


def export_accounts() -> list[Json]:
    users = get_user_model().objects.order_by("username").prefetch_related("groups")
    totp: dict[int, list[Json]] = {}
    for device in TOTPDevice.objects.order_by("name", "id"):
        totp.setdefault(device.user_id, []).append(_row(device, TOTP_FIELDS))
    recovery: dict[int, list[Json]] = {}
    for device in StaticDevice.objects.order_by("name", "id").prefetch_related("token_set"):
        tokens = sorted(t.token for t in device.token_set.all())
        recovery.setdefault(device.user_id, []).append({"name": device.name, "confirmed": device.confirmed,
                                                        "tokens": tokens})  # fmt: skip
    directory = {d.user_id: _row(d, DIRECTORY_FIELDS) for d in DirectoryAccount.objects.all()}
    return [
        {
            **_row(user, USER_FIELDS),
            "date_joined": user.date_joined.isoformat(),
            "groups": sorted(g.name for g in user.groups.all()),
            "directory": directory.get(user.pk),
            "totp": totp.get(user.pk, []),
            "recovery": recovery.get(user.pk, []),
        }
        for user in users
    ]


def _clean(result: ImportResult, where: str, obj, exclude=()) -> bool:
    try:
        obj.full_clean(exclude=list(exclude), validate_unique=False)
        return True
    except ValidationError as exc:
        result.errors.extend(validation_errors(where, exc))
        return False


def _devices_ok(result: ImportResult, where: str, entry: Json) -> bool:
    from system.backup.sections import fields_ok, items_ok

    ok = True
    for key, fields, model in (("totp", TOTP_FIELDS, TOTPDevice), ("recovery", STATIC_FIELDS, StaticDevice)):
        for index, device in enumerate(items_ok(result, f"{where}.{key}", entry.get(key) or [])):
            at = f"{where}.{key}[{index}]"
            ok = fields_ok(result, at, device, fields, model) and ok
            if key == "recovery" and isinstance(device, dict):
                tokens = device.get("tokens", [])
                if not isinstance(tokens, list) or not all(isinstance(t, str) and 0 < len(t) <= 16 for t in tokens):
                    result.errors.append(ImportError_(at, "tokens", "Must be a list of recovery codes."))
                    ok = False
    return ok


def restore_accounts(data: Any, result: ImportResult) -> None:
    from system.backup.sections import fields_ok, items_ok

    User = get_user_model()
    entries: dict[str, tuple[str, Json]] = {}
    for index, entry in enumerate(items_ok(result, "accounts", data)):
        where = f"accounts[{index}]"
        if not fields_ok(result, where, entry, ACCOUNT_FIELDS, User) or not _devices_ok(result, where, entry):
            continue
        groups = entry.get("groups") or []
        if not isinstance(groups, list) or not all(isinstance(g, str) and g for g in groups):
            result.errors.append(ImportError_(where, "groups", "Must be a list of role names."))
            continue
        directory = entry.get("directory")
        if directory is not None and not fields_ok(result, f"{where}.directory", directory, DIRECTORY_FIELDS):
            continue
        name = entry.get("username")
        if name in entries:
            result.errors.append(ImportError_(where, "username", f"Account '{name}' appears twice."))
            continue
        entries[name] = (where, entry)
    for user in User.objects.exclude(username__in=list(entries)):
        user.delete()
        result.count("accounts", "deleted", user.username)
    existing = {u.username: u for u in User.objects.all()}
    for name, (where, entry) in entries.items():
        _account(result, where, entry, existing.get(name))


def _account(result: ImportResult, where: str, entry: Json, user) -> None:
    from django.utils.dateparse import parse_datetime

    User = get_user_model()
    before = None if user is None else _account_state(user)
    user = user or User()
    for name in USER_FIELDS:
        setattr(user, name, entry.get(name, User._meta.get_field(name).get_default()))
    joined = entry.get("date_joined")
    if isinstance(joined, str) and parse_datetime(joined):
        user.date_joined = parse_datetime(joined)
    if not _clean(result, where, user):
        return
    user.save()
    user.groups.set([Group.objects.get_or_create(name=g)[0] for g in entry.get("groups") or []])
    DirectoryAccount.objects.filter(user=user).delete()
    if entry.get("directory"):
        account = DirectoryAccount(user=user, **entry["directory"])
        if _clean(result, f"{where}.directory", account, exclude=["user"]):
            account.save()
    TOTPDevice.objects.filter(user=user).delete()
    StaticDevice.objects.filter(user=user).delete()
    for index, values in enumerate(entry.get("totp") or []):
        device = TOTPDevice(user=user, **values)
        if _clean(result, f"{where}.totp[{index}]", device, exclude=["user"]):
            device.save()
    for index, values in enumerate(entry.get("recovery") or []):
        device = StaticDevice(user=user, name=values.get("name", ""), confirmed=values.get("confirmed", True))
        if _clean(result, f"{where}.recovery[{index}]", device, exclude=["user"]):
            device.save()
            StaticToken.objects.bulk_create(StaticToken(device=device, token=t) for t in values.get("tokens", []))
    if before is None:
        result.count("accounts", "created", user.username)
    elif before == _account_state(user):
        result.count("accounts", "unchanged")
    else:
        result.count("accounts", "updated", user.username)


def _account_state(user) -> Json:
    return next(a for a in export_accounts() if a["username"] == user.username)


def export_authentication() -> Json:
    out = {}
    for key, (model, fields, _update) in SETTINGS.items():
        row = model.load()
        out[key] = {name: getattr(row, name) for name in fields}
    return out


def restore_authentication(data: Any, result: ImportResult) -> None:
    """The directories, then the login policy; when the backup's policy lets local accounts in, that goes first
    (switching a directory off may need local logins on)."""
    from system.backup.sections import attempt, fields_ok

    if not isinstance(data, dict):
        result.errors.append(ImportError_("authentication", "__all__", "Must be an object."))
        return
    for name in sorted(set(data) - set(SETTINGS)):
        result.errors.append(ImportError_("authentication", name, f"Unknown field '{name}'."))
    policy = data.get("login_policy")
    order = ["ldap", "radius", "oidc", "login_policy"]
    if isinstance(policy, dict) and policy.get("local_logins", True) is True:
        order = ["login_policy", "ldap", "radius", "oidc"]
    for key in order:
        if key not in data:
            continue
        model, fields, update = SETTINGS[key]
        where = f"authentication.{key}"
        if not fields_ok(result, where, data[key], fields, model):
            continue
        current = export_authentication()[key]
        values = {**{n: model._meta.get_field(n).get_default() for n in fields}, **data[key]}
        if current == values:
            result.count("authentication", "unchanged")
        elif attempt(result, where, lambda u=update, v=values: u(**v)):
            result.count("authentication", "updated", key)


def register() -> None:
    from system.backup import sections

    sections.register("accounts", order=40, export=export_accounts, restore=restore_accounts)
    sections.register("authentication", order=50, export=export_authentication, restore=restore_authentication)
