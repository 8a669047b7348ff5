"""REST API of HTTP farms: options, services, backend options, certificates, declared capacity, preview.

Validation is the models' ``clean()`` (field-keyed 400s); writes go through ``l7/services.py``. The web process
never talks to HAProxy: the worker applies what these writes saved.
"""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import authentication, exceptions, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response
from rest_framework.views import APIView

from farms.api.permissions import RolePermission
from farms.api.serializers import ModelCleanMixin, actor_of
from farms.models import Backend, Farm
from farms.roles import ADMIN, OPERATOR
from lbweb import enqueue

from . import services, specs, validation
from .models import CapacityToken, Certificate, HttpService, L7Backend, L7Farm


def _raise_400(exc: DjangoValidationError):
    raise serializers.ValidationError(exc.message_dict if hasattr(exc, "error_dict") else {"detail": exc.messages})


class CertificateSerializer(serializers.ModelSerializer):
    private_key = serializers.CharField(write_only=True, trim_whitespace=False)
    days_left = serializers.IntegerField(read_only=True)
    expiry_status = serializers.CharField(read_only=True)

    class Meta:
        model = Certificate
        fields = [
            "id",
            "name",
            "certificate",
            "chain",
            "private_key",
            "source",
            "names",
            "issuer",
            "not_before",
            "not_after",
            "days_left",
            "expiry_status",
            "acme_domains",
            "created",
            "updated",
        ]
        read_only_fields = ["source", "names", "issuer", "not_before", "not_after", "created", "updated"]

    def validate(self, attrs):
        return attrs  # Certificate.clean() runs in the service, with every field's error at once

    def create(self, validated_data):
        try:
            return services.certificate_create(actor=self.context["request"].user, **validated_data)
        except DjangoValidationError as exc:
            _raise_400(exc)

    def update(self, instance, validated_data):
        try:
            return services.certificate_update(target=instance, actor=self.context["request"].user, **validated_data)
        except DjangoValidationError as exc:
            _raise_400(exc)


class SelfSignedSerializer(serializers.Serializer):
    name = serializers.SlugField(max_length=64)
    names = serializers.ListField(child=serializers.CharField(max_length=253), min_length=1, max_length=50)
    days = serializers.IntegerField(min_value=1, max_value=3650, default=365)


class AcmeSerializer(serializers.Serializer):
    name = serializers.SlugField(max_length=64)
    domains = serializers.ListField(child=serializers.CharField(max_length=253), min_length=1, max_length=50)


class CertificateViewSet(viewsets.ModelViewSet):
    """Certificates for HTTPS farms. An upload is checked (key, chain order, dates, names) before anything is
    saved; the private key is never shown again."""

    queryset = Certificate.objects.all()
    serializer_class = CertificateSerializer

    def perform_destroy(self, instance):
        try:
            services.certificate_delete(target=instance, actor=self.request.user)
        except DjangoValidationError as exc:
            _raise_400(exc)

    @extend_schema(request=SelfSignedSerializer, responses=CertificateSerializer)
    @action(detail=False, methods=["post"], url_path="self-signed", url_name="self-signed")
    def self_signed(self, request):
        """Generate a key and a self-signed certificate for the names given."""
        params = SelfSignedSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        try:
            cert = services.certificate_self_signed(actor=request.user, **params.validated_data)
        except DjangoValidationError as exc:
            _raise_400(exc)
        return Response(CertificateSerializer(cert).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=AcmeSerializer, responses={202: AcmeSerializer})
    @action(detail=False, methods=["post"], url_path="acme", url_name="acme")
    def acme(self, request):
        """Ask the ACME server (LBWEB_ACME_SERVER) for a certificate for these names; the worker runs certbot
        (HTTP-01 through the HTTP farms) and stores it as ``name``. Renewed 30 days before its end."""
        params = AcmeSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        if not settings.LBWEB_ACME_SERVER:
            raise serializers.ValidationError({"name": "No ACME server is set (LBWEB_ACME_SERVER)."})
        for domain in params.validated_data["domains"]:
            if validation.host_name_errors(domain):
                raise serializers.ValidationError({"domains": f"'{domain}' is not a host name HTTP-01 can prove."})
        try:
            enqueue.send("l7.tasks.acme_issue", args=[params.validated_data["name"], params.validated_data["domains"]])
        except Exception as exc:  # broker down
            return Response({"detail": f"The worker cannot be reached: {exc}"}, status=503)
        return Response(params.validated_data, status=status.HTTP_202_ACCEPTED)


class HttpServiceSerializer(ModelCleanMixin, serializers.ModelSerializer):
    class Meta:
        model = HttpService
        fields = ["id", "farm", *services.SERVICE_FIELDS]

    def create(self, validated_data):
        try:
            return services.service_create(actor=actor_of(self), **validated_data)
        except DjangoValidationError as exc:
            _raise_400(exc)

    def update(self, instance, validated_data):
        if validated_data.pop("farm", instance.farm) != instance.farm:
            raise serializers.ValidationError({"farm": ["A service cannot move to another farm; create a new one."]})
        try:
            return services.service_update(service=instance, actor=actor_of(self), **validated_data)
        except DjangoValidationError as exc:
            _raise_400(exc)


class HttpServiceViewSet(viewsets.ModelViewSet):
    """Services of HTTP farms: requests matched by host and path prefix go to the service's backends."""

    queryset = HttpService.objects.select_related("farm")
    serializer_class = HttpServiceSerializer
    filterset_fields = ["farm"]

    def perform_destroy(self, instance):
        services.service_delete(service=instance, actor=self.request.user)


class L7FarmSerializer(serializers.ModelSerializer):
    certificates = serializers.PrimaryKeyRelatedField(queryset=Certificate.objects.all(), many=True, required=False)

    class Meta:
        model = L7Farm
        fields = [*services.L7FARM_FIELDS, "certificates"]


class L7FarmView(APIView):
    """An HTTP farm's options (redirects, headers, HSTS, timeouts, error pages, certificates)."""

    serializer_class = L7FarmSerializer

    def _farm(self, farm_id: int) -> Farm:
        farm = get_object_or_404(Farm, pk=farm_id)
        if farm.mode not in ("http", "https"):
            raise exceptions.NotFound(f"Farm '{farm.name}' is not an HTTP farm.")
        return farm

    def get(self, request, farm_id: int):
        farm = self._farm(farm_id)
        options = L7Farm.objects.filter(farm=farm).first() or L7Farm(farm=farm)
        data = L7FarmSerializer(options).data if options.pk else {**L7FarmSerializer(options).data, "certificates": []}
        return Response(data)

    def patch(self, request, farm_id: int):
        farm = self._farm(farm_id)
        options = L7Farm.objects.filter(farm=farm).first()
        serializer = L7FarmSerializer(options, data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        values = dict(serializer.validated_data)
        certificates = values.pop("certificates", None)
        try:
            options = services.farm_options_update(farm=farm, actor=request.user, certificates=certificates, **values)
        except DjangoValidationError as exc:
            _raise_400(exc)
        return Response(L7FarmSerializer(options).data)


class L7BackendSerializer(serializers.ModelSerializer):
    class Meta:
        model = L7Backend
        fields = [*services.BACKEND_OPTION_FIELDS, "capacity_updated"]


class L7BackendView(APIView):
    """A backend's HTTP options: its service, declared capacity, TLS towards it."""

    serializer_class = L7BackendSerializer

    def get(self, request, backend_id: int):
        backend = get_object_or_404(Backend, pk=backend_id)
        options = L7Backend.objects.filter(backend=backend).first() or L7Backend(backend=backend)
        return Response(L7BackendSerializer(options).data)

    def patch(self, request, backend_id: int):
        backend = get_object_or_404(Backend.objects.select_related("farm"), pk=backend_id)
        options = L7Backend.objects.filter(backend=backend).first()
        serializer = L7BackendSerializer(options, data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        try:
            options = services.backend_options_update(backend=backend, actor=request.user, **serializer.validated_data)
        except DjangoValidationError as exc:
            _raise_400(exc)
        return Response(L7BackendSerializer(options).data)


class CapacityTokenAuthentication(authentication.BaseAuthentication):
    """``Authorization: Capacity <secret>``: a backend's own token, good for its capacity and nothing else."""

    keyword = "Capacity"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode(errors="replace").split()
        if len(header) != 2 or header[0] != self.keyword:
            return None
        token = CapacityToken.objects.select_related("backend").filter(digest=CapacityToken.digest_of(header[1]))
        token = token.first()
        if token is None:
            raise exceptions.AuthenticationFailed("Unknown capacity token.")
        from django.contrib.auth.models import AnonymousUser

        return AnonymousUser(), token

    def authenticate_header(self, request):
        return self.keyword


class CapacityPermission(RolePermission):
    """A capacity token for this very backend, or an operator."""

    def has_permission(self, request, view) -> bool:
        if isinstance(request.auth, CapacityToken):
            if request.auth.backend_id != int(view.kwargs["backend_id"]):
                self.message = "This token declares the capacity of another backend."
                return False
            return True
        return super().has_permission(request, view)


class CapacitySerializer(serializers.Serializer):
    capacity = serializers.IntegerField(min_value=1, max_value=100000, allow_null=True)


class CapacityView(APIView):
    """Declare how many concurrent requests the backend can serve now (null: no limit). Applied live by the
    worker through HAProxy's runtime API (no reload); beyond it, requests wait in the LB's queue."""

    authentication_classes = [CapacityTokenAuthentication, *APIView.authentication_classes]
    permission_classes = [CapacityPermission]
    serializer_class = CapacitySerializer

    def role_needed(self, request) -> str:
        return OPERATOR

    def post(self, request, backend_id: int):
        backend = get_object_or_404(Backend.objects.select_related("farm"), pk=backend_id)
        params = CapacitySerializer(data=request.data)
        params.is_valid(raise_exception=True)
        token = request.auth if isinstance(request.auth, CapacityToken) else None
        actor = None if token else request.user
        try:
            options = services.capacity_set(
                backend=backend, capacity=params.validated_data["capacity"], actor=actor, token=token
            )
        except DjangoValidationError as exc:
            _raise_400(exc)
        return Response({"backend": backend.pk, "capacity": options.capacity})


class CapacityTokenView(APIView):
    """Make a token with which the backend's service declares its own capacity (admins; shown once), or revoke
    them all."""

    def role_needed(self, request) -> str:
        return ADMIN

    @extend_schema(request=None, responses=inline_serializer("CapacityToken", {"token": serializers.CharField()}))
    def post(self, request, backend_id: int):
        backend = get_object_or_404(Backend.objects.select_related("farm"), pk=backend_id)
        try:
            _token, secret = services.capacity_token_create(backend=backend, actor=request.user)
        except DjangoValidationError as exc:
            _raise_400(exc)
        return Response({"token": secret}, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={204: None})
    def delete(self, request, backend_id: int):
        """Revoke every capacity token of the backend."""
        backend = get_object_or_404(Backend.objects.select_related("farm"), pk=backend_id)
        services.capacity_tokens_revoke(backend=backend, actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class PreviewView(APIView):
    """What the next apply changes in HAProxy's configuration: a diff of the applied file and the database."""

    @extend_schema(
        responses=inline_serializer(
            "L7Preview",
            {
                "generation": serializers.IntegerField(),
                "diff": serializers.CharField(),
                "configuration": serializers.CharField(),
            },
        )
    )
    def get(self, request):
        return Response(specs.preview(settings.LBWEB_HAPROXY_CONF_DIR))
