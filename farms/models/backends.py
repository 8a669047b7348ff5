"""A farm's backends (the real servers) and the clients pinned to one of them (static sessions)."""

from __future__ import annotations

import ipaddress

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from compiler import maglev
from compiler.ports import parse_ports

from ..choices import (
    L7_MODES,
    BackendHealthChoices,
    BackendStateChoices,
    FarmModeChoices,
    FarmProtocolChoices,
    FarmSchedulerChoices,
)
from ..fields import AddressField
from ..validation import (
    interface_errors,
    parse_address,
    parse_address_range,
    parse_mac,
    stateless_reply_clash,
    target_problem,
)
from .configuration import KERNEL_MAX, Farm, stored_beside


class Backend(models.Model):
    """A real server of a farm; traffic reaches it by DNAT to address[:port]."""

    farm = models.ForeignKey(Farm, on_delete=models.CASCADE, related_name="backends")
    address = AddressField(db_index=True)  # validation looks a backend's address up in every farm
    port = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(65535)],
        help_text="Empty: the port the client connected to.",
    )
    weight = models.PositiveIntegerField(default=1, validators=[MinValueValidator(1), MaxValueValidator(10000)])
    state = models.CharField(max_length=8, choices=BackendStateChoices, default=BackendStateChoices.ENABLED)
    health = models.CharField(
        max_length=8, choices=BackendHealthChoices, default=BackendHealthChoices.UNKNOWN, editable=False
    )
    health_changed = models.DateTimeField(null=True, blank=True, editable=False)
    health_reason = models.CharField(max_length=200, blank=True, editable=False)
    priority = models.PositiveIntegerField(
        default=1,
        validators=[MinValueValidator(1), MaxValueValidator(100)],
        help_text="As nftlb: each unavailable backend of the current priority level brings the next level in "
        "(a priority-2 backend takes traffic as soon as one priority-1 backend is out).",
    )
    est_connlimit = models.PositiveIntegerField(
        default=0, validators=[KERNEL_MAX], help_text="Established connections allowed (0: off)."
    )
    mac = models.CharField(max_length=17, blank=True, help_text="DSR: the backend's MAC (empty: resolved by ARP/ND).")
    mark = models.PositiveBigIntegerField(
        default=0,
        validators=[MaxValueValidator(2**32 - 1)],
        help_text="Packet mark of this backend's connections, ORed with the farm's (policy routing); 0: none.",
    )
    oface = models.CharField(
        max_length=15, blank=True, help_text="DSR: the interface towards this backend (empty: the farm's)."
    )
    source_addr = models.CharField(
        max_length=45,
        blank=True,
        help_text="SNAT farms: the source address of connections to this backend (empty: the farm's source).",
    )
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
        errors: dict[str, str] = interface_errors(*stored_beside(self, ("oface",)))
        farm = getattr(self, "farm", None) if self.farm_id else None
        try:
            address = parse_address(self.address) if self.address else None
        except ValueError:
            address = None  # the field's own validation (AddressField) says why
        problem = target_problem(address) if address else None
        if problem:
            errors["address"] = problem
            address = None
        if farm and address:
            self.address = str(address)
            if address.version != ipaddress.ip_address(farm.vip).version:
                family = f"IPv{ipaddress.ip_address(farm.vip).version}"
                errors["address"] = f"Farm '{farm.name}' has an {family} VIP; its backends must be {family} too."
        if farm and address and not errors and farm.loops_back(self.address, self.port):
            errors["address"] = f"{self} is the VIP and port of farm '{farm.name}' itself: connections would loop."
        if farm and self.port is not None and farm.protocol == FarmProtocolChoices.ALL:
            errors["port"] = "A farm for all protocols forwards every port unchanged; leave the port empty."
        maglev_farm = farm and self._state.adding and farm.scheduler == FarmSchedulerChoices.MAGLEV
        if maglev_farm and farm.backends.count() >= maglev.MAX_BACKENDS:
            errors["farm"] = f"A maglev farm takes at most {maglev.MAX_BACKENDS} backends (its table's size)."
        if farm and self.port is not None and farm.mode == FarmModeChoices.DSR:
            errors["port"] = "DSR forwards frames unchanged: the backend must listen on the virtual port."
        if farm and farm.mode == FarmModeChoices.LOCAL:
            errors["farm"] = (
                f"Farm '{farm.name}' is local: its connections go to the service on the appliance, not to backends."
            )
        if farm and self.port is None and farm.mode in L7_MODES:
            errors["port"] = "A backend of an HTTP farm needs its port (HAProxy connects to it)."
        if farm and self.port is not None and farm.mode == FarmModeChoices.STATELESS_DNAT:
            ranges = parse_ports(farm.ports)
            if len(ranges) != 1 or ranges[0][0] != ranges[0][1]:
                errors["port"] = "Stateless DNAT maps replies back only for a farm with one virtual port."
        if self.mac:
            try:
                self.mac = parse_mac(self.mac)
            except ValueError as exc:
                errors["mac"] = str(exc)
        if self.source_addr and farm:
            if farm.mode != FarmModeChoices.SNAT:
                errors["source_addr"] = "A source address applies only to the backends of a snat farm."
            else:
                try:
                    low, high = parse_address_range(self.source_addr, ipaddress.ip_address(farm.vip).version)
                except ValueError as exc:
                    errors["source_addr"] = str(exc)
                else:
                    if low != high:
                        errors["source_addr"] = "A backend's source is one address (a pool belongs to the farm)."
                    self.source_addr = low
        if farm and not errors:
            twins = Backend.objects.filter(farm=farm, address=self.address, port=self.port).exclude(pk=self.pk)
            if twins.exists():
                errors["address"] = f"Farm '{farm.name}' already has backend {self}."
        if farm and not errors:
            clash = stateless_reply_clash(farm, self.address, self.port, self.same_address_elsewhere())
            if clash:
                errors["address"] = clash
        if errors:
            raise ValidationError(errors)

    def same_address_elsewhere(self) -> list[tuple[Farm, int | None]]:
        """(farm, port) of every backend with this address in another farm."""
        others = Backend.objects.filter(address=self.address).exclude(farm_id=self.farm_id).select_related("farm")
        return [(b.farm, b.port) for b in others]


class StaticSession(models.Model):
    """A persistence entry that never expires: this client always goes to this backend."""

    farm = models.ForeignKey(Farm, on_delete=models.CASCADE, related_name="static_sessions")
    client = models.CharField(max_length=60, help_text="Address, address:port or MAC, as the farm's persistence.")
    backend = models.ForeignKey(Backend, on_delete=models.CASCADE, related_name="static_sessions")

    class Meta:
        ordering = ("farm", "client")
        constraints = [models.UniqueConstraint(fields=["farm", "client"], name="static_session_unique_client")]

    def __str__(self) -> str:
        return f"{self.client} -> {self.backend}"

    def clean(self) -> None:
        from ..validation import session_key_parts

        errors = {}
        farm = self.farm if self.farm_id else None
        if farm and not farm.persistence:
            errors["farm"] = f"Farm '{farm.name}' has no persistence; static sessions need one."
        elif farm:
            try:
                session_key_parts(self.client, farm)
            except ValueError as exc:
                errors["client"] = str(exc)
        if farm and self.backend_id and self.backend.farm_id != farm.id:
            errors["backend"] = f"Backend {self.backend} is not a backend of farm '{farm.name}'."
        if errors:
            raise ValidationError(errors)
