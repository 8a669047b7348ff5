"""REST serializers. Validation is the model's ``clean()``; writes go through services."""

from __future__ import annotations

import copy

from django.core.exceptions import FieldDoesNotExist
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import models
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from .. import health_services, services
from ..choices import ApplyStatusChoices, BackendStateChoices, FarmTrafficChoices
from ..fields import AddressField
from ..models import ApplyRun, AuditEvent, Backend, Farm, HealthCheck, HealthEvent, Policy, StaticSession
from ..specs import farm_traffic
from .fields import StrictIntegerField, StrictIPAddressField

HEALTH_FIELDS = ["health", "health_changed", "health_reason"]


class StrictModelSerializer(serializers.ModelSerializer):
    """Every model serializer: addresses keep their zone id only to refuse it, integers are ASCII digits."""

    serializer_field_mapping = {
        **serializers.ModelSerializer.serializer_field_mapping,
        AddressField: StrictIPAddressField,
        **{
            kind: StrictIntegerField
            for kind in (
                models.IntegerField,
                models.SmallIntegerField,
                models.BigIntegerField,
                models.PositiveIntegerField,
                models.PositiveSmallIntegerField,
                models.PositiveBigIntegerField,
            )
        },
    }


class ModelCleanMixin:
    """Validation is the model's own ``clean()``: the UI and the API refuse the same input with the same words.

    It runs on a copy of the row being changed (a new row for a create) carrying the new values: a copy of the
    row keeps its identity, so the uniqueness checks exclude the row itself. The values come back as ``clean()``
    left them (normalised); many-to-many values pass through untouched (the service sets them after the save).
    """

    def validate(self, attrs: dict) -> dict:
        candidate = copy.copy(self.instance) if self.instance is not None else self.Meta.model()
        related = {name: attrs[name] for name in attrs if _many_to_many(candidate, name)}
        for name, value in attrs.items():
            if name not in related:
                setattr(candidate, name, value)
        try:
            candidate.full_clean()
        except DjangoValidationError as exc:
            raise serializers.ValidationError(exc.message_dict) from exc
        return {name: related[name] if name in related else getattr(candidate, name) for name in attrs}


def _many_to_many(instance: models.Model, name: str) -> bool:
    try:
        return instance._meta.get_field(name).many_to_many
    except FieldDoesNotExist:
        return False


def actor_of(serializer) -> object | None:
    """The user a serializer's write is recorded against in the audit trail (None: the system)."""
    request = serializer.context.get("request")
    return getattr(request, "user", None)


class ApplyStatusSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=ApplyStatusChoices.values)
    config_generation = serializers.IntegerField()
    applied_generation = serializers.IntegerField()
    error = serializers.CharField(allow_blank=True)


class SnatCapacitySerializer(serializers.Serializer):
    addresses = serializers.IntegerField()
    ports = serializers.IntegerField()
    per_backend = serializers.IntegerField(help_text="Concurrent connections towards one backend address:port.")


class NestedBackendSerializer(StrictModelSerializer):
    class Meta:
        model = Backend
        fields = ["id", *services.BACKEND_FIELDS, *HEALTH_FIELDS]


HEALTH_CHECK_FIELDS = list(health_services.HEALTH_CHECK_FIELDS)


class EffectiveHealthCheckSerializer(StrictModelSerializer):
    """The check healthd runs for a farm: its own (configured) or its protocol's default."""

    id = serializers.IntegerField(read_only=True, allow_null=True, help_text="null: the protocol's default, not saved.")
    configured = serializers.SerializerMethodField()

    class Meta:
        model = HealthCheck
        fields = ["id", "configured", *HEALTH_CHECK_FIELDS]

    def get_configured(self, check: HealthCheck) -> bool:
        return check.pk is not None


class TrafficField(serializers.ChoiceField):
    """A farm's traffic (``farms.specs.farm_traffic``): the compiler's decision, not a column."""

    def __init__(self, **kwargs):
        super().__init__(source="*", **kwargs)

    def to_representation(self, farm: Farm) -> str:
        return farm_traffic(farm)


class FarmSerializer(ModelCleanMixin, StrictModelSerializer):
    url = serializers.HyperlinkedIdentityField(view_name="farms-api:farm-detail")
    backends = NestedBackendSerializer(many=True, read_only=True)
    apply_status = serializers.SerializerMethodField()
    traffic = TrafficField(
        choices=FarmTrafficChoices.choices,
        read_only=True,
        help_text="Where new connections go now: balanced, fallback, rejected (no active backend), or off.",
    )
    health_check = serializers.SerializerMethodField()
    snat_capacity = serializers.SerializerMethodField()
    policies = serializers.SlugRelatedField(
        many=True, slug_field="name", queryset=Policy.objects.all(), required=False, help_text="Policy names."
    )

    class Meta:
        model = Farm
        fields = [
            "id",
            "url",
            *services.FARM_FIELDS,
            "policies",
            "traffic",
            "health_check",
            "backends",
            "apply_status",
            "snat_capacity",
            "created",
            "updated",
        ]
        read_only_fields = ["snat_capacity"]
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

    @extend_schema_field(SnatCapacitySerializer(allow_null=True))
    def get_snat_capacity(self, farm: Farm) -> dict | None:
        try:
            return farm.snat_capacity
        except ValueError:
            return None

    def create(self, validated_data: dict) -> Farm:
        return services.farm_create(actor=actor_of(self), **validated_data)

    def update(self, instance: Farm, validated_data: dict) -> Farm:
        return services.farm_update(farm=instance, actor=actor_of(self), **validated_data)


class BackendSerializer(ModelCleanMixin, StrictModelSerializer):
    url = serializers.HyperlinkedIdentityField(view_name="farms-api:backend-detail")
    farm = serializers.PrimaryKeyRelatedField(queryset=Farm.objects.all())

    class Meta:
        model = Backend
        fields = ["id", "url", "farm", *services.BACKEND_FIELDS, *HEALTH_FIELDS, "created", "updated"]
        validators = []  # the model's clean() words the duplicate check

    def create(self, validated_data: dict) -> Backend:
        return services.backend_create(actor=actor_of(self), **validated_data)

    def update(self, instance: Backend, validated_data: dict) -> Backend:
        if "farm" in validated_data and validated_data["farm"] != instance.farm:
            raise serializers.ValidationError({"farm": "A backend cannot move to another farm; create a new one."})
        validated_data.pop("farm", None)
        return services.backend_update(backend=instance, actor=actor_of(self), **validated_data)


class HealthCheckSerializer(ModelCleanMixin, StrictModelSerializer):
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
        return health_services.health_check_create(actor=actor_of(self), **validated_data)

    def update(self, instance: HealthCheck, validated_data: dict) -> HealthCheck:
        validated_data.pop("farm", None)
        return health_services.health_check_update(health_check=instance, actor=actor_of(self), **validated_data)


class HealthEventSerializer(StrictModelSerializer):
    farm = serializers.IntegerField(source="backend.farm_id", read_only=True)
    backend_name = serializers.CharField(source="backend.__str__", read_only=True)

    class Meta:
        model = HealthEvent
        fields = ["id", "backend", "backend_name", "farm", "time", "previous", "current", "reason"]


class HealthStatusSerializer(serializers.Serializer):
    """healthd's liveness as its heartbeat tells it, and how many backends are in each health."""

    state = serializers.ChoiceField(choices=["running", "impaired", "stopped", "never_seen", "unknown"])
    detail = serializers.CharField()
    age_seconds = serializers.FloatField(required=False)
    stale_after_seconds = serializers.FloatField()
    checks_per_second = serializers.FloatField(required=False)
    backends_checked = serializers.IntegerField(required=False, source="backends")
    local_errors = serializers.IntegerField(required=False)
    last_local_error = serializers.CharField(required=False)
    last_local_error_at = serializers.FloatField(required=False, allow_null=True)
    health_counts = serializers.DictField(child=serializers.IntegerField())


class ProcessStateSerializer(serializers.Serializer):
    state = serializers.ChoiceField(
        choices=["running", "impaired", "stopped", "never_seen", "unknown"],
        help_text="impaired: it lives (fresh heartbeat) but its work stopped, e.g. a collector that samples nothing.",
    )
    detail = serializers.CharField()
    age_seconds = serializers.FloatField(required=False, help_text="Seconds since its last heartbeat.")


class PendingChangesSerializer(serializers.Serializer):
    changes = serializers.IntegerField(help_text="Farms whose configuration the kernel does not have yet.")
    waiting_seconds = serializers.FloatField(help_text="How long the oldest of them has waited.")
    stalled = serializers.BooleanField(help_text="Waiting longer than LBWEB_APPLY_STALL_SECONDS.")


class StatusSerializer(serializers.Serializer):
    """Liveness of every process (worker, beat, collector, healthd) and of the apply pipeline."""

    processes = serializers.DictField(child=ProcessStateSerializer())
    pending = PendingChangesSerializer()
    alerts = serializers.ListField(
        child=serializers.CharField(), help_text="What a person must see, e.g. 'worker not running'; empty if well."
    )


class ApplyRunSerializer(StrictModelSerializer):
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
            "writer",
            "drift",
        ]


class PolicySerializer(ModelCleanMixin, StrictModelSerializer):
    url = serializers.HyperlinkedIdentityField(view_name="farms-api:policy-detail")
    farms = serializers.SlugRelatedField(many=True, slug_field="name", read_only=True)

    class Meta:
        model = Policy
        fields = ["id", "url", *services.POLICY_FIELDS, "farms"]
        extra_kwargs = {"name": {"validators": []}}

    def create(self, validated_data: dict) -> Policy:
        return services.policy_create(actor=actor_of(self), **validated_data)

    def update(self, instance: Policy, validated_data: dict) -> Policy:
        return services.policy_update(policy=instance, actor=actor_of(self), **validated_data)


class StaticSessionSerializer(ModelCleanMixin, StrictModelSerializer):
    farm = serializers.PrimaryKeyRelatedField(queryset=Farm.objects.all())
    backend = serializers.PrimaryKeyRelatedField(queryset=Backend.objects.all())

    class Meta:
        model = StaticSession
        fields = ["id", "farm", "client", "backend"]
        validators = []

    def create(self, validated_data: dict) -> StaticSession:
        return services.session_create(actor=actor_of(self), **validated_data)


class LiveSessionSerializer(serializers.Serializer):
    client = serializers.CharField()
    backend = serializers.IntegerField(allow_null=True)
    static = serializers.BooleanField()
    expires_in = serializers.IntegerField(allow_null=True, help_text="Milliseconds left; null for a static session.")


class LiveSessionsSerializer(serializers.Serializer):
    read_at = serializers.DateTimeField(help_text="When the worker read them from the kernel.")
    age = serializers.FloatField(help_text="Seconds since then (also in the Age header).")
    sessions = LiveSessionSerializer(many=True)


class SessionsPendingSerializer(serializers.Serializer):
    detail = serializers.CharField()
    asked_seconds_ago = serializers.FloatField(help_text="When the worker was asked to read them (it has not yet).")
    retry_after = serializers.IntegerField(help_text="Seconds to wait before asking again (also in Retry-After).")


class SessionsQuerySerializer(serializers.Serializer):
    max_age = StrictIntegerField(
        required=False,
        min_value=0,
        max_value=3600,
        default=5,
        help_text="The oldest snapshot, in seconds, the caller accepts; older ones are read again (202).",
    )


class DetailSerializer(serializers.Serializer):
    detail = serializers.CharField()


class SessionFlushSerializer(serializers.Serializer):
    backend = StrictIntegerField(required=False, allow_null=True)
    client = serializers.CharField(required=False, allow_blank=False)


class MaintenanceSerializer(serializers.Serializer):
    mode = serializers.ChoiceField(choices=["drain", "cut"])


class BulkStateSerializer(serializers.Serializer):
    """Several backends (of any farms) put in one state at once, all or nothing."""

    backends = serializers.ListField(
        child=serializers.IntegerField(min_value=1), min_length=1, max_length=10000, help_text="Backend ids."
    )
    state = serializers.ChoiceField(choices=BackendStateChoices.choices)


class BulkStateResultSerializer(serializers.Serializer):
    changed = serializers.ListField(
        child=serializers.IntegerField(), help_text="The backends whose state changed (the others already had it)."
    )
    state = serializers.CharField()


class PreviewSerializer(serializers.Serializer):
    changed = serializers.BooleanField(help_text="False when the edit changes nothing in the kernel.")
    summary = serializers.ListField(
        child=serializers.CharField(),
        help_text="The change in plain words, one line each (e.g. '+ VIP 198.18.50.1 tcp/80,443').",
    )
    commands = serializers.JSONField(
        help_text='The nftables JSON transaction the worker would send: {"nftables": [...]}.'
    )
    diff = serializers.CharField(help_text="Unified diff of the farm's compiled objects (pretty JSON), now -> after.")
    notes = serializers.ListField(child=serializers.CharField(), help_text="What the preview cannot know exactly.")


class AuditEventSerializer(StrictModelSerializer):
    class Meta:
        model = AuditEvent
        fields = [
            "id",
            "time",
            "actor",
            "actor_name",
            "action",
            "object_type",
            "object_id",
            "object_name",
            "farm_ref",
            "before",
            "after",
        ]


class ImportErrorSerializer(serializers.Serializer):
    location = serializers.CharField(help_text="Where in the document, e.g. farms[2].backends[0] (empty: the top).")
    field = serializers.CharField(help_text="The field at fault; __all__ for the object as a whole.")
    message = serializers.CharField()


class ImportResultSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    dry_run = serializers.BooleanField()
    errors = ImportErrorSerializer(many=True)
    counts = serializers.DictField(
        child=serializers.DictField(child=serializers.IntegerField()),
        help_text="Per kind (farms, backends, policies): created, updated, deleted, unchanged.",
    )
    changes = serializers.DictField(
        child=serializers.DictField(child=serializers.ListField(child=serializers.CharField())),
        help_text="Per kind, the names created, updated and deleted (a backend as farm/address:port); "
        "a dry run lists what the import would do.",
    )
