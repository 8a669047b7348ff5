"""The only code that writes HTTP-farm rows (options, services, backend options, certificates, capacity).

As in ``farms/services.py``: validate with the model's ``clean()``, save in one transaction, move the farm's
configuration generation (one apply after commit, through the same worker queue as the kernel's farms), and record
the change with :func:`farms.audit.audited` in the same transaction (each model's ``audit_state()`` says what the
entry shows; a farm's or a backend's HTTP options are entries of that farm or backend). Private keys never appear
in an audit record.
"""

from __future__ import annotations

import secrets

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from farms.audit import audited, record
from farms.models import Backend, Farm
from farms.services import mark_farms_changed
from lbweb.writes import validated_save

from . import certificates as certs
from . import hostnames
from .choices import CertificateSourceChoices
from .field_lists import BACKEND_OPTION_FIELDS, CERTIFICATE_FIELDS, L7FARM_FIELDS, SERVICE_FIELDS
from .models import CapacityToken, Certificate, HttpService, L7Backend, L7Farm


def _http_farm(farm: Farm) -> None:
    if farm.mode not in ("http", "https"):
        raise ValidationError({"farm": f"Farm '{farm.name}' is not an HTTP farm (mode {farm.mode})."})


@transaction.atomic
def farm_options_update(*, farm: Farm, actor=None, certificates: list[Certificate] | None = None, **values) -> L7Farm:
    """Set an HTTP farm's options (created with their defaults on first use) and, if given, its certificates."""
    _http_farm(farm)
    options, _ = L7Farm.objects.get_or_create(farm=farm)
    return _options_update(options=options, certificates=certificates, actor=actor, **values)


@audited("update", "options")
def _options_update(*, options: L7Farm, certificates: list[Certificate] | None, **values) -> L7Farm:
    validated_save(options, L7FARM_FIELDS, values)
    if certificates is not None:
        options.certificates.set(certificates)
    if options.default_certificate_id and not options.certificates.filter(pk=options.default_certificate_id).exists():
        raise ValidationError({"default_certificate": "The default certificate must be one of the farm's."})
    mark_farms_changed([options.farm_id])
    return options


@audited("create")
@transaction.atomic
def service_create(*, farm: Farm, **values) -> HttpService:
    """Add a service (host/path rule with its scheduler and persistence) to an HTTP farm."""
    service = HttpService(farm=farm)
    validated_save(service, SERVICE_FIELDS, values)
    mark_farms_changed([farm.pk])
    return service


@audited("update", "service")
@transaction.atomic
def service_update(*, service: HttpService, **values) -> HttpService:
    """Change some fields of a service."""
    validated_save(service, SERVICE_FIELDS, values)
    mark_farms_changed([service.farm_id])
    return service


@audited("delete", "service")
@transaction.atomic
def service_delete(*, service: HttpService) -> None:
    """Delete a service; its backends go back to the farm's default service."""
    farm_id = service.farm_id
    service.delete()
    mark_farms_changed([farm_id])


def _backend_options(backend: Backend) -> L7Backend:
    _http_farm(backend.farm)
    return L7Backend.objects.get_or_create(backend=backend)[0]


@transaction.atomic
def backend_options_update(*, backend: Backend, actor=None, **values) -> L7Backend:
    """Set what an HTTP farm's backend has beyond an L4 backend: its service, capacity, TLS."""
    return _backend_options_save(options=_backend_options(backend), actor=actor, **values)


@audited("update", "options")
def _backend_options_save(*, options: L7Backend, **values) -> L7Backend:
    if "capacity" in values and values["capacity"] != options.capacity:
        options.capacity_updated = timezone.now()
    validated_save(options, BACKEND_OPTION_FIELDS, values)
    mark_farms_changed([options.backend.farm_id])
    return options


def capacity_set(*, backend: Backend, capacity: int | None, actor=None, token: CapacityToken | None = None):
    """Declare how many concurrent requests a backend can serve (applied live: no reload).

    Called by an operator, or by the service itself with a token scoped to this backend (the audit record then
    names the token)."""
    with transaction.atomic():
        if token is not None:
            CapacityToken.objects.filter(pk=token.pk).update(last_used=timezone.now())
        return _capacity_save(options=_backend_options(backend), capacity=capacity, token=token, actor=actor)


def _capacity_action(*, token: CapacityToken | None = None, **_) -> str:
    return f"capacity (token {token.prefix})"[:30] if token else "capacity"


@audited(_capacity_action, "options")
def _capacity_save(*, options: L7Backend, capacity: int | None, token: CapacityToken | None) -> L7Backend:
    return _backend_options_save(options=options, capacity=capacity)


@audited("create")
@transaction.atomic
def capacity_token_create(*, backend: Backend) -> tuple[CapacityToken, str]:
    """A new secret for ``backend`` to declare its own capacity, with its row; the secret is shown once and
    stored as its SHA-256."""
    _http_farm(backend.farm)
    secret = secrets.token_urlsafe(32)
    token = CapacityToken.objects.create(backend=backend, digest=CapacityToken.digest_of(secret), prefix=secret[:8])
    return token, secret


@transaction.atomic
def capacity_tokens_revoke(*, backend: Backend, actor=None) -> int:
    """Delete every capacity token of ``backend``; the service can no longer declare its capacity.

    One audit entry for the whole set (no one token is the object): the explicit :func:`farms.audit.record`,
    as an import records itself."""
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


@audited("create")
@transaction.atomic
def certificate_create(*, source: str = CertificateSourceChoices.UPLOAD, **values) -> Certificate:
    """Store a certificate after checking it (key, chain order, dates, names); nothing is saved on any error."""
    certificate = Certificate(source=source)
    validated_save(certificate, CERTIFICATE_FIELDS, values)
    return certificate


@audited("update", "target")
@transaction.atomic
def certificate_update(*, target: Certificate, **values) -> Certificate:
    """Replace a certificate (a renewal): the farms that offer it are applied again. (``target``: the row;
    ``certificate`` is one of its fields.)"""
    validated_save(target, CERTIFICATE_FIELDS, values)
    _certificate_changed(target)
    return target


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


@audited("delete", "target")
@transaction.atomic
def certificate_delete(*, target: Certificate) -> None:
    """Delete a certificate no farm offers."""
    if target.farms.exists():
        users = ", ".join(sorted(target.farms.values_list("farm__name", flat=True)))
        raise ValidationError({"certificate": f"Farms {users} offer this certificate; take it off them first."})
    target.delete()
