"""The only code that writes HTTP-farm rows (options, services, backend options, certificates, capacity).

As in ``farms/services.py``: validate with the model's ``clean()``, save in one transaction, move the farm's
configuration generation (one apply after commit, through the same worker queue as the kernel's farms) and write
an ``AuditEvent`` in the same transaction. Private keys never appear in an audit record.
"""

from __future__ import annotations

import secrets
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models, transaction
from django.utils import timezone

from farms.audit import record
from farms.models import Backend, Farm
from farms.services import mark_farms_changed

from . import certificates as certs
from . import hostnames
from .choices import CertificateSourceChoices
from .models import CapacityToken, Certificate, HttpService, L7Backend, L7Farm

L7FARM_FIELDS = (
    "redirect_ports",
    "http2",
    "hsts_max_age",
    "forwarded_headers",
    "timeout_client",
    "timeout_server",
    "timeout_connect",
    "timeout_http_request",
    "timeout_keep_alive",
    "timeout_tunnel",
    "headers",
    "redirects",
    "error_pages",
    "default_certificate",
)
SERVICE_FIELDS = (
    "name",
    "position",
    "hosts",
    "host_regex",
    "path_prefix",
    "scheduler",
    "persistence",
    "persistence_ttl",
    "persistence_header",
    "cookie_name",
    "queue_timeout",
    "reuse",
    "headers",
)
BACKEND_OPTION_FIELDS = ("service", "capacity", "tls", "tls_verify", "tls_sni")
CERTIFICATE_FIELDS = ("name", "certificate", "chain", "private_key", "acme_domains")
SECRET_FIELDS = {"private_key"}


def state(obj: models.Model | None, fields: tuple[str, ...]) -> dict[str, Any] | None:
    if obj is None:
        return None
    out = {}
    for name in fields:
        if name in SECRET_FIELDS:
            continue
        value = getattr(obj, name)
        out[name] = value.pk if isinstance(value, models.Model) else value
    return out


def _save(instance: models.Model, fields: tuple[str, ...], values: dict) -> None:
    unknown = set(values) - set(fields)
    if unknown:
        raise TypeError(f"unknown field(s): {', '.join(sorted(unknown))}")
    for name, value in values.items():
        setattr(instance, name, value)
    instance.full_clean()
    instance.save()


def _http_farm(farm: Farm) -> None:
    if farm.mode not in ("http", "https"):
        raise ValidationError({"farm": f"Farm '{farm.name}' is not an HTTP farm (mode {farm.mode})."})


@transaction.atomic
def farm_options_update(*, farm: Farm, actor=None, certificates: list[Certificate] | None = None, **values) -> L7Farm:
    """Set an HTTP farm's options (created with their defaults on first use) and, if given, its certificates."""
    _http_farm(farm)
    options, _ = L7Farm.objects.get_or_create(farm=farm)
    before = state(options, L7FARM_FIELDS) | {"certificates": sorted(c.name for c in options.certificates.all())}
    _save(options, L7FARM_FIELDS, values)
    if certificates is not None:
        options.certificates.set(certificates)
    names = sorted(c.name for c in options.certificates.all())
    if options.default_certificate_id and options.default_certificate.name not in names:
        raise ValidationError({"default_certificate": "The default certificate must be one of the farm's."})
    mark_farms_changed([farm.pk])
    record(
        actor=actor, action="update", object_type="l7farm", object_id=farm.pk, object_name=farm.name,
        farm_ref=farm.pk, before=before, after=state(options, L7FARM_FIELDS) | {"certificates": names},
    )  # fmt: skip
    return options


@transaction.atomic
def service_create(*, farm: Farm, actor=None, **values) -> HttpService:
    """Add a service (host/path rule with its scheduler and persistence) to an HTTP farm."""
    service = HttpService(farm=farm)
    _save(service, SERVICE_FIELDS, values)
    mark_farms_changed([farm.pk])
    record(
        actor=actor, action="create", object_type="httpservice", object_id=service.pk, object_name=str(service),
        farm_ref=farm.pk, after=state(service, SERVICE_FIELDS),
    )  # fmt: skip
    return service


@transaction.atomic
def service_update(*, service: HttpService, actor=None, **values) -> HttpService:
    before = state(HttpService.objects.get(pk=service.pk), SERVICE_FIELDS)
    _save(service, SERVICE_FIELDS, values)
    mark_farms_changed([service.farm_id])
    record(
        actor=actor, action="update", object_type="httpservice", object_id=service.pk, object_name=str(service),
        farm_ref=service.farm_id, before=before, after=state(service, SERVICE_FIELDS),
    )  # fmt: skip
    return service


@transaction.atomic
def service_delete(*, service: HttpService, actor=None) -> None:
    """Delete a service; its backends go back to the farm's default service."""
    before, farm_id, pk, name = state(service, SERVICE_FIELDS), service.farm_id, service.pk, str(service)
    service.delete()
    mark_farms_changed([farm_id])
    record(
        actor=actor, action="delete", object_type="httpservice", object_id=pk, object_name=name, farm_ref=farm_id,
        before=before,
    )  # fmt: skip


@transaction.atomic
def backend_options_update(*, backend: Backend, actor=None, action: str = "update", **values) -> L7Backend:
    """Set what an HTTP farm's backend has beyond an L4 backend: its service, capacity, TLS."""
    _http_farm(backend.farm)
    options, _ = L7Backend.objects.get_or_create(backend=backend)
    before = state(options, BACKEND_OPTION_FIELDS)
    if "capacity" in values and values["capacity"] != options.capacity:
        options.capacity_updated = timezone.now()
    _save(options, BACKEND_OPTION_FIELDS, values)
    mark_farms_changed([backend.farm_id])
    record(
        actor=actor, action=action, object_type="l7backend", object_id=backend.pk, object_name=str(backend),
        farm_ref=backend.farm_id, before=before, after=state(options, BACKEND_OPTION_FIELDS),
    )  # fmt: skip
    return options


def capacity_set(*, backend: Backend, capacity: int | None, actor=None, token: CapacityToken | None = None):
    """Declare how many concurrent requests a backend can serve (applied live: no reload).

    Called by an operator, or by the service itself with a token scoped to this backend (the audit record then
    names the token)."""
    with transaction.atomic():
        if token is not None:
            CapacityToken.objects.filter(pk=token.pk).update(last_used=timezone.now())
        action = f"capacity (token {token.prefix})" if token else "capacity"
        return backend_options_update(backend=backend, actor=actor, action=action[:30], capacity=capacity)


@transaction.atomic
def capacity_token_create(*, backend: Backend, actor=None) -> str:
    """A new secret for ``backend`` to declare its own capacity; shown once, stored as its SHA-256."""
    _http_farm(backend.farm)
    secret = secrets.token_urlsafe(32)
    token = CapacityToken.objects.create(backend=backend, digest=CapacityToken.digest_of(secret), prefix=secret[:8])
    record(
        actor=actor, action="create", object_type="capacitytoken", object_id=token.pk, object_name=str(token),
        farm_ref=backend.farm_id, after={"backend": backend.pk, "prefix": token.prefix},
    )  # fmt: skip
    return secret


@transaction.atomic
def capacity_tokens_revoke(*, backend: Backend, actor=None) -> int:
    """Delete every capacity token of ``backend``; the service can no longer declare its capacity."""
    prefixes = sorted(backend.capacity_tokens.values_list("prefix", flat=True))
    deleted, _ = backend.capacity_tokens.all().delete()
    record(
        actor=actor, action="delete", object_type="capacitytoken", object_name=f"tokens of backend {backend}",
        farm_ref=backend.farm_id, before={"backend": backend.pk, "prefixes": prefixes},
    )  # fmt: skip
    return deleted


def _certificate_changed(certificate: Certificate) -> None:
    farm_ids = list(certificate.farms.values_list("farm_id", flat=True))
    if farm_ids:
        mark_farms_changed(farm_ids)


@transaction.atomic
def certificate_create(*, actor=None, source: str = CertificateSourceChoices.UPLOAD, **values) -> Certificate:
    """Store a certificate after checking it (key, chain order, dates, names); nothing is saved on any error."""
    certificate = Certificate(source=source)
    _save(certificate, CERTIFICATE_FIELDS, values)
    record(
        actor=actor, action="create", object_type="certificate", object_id=certificate.pk,
        object_name=certificate.name, after=_cert_state(certificate),
    )  # fmt: skip
    return certificate


@transaction.atomic
def certificate_update(*, target: Certificate, actor=None, **values) -> Certificate:
    """Replace a certificate (a renewal): the farms that offer it are applied again. (``target``: the row;
    ``certificate`` is one of its fields.)"""
    certificate = target
    before = _cert_state(Certificate.objects.get(pk=certificate.pk))
    _save(certificate, CERTIFICATE_FIELDS, values)
    _certificate_changed(certificate)
    record(
        actor=actor, action="update", object_type="certificate", object_id=certificate.pk,
        object_name=certificate.name, before=before, after=_cert_state(certificate),
    )  # fmt: skip
    return certificate


def certificate_self_signed(*, name: str, names: list[str], days: int = 365, actor=None) -> Certificate:
    """Generate a key and a self-signed certificate for ``names`` (host names, internationalised ones as their
    A-labels, or addresses: l7/hostnames.py)."""
    if not names:
        raise ValidationError({"names": "At least one host name."})
    try:
        names = hostnames.certificate_names(names)
    except ValueError as exc:
        raise ValidationError({"names": str(exc)}) from None
    cert, key = certs.self_signed(names, days)
    return certificate_create(
        actor=actor, source=CertificateSourceChoices.SELF_SIGNED, name=name, certificate=cert, private_key=key
    )


@transaction.atomic
def certificate_delete(*, target: Certificate, actor=None) -> None:
    certificate = target
    if certificate.farms.exists():
        users = ", ".join(sorted(certificate.farms.values_list("farm__name", flat=True)))
        raise ValidationError({"certificate": f"Farms {users} offer this certificate; take it off them first."})
    before, pk, name = _cert_state(certificate), certificate.pk, certificate.name
    certificate.delete()
    record(actor=actor, action="delete", object_type="certificate", object_id=pk, object_name=name, before=before)


def _cert_state(certificate: Certificate) -> dict:
    return {
        "name": certificate.name,
        "source": certificate.source,
        "names": certificate.names,
        "issuer": certificate.issuer,
        "not_after": certificate.not_after.isoformat() if certificate.not_after else None,
    }
