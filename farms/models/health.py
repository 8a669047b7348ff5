"""How healthd checks a farm's backends, and every health transition it recorded."""

from __future__ import annotations

import shlex

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone

from compiler.ports import PortSyntaxError, parse_ports

from ..choices import (
    BackendHealthChoices,
    FarmModeChoices,
    FarmProtocolChoices,
    HealthCheckTypeChoices,
    HttpMethodChoices,
)
from .backends import Backend
from .configuration import Farm


class HealthCheck(models.Model):
    """How healthd probes the backends of one farm; a farm without one gets its protocol's default."""

    farm = models.OneToOneField(Farm, on_delete=models.CASCADE, related_name="health_check")
    type = models.CharField(max_length=8, choices=HealthCheckTypeChoices, default=HealthCheckTypeChoices.TCP)
    port = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(65535)],
        help_text="Port probed; empty: the backend's port, else the farm's first port.",
    )
    interval = models.FloatField(
        default=2.0,
        validators=[MinValueValidator(0.1), MaxValueValidator(3600)],
        help_text="Seconds between two probes of one backend.",
    )
    timeout = models.FloatField(
        default=1.0,
        validators=[MinValueValidator(0.05), MaxValueValidator(600)],
        help_text="Seconds a probe may take (a command gets this long too).",
    )
    rise = models.PositiveSmallIntegerField(
        default=2,
        validators=[MinValueValidator(1), MaxValueValidator(100)],
        help_text="Consecutive successes that bring a down backend back.",
    )
    fall = models.PositiveSmallIntegerField(
        default=3,
        validators=[MinValueValidator(1), MaxValueValidator(100)],
        help_text="Consecutive failures that take an up backend down; a probe that fails, or has no answer after "
        "half the timeout, is confirmed at once by fall - 1 parallel probes within the same timeout, so one lost "
        "probe never takes a backend down and a silent one is down one timeout after its first unanswered probe.",
    )
    http_method = models.CharField(max_length=8, choices=HttpMethodChoices, default=HttpMethodChoices.GET)
    http_path = models.CharField(max_length=500, default="/")
    http_statuses = models.CharField(
        max_length=100, default="200-399", help_text="Healthy status codes: a list and ranges, e.g. 200,204,300-399."
    )
    http_body = models.CharField(
        max_length=200, blank=True, help_text="Text the response body must contain (first 64 KiB)."
    )
    http_host = models.CharField(
        max_length=255, blank=True, help_text="Host header (and TLS server name); empty: the backend address."
    )
    tls_verify = models.BooleanField(default=False, help_text="HTTPS: verify the certificate and its name.")
    udp_send = models.CharField(max_length=500, blank=True, help_text="UDP: the payload sent (text).")
    udp_expect = models.CharField(
        max_length=500, blank=True, help_text="UDP: text the reply must contain; empty: any reply."
    )
    command = models.CharField(
        max_length=1000,
        blank=True,
        help_text="Command line (no shell); {address} and {port} are replaced. Exit status 0 means healthy.",
    )
    cut_connections = models.BooleanField(
        default=False,
        help_text="When a backend goes down, delete its connections from conntrack so clients reconnect elsewhere.",
    )
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    PROTOCOL_DEFAULTS = {
        FarmProtocolChoices.TCP: HealthCheckTypeChoices.TCP,
        FarmProtocolChoices.UDP: HealthCheckTypeChoices.NONE,  # a UDP service answers only what it understands
        FarmProtocolChoices.SCTP: HealthCheckTypeChoices.ICMP,
        FarmProtocolChoices.ALL: HealthCheckTypeChoices.ICMP,
    }
    NEEDS_PORT = (
        HealthCheckTypeChoices.TCP,
        HealthCheckTypeChoices.HTTP,
        HealthCheckTypeChoices.HTTPS,
        HealthCheckTypeChoices.UDP,
    )

    def __str__(self) -> str:
        return f"{self.type} check of {self.farm}"

    @classmethod
    def effective_for(cls, farm: Farm) -> HealthCheck:
        """The farm's own check, or the unsaved default of its protocol (none for a local farm: no backends)."""
        try:
            return farm.health_check
        except cls.DoesNotExist:
            local = farm.mode == FarmModeChoices.LOCAL
            return cls(farm=farm, type=HealthCheckTypeChoices.NONE if local else cls.PROTOCOL_DEFAULTS[farm.protocol])

    @property
    def status_ranges(self) -> list[tuple[int, int]]:
        return parse_ports(self.http_statuses)

    def probe_port(self, backend: Backend) -> int | None:
        """The port probed on ``backend``: the check's, the backend's, else the farm's first virtual port."""
        if self.port is not None:
            return self.port
        if backend.port is not None:
            return backend.port
        ranges = self.farm.port_ranges
        return ranges[0][0] if ranges else None

    def clean(self) -> None:
        errors: dict[str, str] = {}
        if self.timeout is not None and self.interval is not None and self.timeout > self.interval:
            errors["timeout"] = "The timeout cannot be longer than the interval."
        farm = getattr(self, "farm", None) if self.farm_id else None
        if farm and self.type in self.NEEDS_PORT and self.port is None and farm.protocol == FarmProtocolChoices.ALL:
            errors["port"] = f"A {self.type} check of a farm for all protocols needs the port to probe."
        if farm and farm.mode == FarmModeChoices.LOCAL and self.type != HealthCheckTypeChoices.NONE:
            errors["type"] = (
                "A local farm has no backends to probe, and no check would change where its connections go: with "
                "no service listening on the VIP the kernel itself refuses them (TCP reset, ICMP port unreachable)."
            )
        if self.type in (HealthCheckTypeChoices.HTTP, HealthCheckTypeChoices.HTTPS):
            errors.update(self._http_errors())
        if self.type == HealthCheckTypeChoices.UDP and not self.udp_send:
            errors["udp_send"] = "A UDP check needs a payload to send."
        if self.type == HealthCheckTypeChoices.COMMAND:
            try:
                if not shlex.split(self.command):
                    errors["command"] = "A command check needs a command."
            except ValueError as exc:
                errors["command"] = f"The command cannot be split into arguments: {exc}."
        if errors:
            raise ValidationError(errors)

    def _http_errors(self) -> dict[str, str]:
        errors = {}
        if not self.http_path.startswith("/") or any(c.isspace() for c in self.http_path):
            errors["http_path"] = "The path starts with / and has no spaces."
        try:
            ranges = self.status_ranges
        except PortSyntaxError:
            ranges = []
        if not ranges or any(low < 100 or high > 599 for low, high in ranges):
            errors["http_statuses"] = "Give status codes between 100 and 599, e.g. 200,204,300-399."
        if any(c.isspace() or c in "/@" for c in self.http_host):
            errors["http_host"] = "A host name, optionally with :port."
        return errors


class HealthEvent(models.Model):
    """One health transition of a backend (up, down or unknown), with when and why."""

    backend = models.ForeignKey(Backend, on_delete=models.CASCADE, related_name="health_events")
    time = models.DateTimeField(default=timezone.now, db_index=True)
    previous = models.CharField(max_length=8, choices=BackendHealthChoices)
    current = models.CharField(max_length=8, choices=BackendHealthChoices)
    reason = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ("-time", "-id")

    def __str__(self) -> str:
        return f"{self.backend} {self.previous} -> {self.current} at {self.time:%Y-%m-%d %H:%M:%S}"
