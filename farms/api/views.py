"""REST viewsets, declared: queryset, serializer, filterset."""

from django.db.models import Count
from drf_spectacular.utils import extend_schema
from rest_framework import viewsets
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from monitoring.health import heartbeat

from .. import health_services, services
from ..filtersets import ApplyRunFilterSet, BackendFilterSet, FarmFilterSet, HealthEventFilterSet
from ..models import ApplyRun, Backend, Farm, HealthCheck, HealthEvent
from .serializers import (
    ApplyRunSerializer,
    BackendSerializer,
    FarmSerializer,
    HealthCheckSerializer,
    HealthEventSerializer,
    HealthStatusSerializer,
)


class FarmViewSet(viewsets.ModelViewSet):
    queryset = Farm.objects.select_related("health_check").prefetch_related("backends")
    serializer_class = FarmSerializer
    filterset_class = FarmFilterSet

    def perform_destroy(self, instance: Farm) -> None:
        services.farm_delete(farm=instance)


class BackendViewSet(viewsets.ModelViewSet):
    queryset = Backend.objects.select_related("farm")
    serializer_class = BackendSerializer
    filterset_class = BackendFilterSet

    def perform_destroy(self, instance: Backend) -> None:
        services.backend_delete(backend=instance)


class ApplyRunViewSet(viewsets.ReadOnlyModelViewSet):
    queryset = ApplyRun.objects.all()
    serializer_class = ApplyRunSerializer
    filterset_class = ApplyRunFilterSet


class HealthCheckViewSet(viewsets.ModelViewSet):
    queryset = HealthCheck.objects.select_related("farm")
    serializer_class = HealthCheckSerializer
    filterset_fields = ["farm", "type"]

    def perform_destroy(self, instance: HealthCheck) -> None:
        health_services.health_check_delete(health_check=instance)


class HealthEventViewSet(viewsets.ReadOnlyModelViewSet):
    queryset = HealthEvent.objects.select_related("backend")
    serializer_class = HealthEventSerializer
    filterset_class = HealthEventFilterSet


class HealthStatusView(APIView):
    """Is healthd running? A stale heartbeat means health checking stopped (backends keep their last health)."""

    @extend_schema(responses=HealthStatusSerializer)
    def get(self, request: Request) -> Response:
        counts = dict(Backend.objects.values_list("health").annotate(n=Count("id")))
        status = {**heartbeat.read_status(), "health_counts": counts}
        return Response(HealthStatusSerializer(status).data)
