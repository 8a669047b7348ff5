"""REST API of the system app: API tokens (django-rest-knox) and the web server's TLS certificate.

Tokens: ``POST auth/login/`` with the account's name and password (HTTP Basic) gives a new token, shown
once, valid for ``LBWEB_TOKEN_TTL_HOURS``; ``auth/tokens/`` lists the caller's own tokens and revokes one;
``auth/logout/`` revokes the token of the request, ``auth/logoutall/`` every token of the caller. A
password login goes through django-axes like the UI's: too many failures for one name from one address
lock that pair out (429) for a while, whatever password comes next. An account with a second factor (or whose
role requires one) sends its current code as ``otp_token`` with the password; a wrong code counts as a failed
login. Tokens themselves stay as they are: a token carries no second factor, it is one.
"""

from __future__ import annotations

from axes.handlers.proxy import AxesProxyHandler
from axes.helpers import get_cool_off
from django.conf import settings
from django.core.exceptions import ValidationError
from django.http import HttpResponse
from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from knox import views as knox_views
from knox.auth import TokenAuthentication
from knox.models import AuthToken
from rest_framework import exceptions, serializers, status
from rest_framework.authentication import BasicAuthentication, SessionAuthentication
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts import second_factor

from . import services, tls
from .backup import services as backup
from .models import BackupSchedule

# -- tokens ---------------------------------------------------------------------------------------


class LoginLocked(exceptions.Throttled):
    default_detail = "Too many failed logins."


def lockout_detail(username: str, request) -> LoginLocked:
    cool_off = get_cool_off(request)
    minutes = round(cool_off.total_seconds() / 60) if cool_off else None
    return LoginLocked(
        wait=cool_off.total_seconds() if cool_off else None,
        detail=(
            f"Too many failed logins for '{username}' from {request.META.get('REMOTE_ADDR', 'your address')}: "
            f"logins are refused for {minutes} minutes, whatever the password."
        ),
    )


class LockoutBasicAuthentication(BasicAuthentication):
    """HTTP Basic for the token login only, with django-axes' lockout made explicit (429, not 401).

    Django's ``authenticate`` runs axes' backend first, which refuses a locked-out pair even with the
    right password and counts every failure; this class only turns that refusal into a clear answer.
    """

    def authenticate_credentials(self, userid, password, request=None):
        try:
            return super().authenticate_credentials(userid, password, request)
        except exceptions.AuthenticationFailed:
            if request is not None and AxesProxyHandler.is_locked(request, {"username": userid}):
                raise lockout_detail(userid, request) from None
            raise


TokenSerializer = inline_serializer(
    "NewToken",
    {
        "token": serializers.CharField(help_text="Send as 'Authorization: Token <token>'. Shown only once."),
        "expiry": serializers.DateTimeField(),
    },
)


class TokenInfoSerializer(serializers.ModelSerializer):
    """A token as its owner sees it later: never the token itself (only its digest is stored)."""

    current = serializers.SerializerMethodField(help_text="The token this request was made with.")

    class Meta:
        model = AuthToken
        fields = ("token_key", "created", "expiry", "current")

    def get_current(self, token) -> bool:
        auth = self.context["request"].auth
        return isinstance(auth, AuthToken) and auth.digest == token.digest


class TokenLoginView(knox_views.LoginView):
    """Create an API token for the account given by HTTP Basic (or the browser session)."""

    authentication_classes = [LockoutBasicAuthentication, SessionAuthentication]
    permission_classes = [IsAuthenticated]

    @extend_schema(
        request=inline_serializer("TokenLogin", {"otp_token": serializers.CharField(required=False)}),
        responses={200: TokenSerializer},
        operation_id="auth_login",
    )
    def post(self, request, format=None):
        if isinstance(request.successful_authenticator, LockoutBasicAuthentication):
            self.check_second_factor(request)
        return super().post(request, format)

    def check_second_factor(self, request) -> None:
        """A password alone opens no token for an account that must show a second factor."""
        user = request.user
        if not second_factor.needed(user):
            return
        if not second_factor.enrolled(user):
            raise exceptions.AuthenticationFailed(
                "Your role must use a second factor: enrol one in the UI (Second factor) first."
            )
        token = str(request.data.get("otp_token", "") or "")
        if not token:
            raise exceptions.AuthenticationFailed("This account has a second factor: send its code as otp_token.")
        if second_factor.verify(user, token) is None:
            second_factor.failed(request._request, user)
            raise exceptions.AuthenticationFailed("Wrong second-factor code.")


class TokenLogoutView(knox_views.LogoutView):
    """Revoke the token this request carries."""

    @extend_schema(request=None, responses={204: None}, operation_id="auth_logout")
    def post(self, request, format=None):
        return super().post(request, format)


class TokenLogoutAllView(knox_views.LogoutAllView):
    """Revoke every token of the caller."""

    @extend_schema(request=None, responses={204: None}, operation_id="auth_logoutall")
    def post(self, request, format=None):
        return super().post(request, format)


class TokenListView(APIView):
    """The caller's own live tokens (key prefix, created, expiry); expired ones are left out."""

    authentication_classes = [TokenAuthentication, SessionAuthentication]
    permission_classes = [IsAuthenticated]

    @extend_schema(responses=TokenInfoSerializer(many=True))
    def get(self, request):
        tokens = AuthToken.objects.filter(user=request.user, expiry__gt=timezone.now()).order_by("-created")
        return Response(TokenInfoSerializer(tokens, many=True, context={"request": request}).data)


class TokenRevokeView(APIView):
    """Revoke one of the caller's tokens by its key prefix (``token_key`` in the list)."""

    authentication_classes = [TokenAuthentication, SessionAuthentication]
    permission_classes = [IsAuthenticated]

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "token_key",
                str,
                OpenApiParameter.PATH,
                pattern="^[0-9a-f]{15}$",
                description="The token's first 15 characters (hexadecimal), as the token list shows them.",
            )
        ],
        responses={204: None},
    )
    def delete(self, request, token_key: str):
        tokens = AuthToken.objects.filter(user=request.user, token_key=token_key)
        get_object_or_404(tokens)  # a 404 also for another user's token: its existence is not told
        tokens.delete()
        return Response(status=status.HTTP_204_NO_CONTENT)


# -- TLS certificate ------------------------------------------------------------------------------


class CertificateInfoSerializer(serializers.Serializer):
    subject = serializers.CharField()
    issuer = serializers.CharField()
    sans = serializers.ListField(child=serializers.CharField())
    serial = serializers.CharField(help_text="Hexadecimal.")
    not_before = serializers.DateTimeField()
    not_after = serializers.DateTimeField()
    fingerprint_sha256 = serializers.CharField()
    key_type = serializers.CharField()
    self_signed = serializers.BooleanField()
    chain = serializers.ListField(child=serializers.CharField(), help_text="Subjects of the chain, in order.")


class PemField(serializers.CharField):
    """PEM text: a JSON string, a form field, or an uploaded file (``curl -F key=@my.key``)."""

    def __init__(self, **kwargs):
        super().__init__(trim_whitespace=False, **kwargs)

    def to_internal_value(self, data):
        if hasattr(data, "read"):
            data = data.read(1 << 20).decode("utf-8", errors="replace")
        return super().to_internal_value(data)


class CertificateUploadSerializer(serializers.Serializer):
    certificate = PemField(help_text="PEM: the certificate, optionally followed by its chain.")
    chain = PemField(required=False, allow_blank=True, help_text="PEM: the chain, each followed by its issuer.")
    key = PemField(write_only=True, help_text="PEM: the private key, unencrypted.")


class CertificateView(APIView):
    """The web server's TLS certificate: read (every role), replace (admin; PUT, field-level 400s)."""

    @extend_schema(responses=CertificateInfoSerializer)
    def get(self, request):
        current = tls.current()
        if current is None:
            raise exceptions.NotFound("No certificate yet: run manage.py ensure_tls.")
        return Response(current.as_dict())

    @extend_schema(request=CertificateUploadSerializer, responses=CertificateInfoSerializer)
    def put(self, request):
        upload = CertificateUploadSerializer(data=request.data)
        upload.is_valid(raise_exception=True)
        try:
            new = services.certificate_replace(actor=request.user, **upload.validated_data)
        except tls.CertificateError as error:
            raise serializers.ValidationError(error.errors) from None
        return Response(new.as_dict())


# -- backups --------------------------------------------------------------------------------------


def _field_errors(exc) -> dict:
    """A refusal as the API answers every field-level one: {field: [messages]}."""
    return exc.message_dict if hasattr(exc, "error_dict") else {"__all__": exc.messages}


class BackupView(APIView):
    """``POST`` with a ``passphrase``: the whole appliance as one encrypted archive (admins; audited).

    The archive holds the farms and HTTP farms, certificates with their private keys, accounts with their roles
    and second factors, the authentication settings with their secrets, the network and the cluster's settings.
    """

    @extend_schema(
        request=inline_serializer("BackupRequest", {"passphrase": serializers.CharField(min_length=12)}),
        responses={(200, "application/octet-stream"): OpenApiTypes.BINARY, 400: OpenApiTypes.OBJECT},
        tags=["system"],
    )
    def post(self, request):
        try:
            data, name = backup.backup_create(passphrase=request.data.get("passphrase"), actor=request.user)
        except ValidationError as exc:
            return Response(_field_errors(exc), status=400)
        response = HttpResponse(data, content_type="application/octet-stream")
        response["Content-Disposition"] = f'attachment; filename="{name}"'
        return response


class BackupRestoreView(APIView):
    """``POST`` (multipart) an ``archive`` file and its ``passphrase``: the appliance becomes what the archive holds
    (admins; one audit event ``restore``). A wrong passphrase or a damaged archive is a 400 on that field; a value
    this appliance refuses is a 400 listing every error with its place. Either way nothing changes.
    ``dry_run=1`` only checks."""

    @extend_schema(
        request={
            "multipart/form-data": inline_serializer(
                "BackupRestoreRequest",
                {
                    "archive": serializers.FileField(),
                    "passphrase": serializers.CharField(),
                    "dry_run": serializers.BooleanField(required=False),
                },
            )
        },
        responses={200: OpenApiTypes.OBJECT, 400: OpenApiTypes.OBJECT},
        tags=["system"],
    )
    def post(self, request):
        upload = request.FILES.get("archive")
        if upload is None:
            return Response({"archive": ["Send the archive as the file field 'archive'."]}, status=400)
        if upload.size > settings.LBWEB_IMPORT_MAX_BYTES:
            limit = settings.LBWEB_IMPORT_MAX_BYTES
            return Response({"archive": [f"The archive is larger than {limit:,} bytes (LBWEB_IMPORT_MAX_BYTES)."]}, 400)
        dry_run = str(request.data.get("dry_run", "")).lower() in ("1", "true", "yes", "on")
        try:
            result = backup.backup_restore(
                data=upload.read(), passphrase=request.data.get("passphrase"), actor=request.user, dry_run=dry_run
            )
        except ValidationError as exc:
            return Response(_field_errors(exc), status=400)
        return Response(result.to_json(), status=200 if result.ok else 400)


class BackupScheduleSerializer(serializers.Serializer):
    enabled = serializers.BooleanField(required=False)
    directory = serializers.CharField(required=False, allow_blank=True)
    interval_hours = serializers.IntegerField(required=False)
    keep = serializers.IntegerField(required=False)
    passphrase = serializers.CharField(required=False, allow_blank=True, write_only=True, trim_whitespace=False)
    passphrase_set = serializers.SerializerMethodField()
    last_run = serializers.DateTimeField(read_only=True, allow_null=True)
    last_file = serializers.CharField(read_only=True)
    last_error = serializers.CharField(read_only=True)

    def get_passphrase_set(self, row) -> bool:
        return bool(row.passphrase)


class BackupScheduleView(APIView):
    """The backups the worker writes to a directory: read by every role, changed by admins. The passphrase is
    write-only (``passphrase_set`` says whether one is stored); leaving it out keeps it."""

    @extend_schema(responses={200: BackupScheduleSerializer}, tags=["system"])
    def get(self, request):
        return Response(BackupScheduleSerializer(BackupSchedule.load()).data)

    @extend_schema(request=BackupScheduleSerializer, responses={200: BackupScheduleSerializer}, tags=["system"])
    def put(self, request):
        serializer = BackupScheduleSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        try:
            row = backup.schedule_update(actor=request.user, **serializer.validated_data)
        except ValidationError as exc:
            return Response(_field_errors(exc), status=400)
        return Response(BackupScheduleSerializer(row).data)

    patch = put
