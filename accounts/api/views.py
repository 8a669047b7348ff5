"""System › Authentication in the API: ``policy/``, ``ldap/``, ``radius/``, ``oidc/`` (GET, PUT, PATCH: admins
write), and ``ldap/test/``, ``radius/test/``, ``oidc/test/`` (POST, admins): the saved settings tried step by step,
with a user when one is given."""

from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from django.utils.decorators import method_decorator
from django.views.decorators.debug import sensitive_post_parameters
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from farms.roles import ADMIN

from .. import services
from ..checks.ldap import check_ldap
from ..checks.oidc import check_oidc
from ..checks.radius import check_radius
from ..models import LdapSettings, LoginPolicy, OidcSettings, RadiusSettings
from .serializers import (
    LdapSettingsSerializer,
    LoginPolicySerializer,
    OidcSettingsSerializer,
    RadiusSettingsSerializer,
    TestResultSerializer,
    TestSerializer,
)


def refused(exc: DjangoValidationError) -> serializers.ValidationError:
    return serializers.ValidationError(exc.message_dict if hasattr(exc, "error_dict") else exc.messages)


@method_decorator(sensitive_post_parameters("bind_password", "secret", "client_secret"), name="dispatch")
class SettingsView(APIView):
    model = None
    serializer_class = None
    update = None

    def _answer(self):
        return Response(self.serializer_class(self.model.load()).data)

    def get(self, request):
        return self._answer()

    def _write(self, request, partial: bool):
        serializer = self.serializer_class(self.model.load(), data=request.data, partial=partial)
        serializer.is_valid(raise_exception=True)
        try:
            self.update(actor=request.user, **serializer.validated_data)
        except DjangoValidationError as exc:
            raise refused(exc) from exc
        return self._answer()

    def put(self, request):
        return self._write(request, partial=False)

    def patch(self, request):
        return self._write(request, partial=True)


def _documented(serializer_class):
    """The schema of a settings view: its serializer in and out, under the "authentication" tag."""
    return extend_schema_view(
        get=extend_schema(responses=serializer_class, tags=["authentication"]),
        put=extend_schema(request=serializer_class, responses=serializer_class, tags=["authentication"]),
        patch=extend_schema(request=serializer_class, responses=serializer_class, tags=["authentication"]),
    )


@_documented(LoginPolicySerializer)
class LoginPolicyView(SettingsView):
    """Whether local accounts may log in, and from which role up a second factor is required."""

    model, serializer_class, update = LoginPolicy, LoginPolicySerializer, staticmethod(services.login_policy_update)


@_documented(LdapSettingsSerializer)
class LdapSettingsView(SettingsView):
    """LDAP / Active Directory logins (django-auth-ldap); the bind password is write-only."""

    model, serializer_class, update = LdapSettings, LdapSettingsSerializer, staticmethod(services.ldap_update)


@_documented(RadiusSettingsSerializer)
class RadiusSettingsView(SettingsView):
    """RADIUS logins (pyrad); the shared secret is write-only."""

    model, serializer_class, update = RadiusSettings, RadiusSettingsSerializer, staticmethod(services.radius_update)


@_documented(OidcSettingsSerializer)
class OidcSettingsView(SettingsView):
    """OpenID Connect single sign-on (mozilla-django-oidc); the client secret is write-only."""

    model, serializer_class, update = OidcSettings, OidcSettingsSerializer, staticmethod(services.oidc_update)


@method_decorator(sensitive_post_parameters("password"), name="dispatch")
class TestView(APIView):
    model = None
    check = None

    def role_needed(self, request) -> str:
        return ADMIN  # a Test takes a password and tells what the directory says of it

    @extend_schema(request=TestSerializer, responses=TestResultSerializer, tags=["authentication"])
    def post(self, request):
        body = TestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        row = self.model.load()
        if self.model is OidcSettings:
            result = check_oidc(row, redirect_uri=request.build_absolute_uri("/oidc/callback/"))
        else:
            result = self.check(row, body.validated_data.get("username", ""), body.validated_data.get("password", ""))
        return Response(result.as_dict())


class LdapTestView(TestView):
    """Try the saved LDAP settings: reach, TLS, the service account's bind; with a user, the search, the password
    and the mapped groups. Says where a login would fail."""

    model, check = LdapSettings, staticmethod(check_ldap)


class RadiusTestView(TestView):
    """Try the saved RADIUS settings: each server's answer to Status-Server with the secret; with a user, the
    Access-Request and the role its reply gives."""

    model, check = RadiusSettings, staticmethod(check_radius)


class OidcTestView(TestView):
    """Try the saved OpenID Connect settings: discovery, the signing keys, and the client ID and secret."""

    model, check = OidcSettings, staticmethod(check_oidc)
