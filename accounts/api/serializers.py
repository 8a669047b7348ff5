"""The authentication settings in the API: secrets are write-only (``<secret>_set`` says whether one is stored);
omitting a secret keeps it, an empty string clears it."""

from __future__ import annotations

from rest_framework import serializers

from ..models import LdapSettings, LoginPolicy, OidcSettings, RadiusSettings
from ..services import LDAP_FIELDS, OIDC_FIELDS, POLICY_FIELDS, RADIUS_FIELDS


class SettingsSerializer(serializers.ModelSerializer):
    def get_fields(self):
        fields = super().get_fields()
        for secret in self.Meta.model.SECRETS:
            fields[secret] = serializers.CharField(
                write_only=True,
                required=False,
                allow_blank=True,
                trim_whitespace=False,
                max_length=self.Meta.model._meta.get_field(secret).max_length,
                help_text="Write-only: never shown again. Omit it to keep the stored one; an empty string clears it.",
            )
            fields[f"{secret}_set"] = serializers.SerializerMethodField(help_text="Whether one is stored.")
        return fields

    def to_representation(self, instance):
        data = super().to_representation(instance)
        for secret in self.Meta.model.SECRETS:
            data[f"{secret}_set"] = bool(getattr(instance, secret))
        return data

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for secret in cls.Meta.model.SECRETS:
            setattr(cls, f"get_{secret}_set", lambda self, obj, _s=secret: bool(getattr(obj, _s)))


class LoginPolicySerializer(SettingsSerializer):
    class Meta:
        model = LoginPolicy
        fields = POLICY_FIELDS


class LdapSettingsSerializer(SettingsSerializer):
    class Meta:
        model = LdapSettings
        fields = (*LDAP_FIELDS, "bind_password_set")


class RadiusSettingsSerializer(SettingsSerializer):
    class Meta:
        model = RadiusSettings
        fields = (*RADIUS_FIELDS, "secret_set")


class OidcSettingsSerializer(SettingsSerializer):
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
