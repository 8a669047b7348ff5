"""Configuration versions over the REST API: list, read, diff two, restore one (dry run first)."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import serializers, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from .. import versions
from ..models import ConfigVersion
from .serializers import DetailSerializer, ImportResultSerializer, StrictModelSerializer


class ConfigVersionSerializer(StrictModelSerializer):
    class Meta:
        model = ConfigVersion
        fields = ["id", "created", "generation", "digest", "apply_run", "farms", "backends", "policies"]


class ConfigVersionDetailSerializer(StrictModelSerializer):
    document = serializers.SerializerMethodField(help_text="The export document of this configuration.")

    class Meta:
        model = ConfigVersion
        fields = [*ConfigVersionSerializer.Meta.fields, "document"]

    @extend_schema_field(serializers.JSONField())
    def get_document(self, version: ConfigVersion) -> dict:
        return versions.document_of(version)


class FieldChangeSerializer(serializers.Serializer):
    field = serializers.CharField()
    old = serializers.JSONField(allow_null=True)
    new = serializers.JSONField(allow_null=True)


class ObjectChangeSerializer(serializers.Serializer):
    name = serializers.CharField()
    fields = FieldChangeSerializer(many=True)


class KindDiffSerializer(serializers.Serializer):
    added = serializers.ListField(child=serializers.CharField())
    removed = serializers.ListField(child=serializers.CharField())
    changed = ObjectChangeSerializer(many=True)


class ConfigDiffSerializer(serializers.Serializer):
    old = serializers.IntegerField(help_text="The version compared from.")
    new = serializers.IntegerField(help_text="The version compared to.")
    policies = KindDiffSerializer()
    farms = KindDiffSerializer()
    backends = KindDiffSerializer(help_text="Backends named farm/address:port.")
    text = serializers.CharField(help_text="Unified diff of the two documents (pretty JSON).")


class ConfigVersionViewSet(viewsets.ReadOnlyModelViewSet):
    """Every configuration the kernel held after a successful apply, newest first (deduplicated)."""

    queryset = ConfigVersion.objects.all()
    filterset_fields = ["generation"]

    def get_serializer_class(self):
        return ConfigVersionDetailSerializer if self.action == "retrieve" else ConfigVersionSerializer

    def get_queryset(self):
        queryset = super().get_queryset()
        return queryset if self.action == "retrieve" else queryset.defer("whole", "manifest")

    @extend_schema(
        summary="Compare two configuration versions",
        parameters=[
            OpenApiParameter(
                "against", int, description="The version to compare from (default: the one before this one)."
            )
        ],
        responses={200: ConfigDiffSerializer, 404: DetailSerializer},
    )
    @action(detail=True, methods=["get"])
    def diff(self, request, pk=None):
        new = self.get_object()
        against = request.query_params.get("against")
        if against is not None:
            if not against.isdigit():
                return Response({"detail": "against: a version id."}, status=400)
            old = get_object_or_404(ConfigVersion, pk=int(against))
        else:
            old = ConfigVersion.objects.filter(id__lt=new.id).first() or new
        return Response(
            {"old": old.pk, "new": new.pk, **versions.diff(versions.document_of(old), versions.document_of(new))}
        )

    @extend_schema(
        summary="Restore a configuration version",
        description=(
            "Makes the configuration the version's, through the import: all or nothing, audited as `restore`, "
            "then applied like any change. With `dry_run=1` nothing changes and the answer lists, by name, "
            "what would be created, updated and deleted."
        ),
        request=None,
        parameters=[OpenApiParameter("dry_run", bool, description="Only say what would change.")],
        responses={
            200: ImportResultSerializer,
            400: ImportResultSerializer,
            404: OpenApiResponse(DetailSerializer),
        },
    )
    @action(detail=True, methods=["post"])
    def restore(self, request, pk=None):
        dry_run = request.query_params.get("dry_run", "").lower() in ("1", "true", "yes")
        result = versions.restore(version=self.get_object(), actor=request.user, dry_run=dry_run)
        return Response(result.to_json(), status=200 if result.ok else 400)
