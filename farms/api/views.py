"""REST viewsets, declared: queryset, serializer, filterset; non-CRUD actions enqueue worker tasks."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from django.db.models import Count
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from lbweb import heartbeat
from lbweb.redis_client import get_redis

from .. import capabilities, config_io, health_services, liveness, preview, services, session_snapshots
from ..filtersets import ApplyRunFilterSet, AuditEventFilterSet, BackendFilterSet, FarmFilterSet, HealthEventFilterSet
from ..models import ApplyRun, AuditEvent, Backend, Farm, HealthCheck, HealthEvent, Policy, StaticSession
from ..roles import ADMIN, OPERATOR, OPERATOR_BACKEND_FIELDS
from .serializers import (
    ApplyRunSerializer,
    AuditEventSerializer,
    BackendSerializer,
    BulkStateResultSerializer,
    BulkStateSerializer,
    DetailSerializer,
    FarmSerializer,
    HealthCheckSerializer,
    HealthEventSerializer,
    HealthStatusSerializer,
    ImportResultSerializer,
    LiveSessionsSerializer,
    MaintenanceSerializer,
    PolicySerializer,
    PreviewSerializer,
    SessionFlushSerializer,
    SessionsPendingSerializer,
    SessionsQuerySerializer,
    StaticSessionSerializer,
    StatusSerializer,
)


class FarmViewSet(viewsets.ModelViewSet):
    queryset = Farm.objects.select_related("health_check").prefetch_related("backends", "policies")
    serializer_class = FarmSerializer
    filterset_class = FarmFilterSet

    def role_needed(self, request) -> str | None:
        return OPERATOR if self.action in ("flush_sessions", "retry") else None

    def perform_destroy(self, instance: Farm) -> None:
        services.farm_delete(farm=instance, actor=self.request.user)

    def _preview(self, farm: Farm | None) -> Response:
        serializer = self.get_serializer(farm, data=self.request.data, partial=farm is not None)
        serializer.is_valid(raise_exception=True)
        values = dict(serializer.validated_data)
        policies = values.pop("policies", None)
        return Response(preview.farm_change(farm, values, policies).to_json())

    @extend_schema(request=FarmSerializer, responses=PreviewSerializer, operation_id="farms_preview_create")
    @action(detail=False, methods=["post"], url_path="preview", url_name="preview-create")
    def preview_create(self, request):
        """The nftables change creating this farm would cause (nothing is saved). Same body as a create."""
        return self._preview(None)

    @extend_schema(
        request=FarmSerializer(partial=True), responses=PreviewSerializer, operation_id="farms_preview_update"
    )
    @action(detail=True, methods=["post"], url_path="preview", url_name="preview-update")
    def preview_update(self, request, pk=None):
        """The nftables change this edit would cause (nothing is saved). Same body as a PATCH."""
        return self._preview(self.get_object())

    @extend_schema(
        parameters=[SessionsQuerySerializer],
        responses={
            200: LiveSessionsSerializer,
            202: SessionsPendingSerializer,
            502: OpenApiResponse(DetailSerializer, description="The worker could not read the kernel's sets."),
            503: OpenApiResponse(DetailSerializer, description="Redis (the broker) is unreachable."),
        },
    )
    @action(detail=True, methods=["get"])
    def sessions(self, request, pk=None):
        """The farm's live persistence entries as the worker last read them from the kernel, never waiting.

        200 with the snapshot when it is at most ``max_age`` seconds old; otherwise the worker is asked to
        read them again and the answer is 202 with ``Retry-After`` (see ``farms.session_snapshots``).
        """
        farm = self.get_object()
        query = SessionsQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        try:
            snapshot = session_snapshots.read(farm.id)
            if snapshot is not None and snapshot.age <= query.validated_data["max_age"]:
                if not snapshot.ok:
                    return Response({"detail": snapshot.error}, status=status.HTTP_502_BAD_GATEWAY)
                body = {"read_at": datetime.fromtimestamp(snapshot.read_at, UTC), "age": round(snapshot.age, 3),
                        "sessions": snapshot.sessions}  # fmt: skip
                return Response(LiveSessionsSerializer(body).data, headers={"Age": str(int(snapshot.age))})
            asked = session_snapshots.ask(farm.id)
        except Exception as exc:  # Redis (the broker too) down
            return Response({"detail": f"Redis is unreachable: {exc}"}, status=status.HTTP_503_SERVICE_UNAVAILABLE)
        retry = session_snapshots.RETRY_AFTER
        detail = "The dataplane worker is reading them; ask again."
        if asked >= 3 * retry:
            detail = f"The dataplane worker was asked {asked:.0f} s ago and has not answered: is it running?"
        body = {"detail": detail, "asked_seconds_ago": round(asked, 3), "retry_after": retry}
        return Response(body, status=status.HTTP_202_ACCEPTED, headers={"Retry-After": str(retry)})

    @extend_schema(request=None, responses={202: FarmSerializer})
    @action(detail=True, methods=["post"])
    def retry(self, request, pk=None):
        """Apply the farm again as it is: a farm the kernel refused (or whose apply crashed the kernel
        writer) is isolated, and otherwise tried again only when it changes."""
        farm = services.farm_retry(farm=self.get_object(), actor=request.user)
        return Response(self.get_serializer(farm).data, status=status.HTTP_202_ACCEPTED)

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
        services.flush_learnt_sessions(
            farm=farm, backend=backend, client=body.validated_data.get("client"), actor=request.user
        )
        return Response(status=status.HTTP_202_ACCEPTED)


class BackendViewSet(viewsets.ModelViewSet):
    queryset = Backend.objects.select_related("farm")
    serializer_class = BackendSerializer
    filterset_class = BackendFilterSet

    def role_needed(self, request) -> str | None:
        """Operators may change a backend's state (PATCH with only those fields) and put it in maintenance."""
        if self.action in ("maintenance", "bulk_state"):
            return OPERATOR
        if self.action in ("partial_update", "preview_update"):
            fields = set(request.data) if hasattr(request.data, "keys") else set()
            if fields and fields <= OPERATOR_BACKEND_FIELDS:
                return OPERATOR
        return None

    def perform_destroy(self, instance: Backend) -> None:
        services.backend_delete(backend=instance, actor=self.request.user)

    def _preview(self, backend: Backend | None) -> Response:
        serializer = self.get_serializer(backend, data=self.request.data, partial=backend is not None)
        serializer.is_valid(raise_exception=True)
        values = dict(serializer.validated_data)
        farm = values.pop("farm", None) or backend.farm
        if backend is not None and farm != backend.farm:
            return Response({"farm": ["A backend cannot move to another farm; create a new one."]}, status=400)
        return Response(preview.backend_change(farm, backend, values).to_json())

    @extend_schema(request=BackendSerializer, responses=PreviewSerializer, operation_id="backends_preview_create")
    @action(detail=False, methods=["post"], url_path="preview", url_name="preview-create")
    def preview_create(self, request):
        """The nftables change adding this backend would cause (nothing is saved). Same body as a create."""
        return self._preview(None)

    @extend_schema(
        request=BackendSerializer(partial=True), responses=PreviewSerializer, operation_id="backends_preview_update"
    )
    @action(detail=True, methods=["post"], url_path="preview", url_name="preview-update")
    def preview_update(self, request, pk=None):
        """The nftables change this edit would cause (nothing is saved). Same body as a PATCH."""
        return self._preview(self.get_object())

    @extend_schema(request=MaintenanceSerializer, responses=BackendSerializer)
    @action(detail=True, methods=["post"])
    def maintenance(self, request, pk=None):
        """Take the backend out of service: ``drain`` (connections end by themselves) or ``cut`` (now)."""
        body = MaintenanceSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        backend = services.backend_maintenance(
            backend=self.get_object(), mode=body.validated_data["mode"], actor=request.user
        )
        return Response(BackendSerializer(backend, context={"request": request}).data)

    @extend_schema(
        request=BulkStateSerializer,
        responses={200: BulkStateResultSerializer, 400: OpenApiResponse(description="Unknown backend ids.")},
        operation_id="backends_bulk_state",
    )
    @action(detail=False, methods=["post"], url_path="bulk-state", url_name="bulk-state")
    def bulk_state(self, request):
        """Put several backends in one state at once (enable, drain, disable), all or nothing; each change is
        audited as a single one is. Backends already in the state are left alone."""
        body = BulkStateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        ids = list(dict.fromkeys(body.validated_data["backends"]))
        backends = {b.id: b for b in Backend.objects.select_related("farm").filter(id__in=ids)}
        missing = [i for i in ids if i not in backends]
        if missing:
            return Response({"backends": [f"No backend with id {', '.join(map(str, missing))}."]}, status=400)
        state = body.validated_data["state"]
        changed = services.backends_set_state(backends=[backends[i] for i in ids], state=state, actor=request.user)
        return Response({"changed": [b.id for b in changed], "state": state})


class PolicyViewSet(viewsets.ModelViewSet):
    queryset = Policy.objects.prefetch_related("farms")
    serializer_class = PolicySerializer
    filterset_fields = ["name", "type"]

    def perform_destroy(self, instance: Policy) -> None:
        services.policy_delete(policy=instance, actor=self.request.user)


class StaticSessionViewSet(viewsets.ModelViewSet):
    queryset = StaticSession.objects.select_related("farm", "backend")
    serializer_class = StaticSessionSerializer
    filterset_fields = ["farm", "backend"]
    http_method_names = ["get", "post", "delete", "head", "options"]

    def perform_destroy(self, instance: StaticSession) -> None:
        services.session_delete(session=instance, actor=self.request.user)


class ApplyRunViewSet(viewsets.ReadOnlyModelViewSet):
    queryset = ApplyRun.objects.all()
    serializer_class = ApplyRunSerializer
    filterset_class = ApplyRunFilterSet


class HealthCheckViewSet(viewsets.ModelViewSet):
    queryset = HealthCheck.objects.select_related("farm")
    serializer_class = HealthCheckSerializer
    filterset_fields = ["farm", "type"]

    def role_needed(self, request) -> str | None:
        """Every write is an admin's, whatever operators may do elsewhere: a ``command`` check runs a program
        on the appliance (as lbweb-probe, but still a program of the author's choosing)."""
        return None if request.method in ("GET", "HEAD", "OPTIONS") else ADMIN

    def perform_destroy(self, instance: HealthCheck) -> None:
        health_services.health_check_delete(health_check=instance, actor=self.request.user)


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


class StatusView(APIView):
    """Is every process running, and are changes reaching the kernel? ("worker not running",
    "3 changes waiting for 42 s"): the same alerts as the banner of every page."""

    @extend_schema(responses=StatusSerializer)
    def get(self, request: Request) -> Response:
        return Response(StatusSerializer(liveness.status()).data)


class AuditEventViewSet(viewsets.ReadOnlyModelViewSet):
    """Who changed what and when, newest first, with each object's state before and after."""

    queryset = AuditEvent.objects.all()
    serializer_class = AuditEventSerializer
    filterset_class = AuditEventFilterSet


class ConfigExportView(APIView):
    """The whole configuration (policies, farms, backends, static sessions) as one JSON document."""

    @extend_schema(responses={200: OpenApiTypes.OBJECT}, tags=["config"])
    def get(self, request):
        response = Response(config_io.export_config())
        if request.query_params.get("download"):
            response["Content-Disposition"] = 'attachment; filename="lbweb-config.json"'
        return response


class ConfigImportView(APIView):
    """Make the configuration equal to the document (as exported), all or nothing.

    Everything is validated first; on any error nothing changes and the answer (400) lists every
    error with its location. ``?dry_run=1`` only validates.
    """

    takes_documents = True  # the export of a large appliance, sent back (lbweb/api_parsers.py)

    @extend_schema(
        request=OpenApiTypes.OBJECT,
        parameters=[OpenApiParameter("dry_run", bool, description="Validate only; change nothing.")],
        responses={200: ImportResultSerializer, 400: ImportResultSerializer},
        tags=["config"],
    )
    def post(self, request):
        dry_run = request.query_params.get("dry_run", "").lower() in ("1", "true", "yes")
        result = config_io.import_config(request.data, actor=request.user, dry_run=dry_run)
        return Response(result.to_json(), status=200 if result.ok else 400)


class CapabilitiesView(APIView):
    """What the kernel under the worker can do, as the worker probed it at start (dry runs)."""

    @extend_schema(
        responses={
            200: {"type": "object", "additionalProperties": {"type": "boolean"}},
            503: OpenApiResponse(DetailSerializer, description="Redis is down, or the worker has not probed yet."),
        }
    )
    def get(self, request):
        try:
            raw = get_redis().get(capabilities.REDIS_KEY)
        except Exception as exc:
            return Response({"detail": f"Redis is unreachable: {exc}"}, status=503)
        if raw is None:
            return Response({"detail": "the dataplane worker has not reported the kernel's capabilities yet"}, 503)
        return Response(json.loads(raw))
