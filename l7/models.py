"""HTTP and HTTPS farms: what HAProxy serves beside the kernel's farms.

An HTTP farm is a ``farms.Farm`` of mode ``http`` or ``https`` (so one VIP:port check, one generation counter, one
apply history, one audit trail and healthd's checks cover both kinds), with these rows beside it: its HTTP
options (``L7Farm``), its services (host and path rules, each with a scheduler and persistence), per backend the
options only a proxy has (``L7Backend``: service, declared capacity, TLS), and certificates.
"""

from __future__ import annotations

import hashlib

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone

from farms.models import Backend, Farm

from . import certificates, validation
from .choices import CertificateSourceChoices, PersistenceChoices, SchedulerChoices
from .field_lists import BACKEND_OPTION_FIELDS, L7FARM_FIELDS, SERVICE_FIELDS

SECONDS = [MinValueValidator(1), MaxValueValidator(86400)]


class Certificate(models.Model):
    """A certificate with its chain and private key, offered by HTTPS farms (chosen by the client's SNI)."""

    name = models.SlugField(max_length=64, unique=True)
    certificate = models.TextField(help_text="The certificate (PEM).")
    chain = models.TextField(blank=True, help_text="Intermediate certificates (PEM), each after the one it signed.")
    private_key = models.TextField(help_text="The private key (PEM, not encrypted).")
    source = models.CharField(max_length=12, choices=CertificateSourceChoices, default=CertificateSourceChoices.UPLOAD)
    names = models.JSONField(default=list, editable=False, help_text="DNS names the certificate is valid for.")
    issuer = models.CharField(max_length=300, blank=True, editable=False)
    not_before = models.DateTimeField(null=True, editable=False)
    not_after = models.DateTimeField(null=True, editable=False)
    acme_domains = models.CharField(max_length=500, blank=True, help_text="ACME: names to renew it for.")
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ("name",)

    def audit_state(self) -> dict:
        """What the audit trail shows of a certificate: never its key or its PEM, only what identifies it."""
        return {
            "name": self.name,
            "source": self.source,
            "names": self.names,
            "issuer": self.issuer,
            "not_after": self.not_after.isoformat() if self.not_after else None,
        }

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        """Key matches, chain in order, dates, names: field-keyed errors from ``certificates.inspect``. A
        certificate given with its chain after it (a fullchain file) is kept as the leaf and the chain."""
        try:
            info = certificates.inspect(self.certificate, self.chain, self.private_key)
        except certificates.CertificateErrors as exc:
            raise ValidationError(exc.errors) from None
        if self.certificate.count("-----BEGIN CERTIFICATE-----") > 1:
            self.certificate, self.chain = info.certificate, info.chain
        self.names, self.issuer = info.names, info.issuer
        self.not_before, self.not_after = info.not_before, info.not_after

    @property
    def pem(self) -> str:
        """What HAProxy loads: certificate, chain, key."""
        parts = [self.certificate.strip(), self.chain.strip(), self.private_key.strip()]
        return "\n".join(p for p in parts if p) + "\n"

    @property
    def days_left(self) -> int | None:
        return (self.not_after - timezone.now()).days if self.not_after else None

    @property
    def expiry_status(self) -> str:
        """ok, warning (within LBWEB_CERT_WARN_DAYS), expired."""
        from django.conf import settings

        days = self.days_left
        if days is None:
            return "ok"
        if days < 0:
            return "expired"
        return "warning" if days <= getattr(settings, "LBWEB_CERT_WARN_DAYS", 21) else "ok"


class L7Farm(models.Model):
    """The HTTP options of a farm of mode http or https."""

    farm = models.OneToOneField(Farm, on_delete=models.CASCADE, related_name="l7")
    redirect_ports = models.CharField(
        max_length=100, blank=True, help_text="HTTPS farms: plain HTTP ports answered with a redirect to HTTPS."
    )
    http2 = models.BooleanField(default=True, help_text="Offer HTTP/2 over TLS (ALPN h2).")
    hsts_max_age = models.PositiveIntegerField(
        default=0, validators=[MaxValueValidator(63072000)], help_text="Strict-Transport-Security max-age (0: off)."
    )
    forwarded_headers = models.BooleanField(default=True, help_text="Add X-Forwarded-For, -Proto and -Host.")
    timeout_client = models.PositiveIntegerField(default=30, validators=SECONDS)
    timeout_server = models.PositiveIntegerField(default=30, validators=SECONDS)
    timeout_connect = models.PositiveIntegerField(default=5, validators=SECONDS)
    timeout_http_request = models.PositiveIntegerField(default=10, validators=SECONDS)
    timeout_keep_alive = models.PositiveIntegerField(default=10, validators=SECONDS)
    timeout_tunnel = models.PositiveIntegerField(
        default=3600, validators=SECONDS, help_text="Idle time of WebSockets and other upgraded connections."
    )
    headers = models.JSONField(default=list, blank=True, help_text='[{"direction", "name", "value"}]; no value: del.')
    redirects = models.JSONField(default=list, blank=True, help_text='[{"path_prefix", "target", "code", "keep_path"}]')
    error_pages = models.JSONField(default=dict, blank=True, help_text='{"503": "<html>...</html>"}')
    certificates = models.ManyToManyField(Certificate, blank=True, related_name="farms")
    default_certificate = models.ForeignKey(
        Certificate, null=True, blank=True, on_delete=models.PROTECT, related_name="+",
        help_text="Offered when the client's SNI matches no certificate (and to clients without SNI).",
    )  # fmt: skip
    retry_on = models.CharField(
        max_length=200, blank=True,
        help_text="When HAProxy sends a request again: conn-failure empty-response junk-response response-timeout "
        "500 502 503 504, space separated (empty: conn-failure). Responses are retried for idempotent methods only.",
    )  # fmt: skip
    retries = models.PositiveSmallIntegerField(
        default=3, validators=[MaxValueValidator(10)], help_text="Attempts after the first (HAProxy's default: 3)."
    )
    redispatch = models.BooleanField(
        default=False, help_text="Send each retry to another backend, even one a cookie names (option redispatch)."
    )
    accept_proxy = models.BooleanField(
        default=False, help_text="Read the PROXY protocol (v1 or v2) on every port: the appliance is behind another LB."
    )
    proxy_trusted = models.CharField(
        max_length=1000, blank=True,
        help_text="With accept_proxy: the addresses or networks (space separated) of the LBs in front; connections "
        "from any other source are refused.",
    )  # fmt: skip

    @property
    def audit_as(self) -> Farm:
        """The audit trail records a farm's HTTP options under the farm's id and name."""
        return self.farm

    def audit_state(self) -> dict:
        certificates = sorted(c.name for c in self.certificates.all()) if self.pk else []
        return {**{name: self.serializable_value(name) for name in L7FARM_FIELDS}, "certificates": certificates}

    def __str__(self) -> str:
        return f"HTTP options of {self.farm}"

    def clean(self) -> None:
        from compiler.ports import PortSyntaxError, format_ports, overlaps, parse_ports

        errors: dict[str, str] = {}
        for name, check in (
            ("headers", validation.header_rules_errors),
            ("redirects", validation.redirect_rules_errors),
            ("error_pages", validation.error_pages_errors),
        ):
            problem = check(getattr(self, name))
            if problem:
                errors[name] = problem
        if self.redirect_ports:
            try:
                ranges = parse_ports(self.redirect_ports)
                self.redirect_ports = format_ports(ranges)
                if self.farm.mode != "https":
                    errors["redirect_ports"] = "Only an HTTPS farm redirects plain HTTP ports to itself."
                elif overlaps(ranges, self.farm.port_ranges):
                    errors["redirect_ports"] = "These ports are the farm's HTTPS ports."
                elif problem := validation.port_count_errors(ranges):
                    errors["redirect_ports"] = problem
            except PortSyntaxError as exc:
                errors["redirect_ports"] = str(exc)
        retry_words, problem = validation.retry_on_words(self.retry_on)
        if problem:
            errors["retry_on"] = problem
        else:
            self.retry_on = " ".join(retry_words)
        networks, problem = validation.trusted_sources(self.proxy_trusted)
        if problem:
            errors["proxy_trusted"] = problem
        else:
            self.proxy_trusted = " ".join(networks)
            if self.accept_proxy and not networks:
                errors["proxy_trusted"] = (
                    "Name the load balancers in front (addresses or networks): a PROXY header from anyone else "
                    "would let any client choose the address the farm and its backends see."
                )
        if errors:
            raise ValidationError(errors)


class HttpService(models.Model):
    """Requests of a farm chosen by host and path prefix, with their own backends, scheduler and persistence.

    Services are tried in ``position`` order; one with neither hosts nor path takes what the others did not."""

    farm = models.ForeignKey(Farm, on_delete=models.CASCADE, related_name="http_services")
    name = models.SlugField(max_length=48)
    position = models.PositiveIntegerField(default=0)
    hosts = models.CharField(
        max_length=1000, blank=True, help_text="Host names, space separated; *.example.com for any subdomain."
    )
    host_regex = models.CharField(max_length=300, blank=True, help_text="Or a regular expression on the host.")
    path_prefix = models.CharField(max_length=300, blank=True, help_text="e.g. /api (empty: every path).")
    scheduler = models.CharField(max_length=10, choices=SchedulerChoices, default=SchedulerChoices.ROUND_ROBIN)
    persistence = models.CharField(max_length=6, choices=PersistenceChoices, blank=True, default="")
    persistence_ttl = models.PositiveIntegerField(
        default=0, validators=[MaxValueValidator(7 * 86400)], help_text="Seconds (0: cookie for the browser session)."
    )
    persistence_header = models.CharField(max_length=64, blank=True, help_text="Header persistence: its name.")
    cookie_name = models.CharField(max_length=32, default="LBWEBSRV")
    queue_timeout = models.PositiveIntegerField(
        default=5, validators=SECONDS, help_text="Seconds a request waits at the LB for a backend under capacity."
    )
    reuse = models.BooleanField(default=True, help_text="Reuse idle backend connections across requests.")
    headers = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ("farm", "position", "id")
        constraints = [models.UniqueConstraint(fields=["farm", "name"], name="l7_service_unique_name")]

    def audit_state(self) -> dict:
        return {name: getattr(self, name) for name in SERVICE_FIELDS}

    def __str__(self) -> str:
        return f"{self.farm}/{self.name}"

    def clean(self) -> None:
        """Each value HAProxy reads checked against its grammar (``l7/validation.py``); the persistence header and
        the cookie name whenever they are set, not only while in use, so switching persistence never brings back a
        value nobody checked."""
        errors: dict[str, str] = {}
        farm = self.farm if self.farm_id else None
        if farm and farm.mode not in ("http", "https"):
            errors["farm"] = f"Farm '{farm.name}' is not an HTTP farm (mode {farm.mode})."
        hosts_problem = validation.hosts_errors(self.hosts)
        if not hosts_problem:
            self.hosts = " ".join(self.hosts.lower().split())
        header_in_use = self.persistence == "header" or self.persistence_header
        for name, problem in (
            ("hosts", hosts_problem),
            ("host_regex", validation.regex_errors(self.host_regex) if self.host_regex else None),
            ("path_prefix", validation.path_prefix_errors(self.path_prefix)),
            ("headers", validation.header_rules_errors(self.headers)),
            (
                "persistence_header",
                validation.persistence_header_errors(self.persistence_header) if header_in_use else None,
            ),
            ("cookie_name", validation.cookie_name_errors(self.cookie_name)),
        ):
            if problem:
                errors[name] = problem
        if errors:
            raise ValidationError(errors)


class L7Backend(models.Model):
    """What a backend of an HTTP farm has beyond an L4 backend: its service, declared capacity, TLS."""

    backend = models.OneToOneField(Backend, on_delete=models.CASCADE, related_name="l7")
    service = models.ForeignKey(
        HttpService, null=True, blank=True, on_delete=models.SET_NULL, related_name="l7_backends",
        help_text="Empty: the farm's default service (requests no service matched).",
    )  # fmt: skip
    capacity = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(100000)],
        help_text="Concurrent requests the backend can serve; beyond it requests wait at the LB.",
    )
    capacity_updated = models.DateTimeField(null=True, blank=True, editable=False)
    tls = models.BooleanField(default=False, help_text="Speak TLS to the backend.")
    tls_verify = models.BooleanField(default=False, help_text="Verify its certificate against the system CAs.")
    tls_sni = models.CharField(max_length=253, blank=True)
    slowstart = models.PositiveIntegerField(
        default=0, validators=[MaxValueValidator(3600)],
        help_text="Seconds over which a backend that comes back (or is enabled) ramps up to its weight (0: at once).",
    )  # fmt: skip
    passive_errors = models.PositiveSmallIntegerField(
        default=0, validators=[MaxValueValidator(100)],
        help_text="Consecutive failed requests (connection errors, 5xx) after which HAProxy takes the backend out "
        "(0: off). healthd records it down with the reason and its check brings it back.",
    )  # fmt: skip
    send_proxy = models.BooleanField(
        default=False, help_text="Send the PROXY protocol v2 header, with the client's address, to this backend."
    )

    @property
    def audit_as(self) -> Backend:
        """The audit trail records a backend's HTTP options under the backend's id and name."""
        return self.backend

    def audit_state(self) -> dict:
        return {name: self.serializable_value(name) for name in BACKEND_OPTION_FIELDS}

    def __str__(self) -> str:
        return f"HTTP options of backend {self.backend}"

    def clean(self) -> None:
        errors: dict[str, str] = {}
        if self.service_id and self.service.farm_id != self.backend.farm_id:
            errors["service"] = "The service belongs to another farm."
        if self.tls_sni and (problem := validation.host_name_errors(self.tls_sni, "host name to send as SNI")):
            errors["tls_sni"] = problem
        if errors:
            raise ValidationError(errors)


class CapacityToken(models.Model):
    """A secret that lets one backend (a service) declare its own capacity, and nothing else."""

    backend = models.ForeignKey(Backend, on_delete=models.CASCADE, related_name="capacity_tokens")
    digest = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=8)
    created = models.DateTimeField(auto_now_add=True)
    last_used = models.DateTimeField(null=True, blank=True)

    def audit_state(self) -> dict:
        """Which backend and the token's first characters (what the operator sees of it), never its digest."""
        return {"backend": self.backend_id, "prefix": self.prefix}

    def __str__(self) -> str:
        return f"capacity token {self.prefix}… of backend {self.backend_id}"

    @staticmethod
    def digest_of(secret: str) -> str:
        return hashlib.sha256(secret.encode()).hexdigest()
