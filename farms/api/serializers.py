"""REST serializers. Validation is the model's ``clean()``; writes go through services."""

from __future__ import annotations

import copy

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from .. import health_services, services
from ..choices import FarmTrafficChoices
from ..models import ApplyRun, Backend, Farm, HealthCheck, HealthEvent

HEALTH_FIELDS = ["health", "health_changed", "health_reason"]


def _full_clean(instance) -> None:
    try:
        instance.full_clean()
    except DjangoValidationError as exc:
        raise serializers.ValidationError(exc.message_dict) from exc


class ModelCleanMixin:
    """Validation is the model's own ``clean()``: the UI and the API refuse the same input with the same words."""

    def validate(self, attrs: dict) -> dict:
        candidate = copy.copy(self.instance) if self.instance else self.Meta.model()
        for name, value in attrs.items():
            setattr(candidate, name, value)
        _full_clean(candidate)
        return {name: getattr(candidate, name) for name in attrs}


class ApplyStatusSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=["applied", "pending", "failed"])
    config_generation = serializers.IntegerField()
    applied_generation = serializers.IntegerField()
    error = serializers.CharField(allow_blank=True)


class NestedBackendSerializer(serializers.ModelSerializer):
    class Meta:
        model = Backend
        fields = ["id", "address", "port", "weight", "state", *HEALTH_FIELDS]


HEALTH_CHECK_FIELDS = list(health_services.HEALTH_CHECK_FIELDS)


class EffectiveHealthCheckSerializer(serializers.ModelSerializer):
    """The check healthd runs for a farm: its own (configured) or its protocol's default."""

    configured = serializers.SerializerMethodField()

    class Meta:
        model = HealthCheck
        fields = ["id", "configured", *HEALTH_CHECK_FIELDS]

    def get_configured(self, check: HealthCheck) -> bool:
        return check.pk is not None


class FarmSerializer(ModelCleanMixin, serializers.ModelSerializer):
    url = serializers.HyperlinkedIdentityField(view_name="farms-api:farm-detail")
    backends = NestedBackendSerializer(many=True, read_only=True)
    apply_status = serializers.SerializerMethodField()
    traffic = serializers.ChoiceField(
        choices=FarmTrafficChoices.choices,
        read_only=True,
        help_text="Where new connections go now: balanced, fallback, rejected (no active backend), or off.",
    )
    health_check = serializers.SerializerMethodField()

    class Meta:
        model = Farm
        fields = [
            "id",
            "url",
            "name",
            "description",
            "vip",
            "protocol",
            "ports",
            "mode",
            "scheduler",
            "state",
            "when_all_down",
            "fallback_address",
            "fallback_port",
            "traffic",
            "health_check",
            "backends",
            "apply_status",
            "created",
            "updated",
        ]
        # The model's clean() reports duplicates with a clearer message than DRF's generic one.
        extra_kwargs = {"name": {"validators": []}}

    @extend_schema_field(ApplyStatusSerializer)
    def get_apply_status(self, farm: Farm) -> dict:
        return {
            "status": farm.apply_status,
            "config_generation": farm.config_generation,
            "applied_generation": farm.applied_generation,
            "error": farm.apply_error if farm.apply_status == "failed" else "",
        }

    @extend_schema_field(EffectiveHealthCheckSerializer)
    def get_health_check(self, farm: Farm) -> dict:
        return EffectiveHealthCheckSerializer(HealthCheck.effective_for(farm)).data

    def create(self, validated_data: dict) -> Farm:
        return services.farm_create(**validated_data)

    def update(self, instance: Farm, validated_data: dict) -> Farm:
        return services.farm_update(farm=instance, **validated_data)


class BackendSerializer(ModelCleanMixin, serializers.ModelSerializer):
    url = serializers.HyperlinkedIdentityField(view_name="farms-api:backend-detail")
    farm = serializers.PrimaryKeyRelatedField(queryset=Farm.objects.all())

    class Meta:
        model = Backend
        fields = [
            "id",
            "url",
            "farm",
            "address",
            "port",
            "weight",
            "state",
            *HEALTH_FIELDS,
            "created",
            "updated",
        ]
        validators = []  # the model's clean() words the duplicate check

    def create(self, validated_data: dict) -> Backend:
        return services.backend_create(**validated_data)

    def update(self, instance: Backend, validated_data: dict) -> Backend:
        if "farm" in validated_data and validated_data["farm"] != instance.farm:
            raise serializers.ValidationError({"farm": "A backend cannot move to another farm; create a new one."})
        validated_data.pop("farm", None)
        return services.backend_update(backend=instance, **validated_data)


class HealthCheckSerializer(ModelCleanMixin, serializers.ModelSerializer):
    url = serializers.HyperlinkedIdentityField(view_name="farms-api:healthcheck-detail")
    farm = serializers.PrimaryKeyRelatedField(queryset=Farm.objects.all())

    class Meta:
        model = HealthCheck
        fields = ["id", "url", "farm", *HEALTH_CHECK_FIELDS, "created", "updated"]
        validators = []

    def validate_farm(self, farm: Farm) -> Farm:
        if self.instance is None and HealthCheck.objects.filter(farm=farm).exists():
            raise serializers.ValidationError(f"Farm '{farm.name}' already has a health check; change that one.")
        if self.instance is not None and farm != self.instance.farm:
            raise serializers.ValidationError("A health check cannot move to another farm.")
        return farm

    def create(self, validated_data: dict) -> HealthCheck:
        return health_services.health_check_create(**validated_data)

    def update(self, instance: HealthCheck, validated_data: dict) -> HealthCheck:
        validated_data.pop("farm", None)
        return health_services.health_check_update(health_check=instance, **validated_data)


class HealthEventSerializer(serializers.ModelSerializer):
    farm = serializers.IntegerField(source="backend.farm_id", read_only=True)
    backend_name = serializers.CharField(source="backend.__str__", read_only=True)

    class Meta:
        model = HealthEvent
        fields = ["id", "backend", "backend_name", "farm", "time", "previous", "current", "reason"]


class HealthStatusSerializer(serializers.Serializer):
    """healthd's liveness as its heartbeat tells it, and how many backends are in each health."""

    state = serializers.ChoiceField(choices=["running", "stopped", "never_seen", "unknown"])
    detail = serializers.CharField()
    age_seconds = serializers.FloatField(required=False)
    stale_after_seconds = serializers.FloatField()
    checks_per_second = serializers.FloatField(required=False)
    backends_checked = serializers.IntegerField(required=False, source="backends")
    local_errors = serializers.IntegerField(required=False)
    last_local_error = serializers.CharField(required=False)
    health_counts = serializers.DictField(child=serializers.IntegerField())


class ApplyRunSerializer(serializers.ModelSerializer):
    class Meta:
        model = ApplyRun
        fields = [
            "id",
            "generation",
            "kind",
            "reason",
            "started",
            "duration_ms",
            "ok",
            "error",
            "digest",
            "farms_changed",
            "commands",
        ]
