"""REST viewsets, declared: queryset, serializer, filterset; non-CRUD actions enqueue worker tasks."""

from __future__ import annotations

import json
import time
import uuid

from django.db.models import Count
from drf_spectacular.utils import extend_schema
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from lbweb.redis_client import get_redis
from monitoring.health import heartbeat

from .. import health_services, services
from ..filtersets import ApplyRunFilterSet, BackendFilterSet, FarmFilterSet, HealthEventFilterSet
from ..models import ApplyRun, Backend, Farm, HealthCheck, HealthEvent, Policy, StaticSession
from .serializers import (
    ApplyRunSerializer,
    BackendSerializer,
    FarmSerializer,
    HealthCheckSerializer,
    HealthEventSerializer,
    HealthStatusSerializer,
    LiveSessionSerializer,
    MaintenanceSerializer,
    PolicySerializer,
    SessionFlushSerializer,
    StaticSessionSerializer,
)

WORKER_ANSWER_SECONDS = 5


class FarmViewSet(viewsets.ModelViewSet):
    queryset = Farm.objects.select_related("health_check").prefetch_related("backends", "policies")
    serializer_class = FarmSerializer
    filterset_class = FarmFilterSet

    def perform_destroy(self, instance: Farm) -> None:
        services.farm_delete(farm=instance)

    @extend_schema(responses=LiveSessionSerializer(many=True))
    @action(detail=True, methods=["get"])
    def sessions(self, request, pk=None):
        """The farm's live persistence entries, read from the kernel by the worker."""
        farm = self.get_object()
        request_id = uuid.uuid4().hex
        from ..tasks import report_sessions

        try:
            report_sessions.apply_async(kwargs={"farm_id": farm.id, "request_id": request_id}, retry=False)
            redis = get_redis()
            deadline = time.monotonic() + WORKER_ANSWER_SECONDS
            while time.monotonic() < deadline:
                raw = redis.get(f"lbweb:sessions:{request_id}")
                if raw:
                    answer = json.loads(raw)
                    if not answer["ok"]:
                        return Response({"detail": answer["error"]}, status=status.HTTP_502_BAD_GATEWAY)
                    return Response(answer["sessions"])
                time.sleep(0.05)
        except Exception as exc:  # broker or Redis down
            return Response({"detail": f"the dataplane worker is unreachable: {exc}"}, status=503)
        return Response({"detail": f"the dataplane worker did not answer within {WORKER_ANSWER_SECONDS} s"}, status=503)

    @extend_schema(request=SessionFlushSerializer, responses={202: None})
    @action(detail=True, methods=["post"], url_path="sessions/flush")
    def flush_sessions(self, request, pk=None):
        """Forget learnt persistence entries: all, one backend's (``backend``) or one client's (``client``)."""
        farm = self.get_object()
        body = SessionFlushSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        backend = None
        if body.validated_data.get("backend") is not None:
            backend = farm.backends.filter(id=body.validated_data["backend"]).first()
            if backend is None:
                return Response({"backend": [f"Farm '{farm.name}' has no backend with that id."]}, status=400)
        services.flush_learnt_sessions(farm=farm, backend=backend, client=body.validated_data.get("client"))
        return Response(status=status.HTTP_202_ACCEPTED)


class BackendViewSet(viewsets.ModelViewSet):
    queryset = Backend.objects.select_related("farm")
    serializer_class = BackendSerializer
    filterset_class = BackendFilterSet

    def perform_destroy(self, instance: Backend) -> None:
        services.backend_delete(backend=instance)

    @extend_schema(request=MaintenanceSerializer, responses=BackendSerializer)
    @action(detail=True, methods=["post"])
    def maintenance(self, request, pk=None):
        """Take the backend out of service: ``drain`` (connections end by themselves) or ``cut`` (now)."""
        body = MaintenanceSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        backend = services.backend_maintenance(backend=self.get_object(), mode=body.validated_data["mode"])
        return Response(BackendSerializer(backend, context={"request": request}).data)


class PolicyViewSet(viewsets.ModelViewSet):
    queryset = Policy.objects.prefetch_related("farms")
    serializer_class = PolicySerializer
    filterset_fields = ["name", "type"]

    def perform_destroy(self, instance: Policy) -> None:
        services.policy_delete(policy=instance)


class StaticSessionViewSet(viewsets.ModelViewSet):
    queryset = StaticSession.objects.select_related("farm", "backend")
    serializer_class = StaticSessionSerializer
    filterset_fields = ["farm", "backend"]
    http_method_names = ["get", "post", "delete", "head", "options"]

    def perform_destroy(self, instance: StaticSession) -> None:
        services.session_delete(session=instance)


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


class CapabilitiesView(APIView):
    """What the kernel under the worker can do, as the worker probed it at start (dry runs)."""

    @extend_schema(responses={200: {"type": "object", "additionalProperties": {"type": "boolean"}}})
    def get(self, request):
        try:
            raw = get_redis().get("lbweb:capabilities")
        except Exception as exc:
            return Response({"detail": f"Redis is unreachable: {exc}"}, status=503)
        if raw is None:
            return Response({"detail": "the dataplane worker has not reported the kernel's capabilities yet"}, 503)
        return Response(json.loads(raw))
