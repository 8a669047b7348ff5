"""BGP over the REST API (admins write; everyone signed in reads). Writes go through ``bgp/services.py``:
validated by the models' ``clean()``, read by ``bird -p``, audited, then deployed by the worker."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import viewsets
from rest_framework.response import Response
from rest_framework.views import APIView

from farms.models import Farm

from .. import services
from ..models import BgpPeer, BgpSettings
from .serializers import BgpPeerSerializer, BgpSettingsSerializer, DrainSerializer, FarmAnnouncementSerializer


class BgpSettingsView(APIView):
    """This node's BGP speaker: AS, router id, BFD timers, drain period; ``status`` is what the worker last
    announced, each farm's reason when withdrawn, and each session's state as BIRD reports it."""

    @extend_schema(responses={200: BgpSettingsSerializer}, tags=["bgp"])
    def get(self, request):
        return Response(BgpSettingsSerializer(BgpSettings.load()).data)

    @extend_schema(request=BgpSettingsSerializer, responses={200: BgpSettingsSerializer}, tags=["bgp"])
    def patch(self, request):
        body = BgpSettingsSerializer(BgpSettings.load(), data=request.data, partial=True, context={"request": request})
        body.is_valid(raise_exception=True)
        body.save()
        return Response(BgpSettingsSerializer(BgpSettings.load()).data)


class BgpDrainView(APIView):
    """Drain this node (graceful-shutdown community for the drain period, then every VIP withdrawn), or undo it."""

    @extend_schema(request=DrainSerializer, responses={200: BgpSettingsSerializer}, tags=["bgp"])
    def post(self, request):
        body = DrainSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        services.drain(settings=BgpSettings.load(), drained=body.validated_data["drained"], actor=request.user)
        return Response(BgpSettingsSerializer(BgpSettings.load()).data)


@extend_schema(tags=["bgp"])
class BgpPeerViewSet(viewsets.ModelViewSet):
    """The routers this node announces the farms' VIPs to."""

    queryset = BgpPeer.objects.all()
    serializer_class = BgpPeerSerializer

    def perform_destroy(self, instance):
        services.peer_delete(peer=instance, actor=self.request.user)


class FarmAnnouncementView(APIView):
    """How one farm's VIP is announced: on or off, its MED, its communities."""

    def _instance(self, farm_id: int):
        return services.announcement_of(get_object_or_404(Farm, pk=farm_id))

    @extend_schema(responses={200: FarmAnnouncementSerializer}, tags=["bgp"])
    def get(self, request, farm_id: int):
        return Response(FarmAnnouncementSerializer(self._instance(farm_id)).data)

    @extend_schema(request=FarmAnnouncementSerializer, responses={200: FarmAnnouncementSerializer}, tags=["bgp"])
    def patch(self, request, farm_id: int):
        body = FarmAnnouncementSerializer(
            self._instance(farm_id), data=request.data, partial=True, context={"request": request}
        )
        body.is_valid(raise_exception=True)
        return Response(FarmAnnouncementSerializer(body.save()).data)
