"""System > Network over the REST API (admins write; everyone signed in reads).

Writes go through ``network/services.py``: validated by the models' ``clean()``, audited, applied by
the worker. A write that would cut the management address answers 400 on ``confirm`` unless the
request carries ``?confirm=1``.
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view, inline_serializer
from rest_framework import mixins, serializers, viewsets
from rest_framework.response import Response
from rest_framework.views import APIView

from farms.api.serializers import ModelCleanMixin, StrictModelSerializer, actor_of

from .. import selectors, services
from ..models import Address, Interface, NetworkSettings, Route

CONFIRM = OpenApiParameter(
    "confirm", bool, description="Do it even though it cuts the address this request came in on."
)


def _confirmed(request) -> bool:
    return request.query_params.get("confirm", "").lower() in ("1", "true", "yes")


class InterfaceSerializer(ModelCleanMixin, StrictModelSerializer):
    parent = serializers.SlugRelatedField(
        slug_field="name", queryset=Interface.objects.all(), required=False, allow_null=True
    )
    bond = serializers.SlugRelatedField(
        slug_field="name", queryset=Interface.objects.all(), required=False, allow_null=True
    )
    addresses = serializers.SlugRelatedField(slug_field="address", many=True, read_only=True)

    class Meta:
        model = Interface
        fields = ["id", *services.INTERFACE_FIELDS, "addresses", "created", "updated"]

    def create(self, validated_data):
        return services.interface_create(actor=actor_of(self), **validated_data)

    def update(self, instance, validated_data):
        request = self.context["request"]
        return services.interface_update(
            interface=instance,
            management=services.Management.of(request),
            confirm=_confirmed(request),
            actor=actor_of(self),
            **validated_data,
        )


class AddressSerializer(ModelCleanMixin, StrictModelSerializer):
    interface = serializers.SlugRelatedField(slug_field="name", queryset=Interface.objects.all())

    class Meta:
        model = Address
        fields = ["id", "interface", "address"]

    def create(self, validated_data):
        return services.address_create(actor=actor_of(self), **validated_data)


class RouteSerializer(ModelCleanMixin, StrictModelSerializer):
    interface = serializers.SlugRelatedField(
        slug_field="name", queryset=Interface.objects.all(), required=False, allow_null=True
    )

    class Meta:
        model = Route
        fields = ["id", *services.ROUTE_FIELDS]

    def create(self, validated_data):
        return services.route_create(actor=actor_of(self), **validated_data)

    def update(self, instance, validated_data):
        request = self.context["request"]
        return services.route_update(
            route=instance,
            management=services.Management.of(request),
            confirm=_confirmed(request),
            actor=actor_of(self),
            **validated_data,
        )


class NetworkSettingsSerializer(ModelCleanMixin, StrictModelSerializer):
    status = serializers.CharField(read_only=True, help_text="applied, pending or failed (the worker's words).")

    class Meta:
        model = NetworkSettings
        fields = [*services.SETTINGS_FIELDS, "generation", "applied_generation", "applied_at", "apply_error", "status"]
        read_only_fields = ["generation", "applied_generation", "applied_at", "apply_error"]

    def update(self, instance, validated_data):
        return services.settings_update(settings=instance, actor=actor_of(self), **validated_data)


@extend_schema_view(partial_update=extend_schema(parameters=[CONFIRM]), update=extend_schema(parameters=[CONFIRM]))
class InterfaceViewSet(viewsets.ModelViewSet):
    """Interfaces lbweb manages: Ethernet devices the machine has, and the VLANs and bonds it makes."""

    queryset = Interface.objects.select_related("parent", "bond").prefetch_related("addresses")
    serializer_class = InterfaceSerializer
    filterset_fields = ["kind", "name"]

    @extend_schema(parameters=[CONFIRM])
    def destroy(self, request, *args, **kwargs):
        return super().destroy(request, *args, **kwargs)

    def perform_destroy(self, instance):
        services.interface_delete(
            interface=instance,
            management=services.Management.of(self.request),
            confirm=_confirmed(self.request),
            actor=self.request.user,
        )


class AddressViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    """Addresses (with their prefix) on managed interfaces."""

    queryset = Address.objects.select_related("interface")
    serializer_class = AddressSerializer
    filterset_fields = ["interface"]

    @extend_schema(parameters=[CONFIRM])
    def destroy(self, request, *args, **kwargs):
        return super().destroy(request, *args, **kwargs)

    def perform_destroy(self, instance):
        services.address_delete(
            address=instance,
            management=services.Management.of(self.request),
            confirm=_confirmed(self.request),
            actor=self.request.user,
        )


@extend_schema_view(partial_update=extend_schema(parameters=[CONFIRM]), update=extend_schema(parameters=[CONFIRM]))
class RouteViewSet(viewsets.ModelViewSet):
    """Static routes; destination 'default' is the default gateway (0.0.0.0/0 or ::/0)."""

    queryset = Route.objects.select_related("interface")
    serializer_class = RouteSerializer
    filterset_fields = ["interface", "destination"]

    @extend_schema(parameters=[CONFIRM])
    def destroy(self, request, *args, **kwargs):
        return super().destroy(request, *args, **kwargs)

    def perform_destroy(self, instance):
        services.route_delete(
            route=instance,
            management=services.Management.of(self.request),
            confirm=_confirmed(self.request),
            actor=self.request.user,
        )


class NetworkSettingsView(APIView):
    """DNS and NTP, and where the worker stands with the network (applied, pending, failed)."""

    @extend_schema(responses={200: NetworkSettingsSerializer})
    def get(self, request):
        return Response(NetworkSettingsSerializer(NetworkSettings.load()).data)

    @extend_schema(request=NetworkSettingsSerializer, responses={200: NetworkSettingsSerializer})
    def patch(self, request):
        body = NetworkSettingsSerializer(
            NetworkSettings.load(), data=request.data, partial=True, context={"request": request}
        )
        body.is_valid(raise_exception=True)
        body.save()
        return Response(NetworkSettingsSerializer(NetworkSettings.load()).data)


class NetworkObservedView(APIView):
    """The links, addresses and routes as the worker last read them from the kernel."""

    @extend_schema(
        responses={
            200: inline_serializer(
                "NetworkObserved",
                {
                    "links": serializers.ListField(child=serializers.DictField()),
                    "routes": serializers.ListField(child=serializers.DictField()),
                    "read_at": serializers.CharField(),
                },
            ),
            503: inline_serializer("NetworkObservedMissing", {"detail": serializers.CharField()}),
        }
    )
    def get(self, request):
        view = selectors.observed()
        if view is None:
            return Response({"detail": "the worker has not published the kernel's network yet"}, status=503)
        return Response(view)
