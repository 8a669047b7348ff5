from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, viewsets
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from ..models import Cluster, Node, Transition
from ..roles import local_role
from ..services import cluster_update
from ..status import cluster_status
from ..sync import apply_sync, authorised
from .serializers import ClusterSerializer, SyncSerializer, TransitionSerializer


class ClusterView(APIView):
    """The HA pair's settings: VRRP (virtual router id, priorities, advert interval, authentication, tracked
    interfaces and conntrackd), the sync link, the floating addresses, the two nodes. Admins change them."""

    @extend_schema(responses=ClusterSerializer, tags=["cluster"])
    def get(self, request):
        return Response(ClusterSerializer(Cluster.load()).data)

    @extend_schema(request=ClusterSerializer, responses=ClusterSerializer, tags=["cluster"])
    def put(self, request):
        serializer = ClusterSerializer(Cluster.load(), data=request.data)
        serializer.is_valid(raise_exception=True)
        values = dict(serializer.validated_data)
        nodes = values.pop("nodes", None)
        try:
            cluster = cluster_update(actor=request.user, nodes=[dict(n) for n in nodes] if nodes is not None else None,
                                     **values)  # fmt: skip
        except DjangoValidationError as exc:
            detail = exc.message_dict if hasattr(exc, "error_dict") else exc.messages
            raise serializers.ValidationError(detail) from exc
        return Response(ClusterSerializer(cluster).data)


class ClusterStatusView(APIView):
    """Each node's role, which one is master, the last transitions with their reason, the configuration's sync
    state and conntrackd's counters."""

    @extend_schema(responses={200: OpenApiTypes.OBJECT}, tags=["cluster"])
    def get(self, request):
        return Response(cluster_status())


class TransitionViewSet(viewsets.ReadOnlyModelViewSet):
    """Every VRRP state change of either node as its handler recorded it: reason, and each step's timing."""

    queryset = Transition.objects.all()
    serializer_class = TransitionSerializer


class ClusterSyncView(APIView):
    """The peer's push: its status, and from the master the whole configuration. Authenticated by the cluster
    token (``Authorization: Cluster <token>``), not by a user."""

    authentication_classes = []
    permission_classes = [AllowAny]
    takes_documents = True  # the master's whole configuration (lbweb/api_parsers.py)

    @extend_schema(
        request=SyncSerializer,
        responses={
            200: OpenApiTypes.OBJECT,
            401: OpenApiResponse(description="No cluster here, or not the cluster's token."),
            409: OpenApiResponse(description="This node is master too, or the sender is not the peer."),
        },
        tags=["cluster"],
    )
    def post(self, request):
        cluster = Cluster.objects.filter(pk=1, enabled=True).first()
        if cluster is None or not authorised(request.headers.get("Authorization", ""), cluster):
            return Response({"detail": "Not this cluster's token."}, status=401)
        body = SyncSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        sender = body.validated_data["sender"]
        if not Node.objects.filter(name=sender).exists() or sender == _local_name():
            return Response({"detail": f"{sender} is not this node's peer."}, status=409)
        Cluster.objects.filter(pk=1).update(peer_status=body.validated_data["status"], peer_seen_at=timezone.now())
        answer = {"node": _local_name(), "role": str(local_role()["role"])}
        config = body.validated_data.get("config")
        if config is not None:
            if answer["role"] == "master":
                return Response({**answer, "detail": "Both nodes are master: configuration not taken."}, status=409)
            try:
                answer["rows"] = apply_sync(config, sender=sender)
            except (KeyError, TypeError, ValueError, DjangoValidationError) as exc:
                raise serializers.ValidationError({"config": f"not a configuration: {exc}"}) from exc
            except Exception as exc:  # a row the database refuses (deserialisation errors and integrity)
                raise serializers.ValidationError({"config": f"not applied: {type(exc).__name__}: {exc}"}) from exc
        return Response(answer)


def _local_name() -> str:
    from django.conf import settings

    return settings.LBWEB_NODE_NAME
