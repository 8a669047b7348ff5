"""The authentication settings in the API: secrets are write-only (``<secret>_set`` says whether one is stored);
omitting a secret keeps it, an empty string clears it."""

from __future__ import annotations

from rest_framework import serializers

from ..models import LdapSettings, LoginPolicy, OidcSettings, RadiusSettings
from ..services import LDAP_FIELDS, OIDC_FIELDS, POLICY_FIELDS, RADIUS_FIELDS


def secret_field(max_length: int) -> serializers.CharField:
    return serializers.CharField(
        write_only=True,
        required=False,
        allow_blank=True,
        trim_whitespace=False,
        max_length=max_length,
        help_text="Write-only: never shown again. Omit it to keep the stored one; an empty string clears it.",
    )


def is_set(name: str) -> serializers.SerializerMethodField:
    return serializers.SerializerMethodField(method_name="secret_is_set", help_text=f"Whether a {name} is stored.")


class SettingsSerializer(serializers.ModelSerializer):
    def secret_is_set(self, obj) -> bool:
        return all(bool(getattr(obj, secret)) for secret in obj.SECRETS)


class LoginPolicySerializer(SettingsSerializer):
    class Meta:
        model = LoginPolicy
        fields = POLICY_FIELDS


class LdapSettingsSerializer(SettingsSerializer):
    bind_password = secret_field(500)
    bind_password_set = is_set("bind password")

    class Meta:
        model = LdapSettings
        fields = (*LDAP_FIELDS, "bind_password_set")


class RadiusSettingsSerializer(SettingsSerializer):
    secret = secret_field(128)
    secret_set = is_set("shared secret")

    class Meta:
        model = RadiusSettings
        fields = (*RADIUS_FIELDS, "secret_set")


class OidcSettingsSerializer(SettingsSerializer):
    client_secret = secret_field(500)
    client_secret_set = is_set("client secret")

    class Meta:
        model = OidcSettings
        fields = (*OIDC_FIELDS, "client_secret_set")


class TestSerializer(serializers.Serializer):
    username = serializers.CharField(required=False, allow_blank=True, max_length=150)
    password = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False, write_only=True)


class StepSerializer(serializers.Serializer):
    step = serializers.CharField()
    ok = serializers.BooleanField()
    detail = serializers.CharField()


class TestResultSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    reason = serializers.CharField(help_text="The first failing step's words, or what the test proved.")
    role = serializers.CharField(allow_null=True)
    steps = StepSerializer(many=True)
