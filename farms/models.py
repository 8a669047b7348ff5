"""Farms (virtual services), their backends, and the record of every apply.

The database is the truth; the kernel converges to it. Every write bumps the
configuration generation; the worker records up to which generation each
farm is in the kernel, so "applied / pending / failed" is never a guess.
"""

from __future__ import annotations

import ipaddress

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import F

from .choices import (
    ApplyKindChoices,
    ApplyStatusChoices,
    BackendStateChoices,
    FarmModeChoices,
    FarmProtocolChoices,
    FarmSchedulerChoices,
    FarmStateChoices,
)
from .ports import PortSyntaxError, format_ports, overlaps, parse_ports


class ConfigGeneration(models.Model):
    """A single counter, bumped by every configuration write (inside its transaction)."""

    value = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"generation {self.value}"

    @classmethod
    def bump(cls) -> int:
        cls.objects.get_or_create(pk=1)
        cls.objects.filter(pk=1).update(value=F("value") + 1)
        return cls.current()

    @classmethod
    def current(cls) -> int:
        return cls.objects.filter(pk=1).values_list("value", flat=True).first() or 0


class Farm(models.Model):
    """A virtual service: a VIP, protocol and ports balanced over backends by the kernel."""

    name = models.SlugField(
        max_length=48,
        unique=True,
        help_text="Letters, digits, hyphens and underscores.",
    )
    description = models.CharField(max_length=200, blank=True)
    vip = models.GenericIPAddressField("VIP", help_text="Virtual IPv4 or IPv6 address clients connect to.")
    protocol = models.CharField(max_length=4, choices=FarmProtocolChoices, default=FarmProtocolChoices.TCP)
    ports = models.CharField(
        max_length=500,
        blank=True,
        help_text="Virtual ports: a port, a list and ranges such as 80,443,8000-8100. Empty for protocol 'all'.",
    )
    mode = models.CharField(max_length=4, choices=FarmModeChoices, default=FarmModeChoices.SNAT)
    scheduler = models.CharField(
        max_length=8,
        choices=FarmSchedulerChoices,
        default=FarmSchedulerChoices.ROUND_ROBIN,
    )
    state = models.CharField(max_length=3, choices=FarmStateChoices, default=FarmStateChoices.UP)

    config_generation = models.BigIntegerField(default=0, editable=False)
    applied_generation = models.BigIntegerField(default=0, editable=False)
    failed_generation = models.BigIntegerField(default=0, editable=False)
    apply_error = models.TextField(blank=True, editable=False)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ("name",)

    def __str__(self) -> str:
        return self.name

    @property
    def port_ranges(self) -> list[tuple[int, int]]:
        return parse_ports(self.ports)

    @property
    def apply_status(self) -> str:
        if self.applied_generation >= self.config_generation:
            return ApplyStatusChoices.APPLIED
        if self.apply_error and self.failed_generation >= self.config_generation:
            return ApplyStatusChoices.FAILED
        return ApplyStatusChoices.PENDING

    def clean(self) -> None:
        errors: dict[str, str] = {}
        if self.protocol == FarmProtocolChoices.ALL:
            if self.ports:
                errors["ports"] = "A farm for all protocols takes every port; leave the ports empty."
        elif not self.ports:
            errors["ports"] = f"A {self.protocol} farm needs at least one virtual port."
        else:
            try:
                self.ports = format_ports(parse_ports(self.ports))
            except PortSyntaxError as exc:
                errors["ports"] = str(exc)
        if self.vip and "vip" not in errors:
            self.vip = str(ipaddress.ip_address(self.vip))
        if not errors and self.pk:
            errors.update(self._backend_conflicts())
        if not errors:
            conflict = self._conflicting_farm()
            if conflict:
                errors[conflict[0]] = conflict[1]
        if errors:
            raise ValidationError(errors)

    def _backend_conflicts(self) -> dict[str, str]:
        errors = {}
        version = ipaddress.ip_address(self.vip).version
        backends = list(self.backends.all())
        if any(ipaddress.ip_address(b.address).version != version for b in backends):
            errors["vip"] = f"This farm has backends of another IP family than IPv{version}; change them first."
        if self.protocol == FarmProtocolChoices.ALL and any(b.port is not None for b in backends):
            errors["protocol"] = "Backends with a port cannot serve a farm for all protocols; clear their ports first."
        return errors

    def _conflicting_farm(self) -> tuple[str, str] | None:
        others = Farm.objects.filter(vip=self.vip).exclude(pk=self.pk)
        mine = self.port_ranges
        for other in others:
            if FarmProtocolChoices.ALL in (self.protocol, other.protocol):
                return (
                    "vip",
                    f"Farm '{other.name}' already takes {other.protocol} traffic to {self.vip}.",
                )
            if other.protocol != self.protocol:
                continue
            common = overlaps(mine, other.port_ranges)
            if common:
                return "ports", (
                    f"{self.vip} {self.protocol} port(s) {format_ports(common)} already belong to farm '{other.name}'."
                )
        return None


class Backend(models.Model):
    """A real server of a farm; traffic reaches it by DNAT to address[:port]."""

    farm = models.ForeignKey(Farm, on_delete=models.CASCADE, related_name="backends")
    address = models.GenericIPAddressField()
    port = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(65535)],
        help_text="Empty: the port the client connected to.",
    )
    weight = models.PositiveIntegerField(default=1, validators=[MinValueValidator(1), MaxValueValidator(10000)])
    state = models.CharField(max_length=8, choices=BackendStateChoices, default=BackendStateChoices.ENABLED)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ("farm", "id")
        constraints = [
            models.UniqueConstraint(fields=["farm", "address", "port"], name="backend_unique_address_port"),
        ]

    def __str__(self) -> str:
        if self.port is None:
            return str(self.address)
        if ":" in str(self.address):
            return f"[{self.address}]:{self.port}"
        return f"{self.address}:{self.port}"

    def clean(self) -> None:
        errors: dict[str, str] = {}
        farm = getattr(self, "farm", None) if self.farm_id else None
        if farm and self.address:
            self.address = str(ipaddress.ip_address(self.address))
            if ipaddress.ip_address(self.address).version != ipaddress.ip_address(farm.vip).version:
                family = f"IPv{ipaddress.ip_address(farm.vip).version}"
                errors["address"] = f"Farm '{farm.name}' has an {family} VIP; its backends must be {family} too."
        if farm and self.port is not None and farm.protocol == FarmProtocolChoices.ALL:
            errors["port"] = "A farm for all protocols forwards every port unchanged; leave the port empty."
        if farm and not errors:
            twins = Backend.objects.filter(farm=farm, address=self.address, port=self.port).exclude(pk=self.pk)
            if twins.exists():
                errors["address"] = f"Farm '{farm.name}' already has backend {self}."
        if errors:
            raise ValidationError(errors)


class KernelFarm(models.Model):
    """What the worker last put in the kernel for one farm (kept after the farm is deleted, until removed)."""

    farm_id = models.BigIntegerField(primary_key=True)
    name = models.CharField(max_length=48)
    digest = models.CharField(max_length=32)
    objects_json = models.JSONField(default=dict)
    applied_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.name} ({self.digest})"


class ApplyRun(models.Model):
    """One attempt of the worker to bring the kernel to a configuration generation."""

    generation = models.BigIntegerField()
    kind = models.CharField(max_length=12, choices=ApplyKindChoices)
    reason = models.CharField(max_length=40, blank=True)
    started = models.DateTimeField()
    duration_ms = models.FloatField(default=0)
    ok = models.BooleanField(default=False)
    error = models.TextField(blank=True)
    digest = models.CharField(max_length=32, blank=True)
    farms_changed = models.IntegerField(default=0)
    commands = models.IntegerField(default=0)

    class Meta:
        ordering = ("-id",)

    def __str__(self) -> str:
        return f"apply #{self.pk} gen {self.generation} {self.kind} {'ok' if self.ok else 'failed'}"
