"""Scoped tokens of /metrics over the API (admins only): list, create (the token is shown once), revoke."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.response import Response

from farms.api.serializers import StrictModelSerializer
from farms.roles import ADMIN

from .. import services
from ..models import MetricsToken


class MetricsTokenSerializer(StrictModelSerializer):
    class Meta:
        model = MetricsToken
        fields = ["id", "name", "prefix", "created", "last_used"]
        read_only_fields = ["prefix", "created", "last_used"]


class NewMetricsTokenSerializer(MetricsTokenSerializer):
    token = serializers.CharField(read_only=True, help_text="Send as 'Authorization: Bearer <token>'. Shown once.")

    class Meta(MetricsTokenSerializer.Meta):
        fields = [*MetricsTokenSerializer.Meta.fields, "token"]


class MetricsTokenViewSet(
    mixins.ListModelMixin, mixins.CreateModelMixin, mixins.DestroyModelMixin, viewsets.GenericViewSet
):
    """Tokens that can read ``/metrics`` and nothing else (a Prometheus scraper's credential)."""

    queryset = MetricsToken.objects.all()
    serializer_class = MetricsTokenSerializer

    def role_needed(self, request) -> str:
        return ADMIN

    @extend_schema(request=MetricsTokenSerializer, responses={201: NewMetricsTokenSerializer})
    def create(self, request, *args, **kwargs):
        body = MetricsTokenSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        row, token = services.metrics_token_create(
            name=body.validated_data["name"], created_by=request.user, actor=request.user
        )
        row.token = token
        return Response(NewMetricsTokenSerializer(row).data, status=status.HTTP_201_CREATED)

    def perform_destroy(self, instance: MetricsToken) -> None:
        services.metrics_token_delete(token=instance, actor=self.request.user)
