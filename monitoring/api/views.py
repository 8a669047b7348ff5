"""Metrics endpoints: a summary and one series per subject (the system, each farm), read from Redis."""

from __future__ import annotations

import redis
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.exceptions import APIException
from rest_framework.response import Response
from rest_framework.views import APIView

from farms.api.serializers import DetailSerializer
from farms.models import Farm
from lbweb import heartbeat

from .. import selectors
from ..store import metric_store
from .serializers import FarmSeriesSerializer, SeriesQuerySerializer, SeriesSerializer, SummarySerializer

UNAVAILABLE = OpenApiResponse(DetailSerializer, description="The metrics store (Redis) cannot be reached.")


class MetricsUnavailable(APIException):
    status_code = 503
    default_detail = "The metrics store (Redis) cannot be reached."
    default_code = "metrics_unavailable"


class MetricsView(APIView):
    """Base: turns a Redis outage into a 503 the dashboard can show."""

    def handle_exception(self, exc):
        if isinstance(exc, redis.RedisError):
            exc = MetricsUnavailable(f"The metrics store (Redis) cannot be reached: {exc}")
        return super().handle_exception(exc)

    def query(self, request) -> dict:
        query = SeriesQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        return query.validated_data


@extend_schema(
    tags=["metrics"],
    responses={200: SummarySerializer, 503: UNAVAILABLE},
    summary="Newest figures of the system and every farm",
)
class MetricsSummaryView(MetricsView):
    def get(self, request):
        status = heartbeat.read_status()
        healthd = {key: status[key] for key in ("state", "detail")}
        return Response({**selectors.summary(metric_store()), "healthd": healthd})


@extend_schema(
    tags=["metrics"],
    parameters=[SeriesQuerySerializer],
    responses={200: SeriesSerializer, 503: UNAVAILABLE},
    summary="System series: connections, throughput, CPU per core, conntrack, links",
)
class SystemSeriesView(MetricsView):
    def get(self, request):
        query = self.query(request)
        return Response(selectors.system_series(metric_store(), query["window"], query.get("since")))


@extend_schema(
    tags=["metrics"],
    parameters=[SeriesQuerySerializer],
    responses={200: FarmSeriesSerializer, 503: UNAVAILABLE},
    summary="Farm series: throughput, new and active connections, SNAT ports, per backend",
)
class FarmSeriesView(MetricsView):
    def get(self, request, farm_id: int):
        farm = get_object_or_404(Farm.objects.prefetch_related("backends"), pk=farm_id)
        query = self.query(request)
        return Response(selectors.farm_series(metric_store(), farm, query["window"], query.get("since")))
