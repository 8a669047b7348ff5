"""Farms (virtual services), their backends, and the record of every apply.

The database is the truth; the kernel converges to it. Every write bumps the
configuration generation; the worker records up to which generation each
farm is in the kernel, so "applied / pending / failed" is never a guess.
"""

from __future__ import annotations

import ipaddress
import shlex

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.serializers.json import DjangoJSONEncoder
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import F
from django.utils import timezone
from django.utils.functional import cached_property

from compiler import maglev
from compiler.limits import KERNEL_INT_MAX
from compiler.ports import PortSyntaxError, format_ports, overlaps, parse_ports

from .choices import (
    L7_MODES,
    ApplyKindChoices,
    ApplyStatusChoices,
    BackendHealthChoices,
    BackendStateChoices,
    FarmAllDownChoices,
    FarmModeChoices,
    FarmProtocolChoices,
    FarmSchedulerChoices,
    FarmStateChoices,
    HashFieldChoices,
    HealthCheckTypeChoices,
    HelperChoices,
    HttpMethodChoices,
    LimitVerdictChoices,
    PersistenceChoices,
    PolicyTypeChoices,
    RateUnitChoices,
)
from .fields import AddressField
from .validation import (
    farm_option_errors,
    interface_errors,
    management_errors,
    parse_address,
    parse_address_range,
    parse_mac,
    parse_networks,
    stateless_reply_clash,
    target_problem,
    vip_problem,
)

KERNEL_MAX = MaxValueValidator(KERNEL_INT_MAX)  # rates, bursts, connection counts: see compiler.limits


def stored_beside(row: models.Model, fields: tuple[str, ...]) -> tuple[dict[str, str], dict[str, str]]:
    """``fields`` of ``row`` as they are now, and as the database holds them (empty for a new row, and no
    query when every one is empty)."""
    values = {name: getattr(row, name) or "" for name in fields}
    if row.pk is None or not any(values.values()):
        return values, {}
    return values, type(row).objects.filter(pk=row.pk).values(*fields).first() or {}


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


class Policy(models.Model):
    """A shared deny or allow list of addresses and networks, matched against clients' source address."""

    name = models.SlugField(max_length=40, unique=True)
    type = models.CharField(max_length=5, choices=PolicyTypeChoices, default=PolicyTypeChoices.DENY)
    description = models.CharField(max_length=200, blank=True)
    elements = models.TextField(blank=True, help_text="Addresses and CIDRs, separated by commas, spaces or lines.")
    config_generation = models.BigIntegerField(default=0, editable=False)

    class Meta:
        ordering = ("name",)
        verbose_name_plural = "policies"

    def __str__(self) -> str:
        return self.name

    @property
    def element_list(self) -> list[str]:
        return parse_networks(self.elements)

    def clean(self) -> None:
        try:
            self.elements = "\n".join(parse_networks(self.elements))
        except ValueError as exc:
            raise ValidationError({"elements": str(exc)}) from None


class Farm(models.Model):
    """A virtual service: a VIP, protocol and ports balanced over backends by the kernel."""

    name = models.SlugField(
        max_length=48,
        unique=True,
        help_text="Letters, digits, hyphens and underscores.",
    )
    description = models.CharField(max_length=200, blank=True)
    vip = AddressField("VIP", help_text="Virtual IPv4 or IPv6 address clients connect to.")
    protocol = models.CharField(max_length=4, choices=FarmProtocolChoices, default=FarmProtocolChoices.TCP)
    ports = models.CharField(
        max_length=500,
        blank=True,
        help_text="Virtual ports: a port, a list and ranges such as 80,443,8000-8100. Empty for protocol 'all'.",
    )
    mode = models.CharField(max_length=8, choices=FarmModeChoices, default=FarmModeChoices.SNAT)
    scheduler = models.CharField(
        max_length=10,
        choices=FarmSchedulerChoices,
        default=FarmSchedulerChoices.ROUND_ROBIN,
    )
    state = models.CharField(max_length=3, choices=FarmStateChoices, default=FarmStateChoices.UP)
    when_all_down = models.CharField(
        max_length=8,
        choices=FarmAllDownChoices,
        default=FarmAllDownChoices.REJECT,
        help_text="What new connections get when no backend is active (all disabled or down).",
    )
    fallback_address = AddressField(
        null=True, blank=True, help_text="With 'fallback': where new connections go when no backend is active."
    )
    fallback_port = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(65535)],
        help_text="Port of the fallback address; empty: the port the client connected to.",
    )
    sched_param = models.CharField(
        max_length=60,
        blank=True,
        help_text="Hash scheduler: fields to hash, space separated ("
        + ", ".join(HashFieldChoices.values)
        + "). nftlb: sched-param.",
    )
    persistence = models.CharField(max_length=16, choices=PersistenceChoices, blank=True, default="")
    persist_ttl = models.PositiveIntegerField(
        default=60, validators=[MinValueValidator(1), MaxValueValidator(7 * 86400)], help_text="Seconds."
    )
    source_addr = models.CharField(
        max_length=100, blank=True, help_text="SNAT source: an address or a range a-b (empty: masquerade)."
    )
    source_ports = models.CharField(max_length=11, blank=True, help_text="SNAT source ports, e.g. 1024-65535.")
    new_rtlimit = models.PositiveIntegerField(
        default=0, validators=[KERNEL_MAX], help_text="New connections per unit per client address (0: off)."
    )
    new_rtlimit_unit = models.CharField(max_length=6, choices=RateUnitChoices, default=RateUnitChoices.SECOND)
    new_rtlimit_burst = models.PositiveIntegerField(default=0, validators=[KERNEL_MAX])
    rst_rtlimit = models.PositiveIntegerField(
        default=0, validators=[KERNEL_MAX], help_text="TCP resets per unit per client address (0: off)."
    )
    rst_rtlimit_unit = models.CharField(max_length=6, choices=RateUnitChoices, default=RateUnitChoices.SECOND)
    rst_rtlimit_burst = models.PositiveIntegerField(default=0, validators=[KERNEL_MAX])
    limits_ttl = models.PositiveIntegerField(
        default=120,
        validators=[MinValueValidator(1), MaxValueValidator(7 * 86400)],
        help_text="Seconds a client stays in a rate limit's meter after its last new connection or reset.",
    )
    est_connlimit = models.PositiveIntegerField(
        default=0, validators=[KERNEL_MAX], help_text="Established connections per client address (0: off)."
    )
    limit_verdict = models.CharField(max_length=6, choices=LimitVerdictChoices, default=LimitVerdictChoices.DROP)
    log = models.BooleanField(default=False, help_text="Log new connections as they arrive (nftlb: input).")
    log_forward = models.BooleanField(
        default=False, help_text="Log every forwarded packet of the farm, both ways (nftlb: forward)."
    )
    log_output = models.BooleanField(
        default=False, help_text="Log new connections as they leave for the backend (nftlb: output)."
    )
    log_prefix = models.CharField(
        max_length=60,
        blank=True,
        help_text="nftlb's placeholders TYPE (IN, FWD, OUT), FNAME, KNAME are filled in; empty: 'TYPE-FNAME '. "
        "At most 127 bytes in UTF-8 (the kernel's limit), no control characters.",
    )
    log_rtlimit = models.PositiveIntegerField(
        default=10, validators=[KERNEL_MAX], help_text="Log lines per unit (0: every one, nftlb's default)."
    )
    log_rtlimit_unit = models.CharField(max_length=6, choices=RateUnitChoices, default=RateUnitChoices.SECOND)
    log_drops = models.BooleanField(
        default=True, help_text="Log what limits, tcp-strict and policies drop, with nftlb's prefixes (nftlb: log)."
    )
    mark = models.PositiveBigIntegerField(
        default=0,
        validators=[MaxValueValidator(2**32 - 1)],
        help_text="Packet mark of the farm's connections, for policy routing (ip rule fwmark); 0: none.",
    )
    helper = models.CharField(max_length=6, choices=HelperChoices, blank=True, default="")
    tcp_strict = models.BooleanField(default=False, help_text="Drop packets conntrack finds invalid.")
    intra_connect = models.BooleanField(default=False, help_text="Balance connections from the appliance itself.")
    flow_offload = models.BooleanField(default=False, help_text="Flowtable fast path for established flows.")
    count_bytes = models.BooleanField(
        default=True,
        help_text="Count the bytes and packets of each backend, both ways, on every packet (the dashboard's "
        "throughput). Off: a packet of this farm skips that lookup (3-4 % of a stateful farm's throughput on the "
        "bench); new and open connections are still counted, bytes are not.",
    )
    interface = models.CharField(max_length=15, blank=True, help_text="DSR: the interface facing the backends.")
    oface = models.CharField(
        max_length=15, blank=True, help_text="DSR: the interface frames leave by (empty: the interface)."
    )
    ether_addr = models.CharField(
        max_length=17, blank=True, help_text="DSR: source MAC of forwarded frames (empty: the interface's own)."
    )
    policies = models.ManyToManyField(Policy, blank=True, related_name="farms")

    config_generation = models.BigIntegerField(default=0, editable=False)
    applied_generation = models.BigIntegerField(default=0, editable=False)
    failed_generation = models.BigIntegerField(default=0, editable=False)
    apply_error = models.TextField(blank=True, editable=False)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ("name",)
        # The worker asks on every change which farms changed since it last looked, and which balance by
        # least connections: with these, neither question reads every farm's row.
        indexes = [
            models.Index(fields=["config_generation"], name="farm_config_generation"),
            models.Index(fields=["scheduler"], name="farm_scheduler"),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def port_ranges(self) -> list[tuple[int, int]]:
        return parse_ports(self.ports)

    @property
    def is_l7(self) -> bool:
        """Served by HAProxy (l7/), not by the kernel."""
        return self.mode in L7_MODES

    @property
    def apply_status(self) -> str:
        if self.applied_generation >= self.config_generation:
            return ApplyStatusChoices.APPLIED
        if self.apply_error and self.failed_generation >= self.config_generation:
            return ApplyStatusChoices.FAILED
        return ApplyStatusChoices.PENDING

    @property
    def traffic(self) -> str:
        """Where new connections go now (FarmTrafficChoices), decided exactly as the compiler decides it."""
        from .specs import farm_spec  # specs imports these models

        return farm_spec(self).traffic

    @property
    def snat_capacity(self) -> dict | None:
        """Concurrent connections SNAT can hold towards one backend address:port (source tuples available)."""
        if self.mode != FarmModeChoices.SNAT:
            return None
        addresses = 1
        if "-" in self.source_addr:
            low, high = (ipaddress.ip_address(x) for x in self.source_addr.split("-"))
            addresses = int(high) - int(low) + 1
        low_port, _, high_port = (self.source_ports or "1024-65535").partition("-")
        ports = int(high_port or low_port) - int(low_port) + 1
        return {"addresses": addresses, "ports": ports, "per_backend": addresses * ports}

    def clean(self) -> None:
        errors: dict[str, str] = farm_option_errors(self)
        for field, message in interface_errors(*stored_beside(self, ("interface", "oface"))).items():
            errors.setdefault(field, message)
        if self.scheduler == FarmSchedulerChoices.MAGLEV and self.pk and self.backends.count() > maglev.MAX_BACKENDS:
            errors["scheduler"] = f"A maglev farm takes at most {maglev.MAX_BACKENDS} backends (its table's size)."
        if self.ports:  # empty: every port (nftlb's empty virtual-ports), for any protocol
            try:
                self.ports = format_ports(parse_ports(self.ports))
            except PortSyntaxError as exc:
                errors["ports"] = str(exc)
        vip_valid = False
        if self.vip and "vip" not in errors:
            try:
                vip = parse_address(self.vip)
            except ValueError:
                pass  # the field's own validation (AddressField) says why
            else:
                self.vip = str(vip)
                problem = vip_problem(vip)
                if problem:
                    errors["vip"] = problem
                else:
                    vip_valid = True
                    errors.update(self._fallback_errors())
                    for field, message in management_errors(self).items():
                        errors.setdefault(field, message)
        if self.mode == FarmModeChoices.LOCAL and self.pk and self.backends.exists():
            errors.setdefault(
                "mode", "A local farm has no backends (the service on the appliance answers): remove them."
            )
        if not errors and vip_valid and self.pk:
            errors.update(self._backend_conflicts())
        if not errors and vip_valid:
            conflict = self._conflicting_farm()
            if conflict:
                errors[conflict[0]] = conflict[1]
        if errors:
            raise ValidationError(errors)

    def _fallback_errors(self) -> dict[str, str]:
        if self.when_all_down != FarmAllDownChoices.FALLBACK:
            if self.fallback_address or self.fallback_port:
                return {"fallback_address": "A fallback address is used only when when_all_down is 'fallback'."}
            return {}
        if not self.fallback_address:
            return {"fallback_address": "With when_all_down 'fallback', give the fallback address."}
        try:
            fallback = parse_address(self.fallback_address)
        except ValueError:
            return {}  # the field's own validation (AddressField) says why
        self.fallback_address = str(fallback)
        version = ipaddress.ip_address(self.vip).version
        if fallback.version != version:
            return {"fallback_address": f"The VIP is IPv{version}; the fallback address must be IPv{version} too."}
        problem = target_problem(fallback)
        if problem:
            return {"fallback_address": problem}
        if self.fallback_port is not None and self.protocol == FarmProtocolChoices.ALL:
            return {"fallback_port": "A farm for all protocols forwards every port unchanged; leave the port empty."}
        if self.loops_back(self.fallback_address, self.fallback_port):
            return {"fallback_address": "The fallback is the farm's own VIP and port: connections would loop."}
        return {}

    def loops_back(self, address: str, port: int | None) -> bool:
        """True when DNAT to address[:port] sends a connection to this farm's own VIP and port again."""
        if not self.vip or str(address) != str(self.vip):
            return False
        if self.protocol == FarmProtocolChoices.ALL or port is None:
            return True
        try:
            return any(low <= port <= high for low, high in parse_ports(self.ports))
        except PortSyntaxError:
            return False

    def _backend_conflicts(self) -> dict[str, str]:
        errors = {}
        version = ipaddress.ip_address(self.vip).version
        backends = list(self.backends.all())
        if any(ipaddress.ip_address(b.address).version != version for b in backends):
            errors["vip"] = f"This farm has backends of another IP family than IPv{version}; change them first."
        if self.protocol == FarmProtocolChoices.ALL and any(b.port is not None for b in backends):
            errors["protocol"] = "Backends with a port cannot serve a farm for all protocols; clear their ports first."
        if self.mode == FarmModeChoices.DSR and any(b.port is not None for b in backends):
            errors["mode"] = "DSR cannot change ports: clear the backends' ports first."
        for b in backends:
            if self.loops_back(b.address, b.port):
                errors.setdefault("vip", f"Backend {b} is this farm's own VIP and port: connections would loop.")
            clash = stateless_reply_clash(self, b.address, b.port, b.same_address_elsewhere())
            if clash:
                errors.setdefault("mode" if self.mode == FarmModeChoices.STATELESS_DNAT else "ports", clash)
        return errors

    def _conflicting_farm(self) -> tuple[str, str] | None:
        others = Farm.objects.filter(vip=self.vip).exclude(pk=self.pk)
        mine = self.port_ranges or [(0, 65535)]
        for other in others:
            if FarmProtocolChoices.ALL in (self.protocol, other.protocol):
                return (
                    "vip",
                    f"Farm '{other.name}' already takes {other.protocol} traffic to {self.vip}.",
                )
            if other.protocol != self.protocol:
                continue
            common = overlaps(mine, other.port_ranges or [(0, 65535)])
            if common:
                return "ports", (
                    f"{self.vip} {self.protocol} port(s) {format_ports(common)} already belong to farm '{other.name}'."
                )
        return None


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
        from .validation import session_key_parts

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


class BackendLoad(models.Model):
    """Live connection count of a backend and the weight least-connections derives from it (worker-written)."""

    backend = models.OneToOneField(Backend, on_delete=models.CASCADE, related_name="load")
    connections = models.PositiveIntegerField(default=0)
    weight = models.PositiveIntegerField(default=1)
    updated = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.backend}: {self.connections} connections, weight {self.weight}"


class KernelUnit(models.Model):
    """What the worker last put in the kernel for one farm or policy (kept after it is deleted, until removed)."""

    key = models.CharField(max_length=40, primary_key=True)  # "farm:<id>" or "policy:<id>"
    name = models.CharField(max_length=48)
    digest = models.CharField(max_length=32)
    objects_json = models.JSONField(default=dict)
    applied_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.name} ({self.digest})"


class KernelFingerprint(models.Model):
    """What the kernel held of one unit (a farm, a policy, or "skeleton") right after lbweb wrote it, as
    normalised hashes of its objects (``dataplane/kernel/drift.py``): the reference a reconcile compares with."""

    key = models.CharField(max_length=40, primary_key=True)
    record = models.JSONField(default=dict)
    written_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"fingerprint of {self.key}"


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
    writer = models.CharField(
        max_length=12,
        blank=True,
        help_text="Who wrote the transaction: 'netlink' (lbweb's own batch, the same cost whatever the number "
        "of farms), 'libnftables' (full applies, and changes lbweb cannot transcribe), or blank (nothing sent).",
    )
    drift = models.JSONField(
        default=list,
        blank=True,
        help_text="What a reconcile found changed in the kernel behind lbweb's back: one entry per unit "
        "(unit, name, differences), repaired by this run.",
    )

    class Meta:
        ordering = ("-id",)

    def __str__(self) -> str:
        return f"apply #{self.pk} gen {self.generation} {self.kind} {'ok' if self.ok else 'failed'}"


class AuditEvent(models.Model):
    """Who changed what and when: one row per service call, written in the same transaction as the change."""

    time = models.DateTimeField(default=timezone.now, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_name = models.CharField(max_length=150, help_text="The account's name then ('system' for none).")
    action = models.CharField(max_length=30)
    object_type = models.CharField(max_length=30, db_index=True)
    object_id = models.BigIntegerField(null=True, blank=True)
    object_name = models.CharField(max_length=200, blank=True)
    farm_ref = models.BigIntegerField(
        null=True, blank=True, db_index=True, help_text="The farm this concerns (kept after the farm is deleted)."
    )
    before = models.JSONField(null=True, blank=True, encoder=DjangoJSONEncoder)
    after = models.JSONField(null=True, blank=True, encoder=DjangoJSONEncoder)

    class Meta:
        ordering = ("-time", "-id")

    def __str__(self) -> str:
        return f"{self.time:%Y-%m-%d %H:%M:%S} {self.actor_name} {self.action} {self.object_type} {self.object_name}"

    def changes(self) -> list[tuple[str, object, object]]:
        """(field, before, after) for every field whose value differs."""
        before, after = self.before or {}, self.after or {}
        if not isinstance(before, dict) or not isinstance(after, dict):
            return []
        names = list(before) + [k for k in after if k not in before]
        return [(k, before.get(k), after.get(k)) for k in names if before.get(k) != after.get(k)]


class ConfigVersion(models.Model):
    """The whole configuration as the kernel held it after a successful apply (the export document).

    Recorded by the worker (``farms/versions.py``) only when every farm had been applied and nothing newer
    was saved meanwhile, and only when the document differs from the newest version: a health
    transition or a reconcile that changes nothing adds no version. Restoring one is an import of its
    document (the same validation, preview, audit and apply as any import).
    """

    created = models.DateTimeField(default=timezone.now, db_index=True)
    generation = models.BigIntegerField(help_text="The configuration generation the kernel held.")
    digest = models.CharField(max_length=64, db_index=True, help_text="SHA-256 of the canonical document.")
    # Versions kept before parts existed hold their whole document; newer ones a manifest of ConfigParts.
    whole = models.JSONField(encoder=DjangoJSONEncoder, null=True, blank=True, db_column="document")
    manifest = models.JSONField(
        null=True, blank=True, help_text="Digests of the document's parts (ConfigPart): policies, each farm, sections."
    )
    apply_run = models.ForeignKey(ApplyRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    farms = models.PositiveIntegerField(default=0)
    backends = models.PositiveIntegerField(default=0)
    policies = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ("-id",)

    def __str__(self) -> str:
        return f"version {self.pk} (generation {self.generation}, {self.created:%Y-%m-%d %H:%M:%S})"

    @cached_property
    def document(self) -> dict:
        """The export document of this configuration (put together from its parts)."""
        if self.manifest is None:
            return self.whole
        from .versions import assemble  # versions imports these models

        return assemble(self.manifest)


class ConfigPart(models.Model):
    """One piece of a configuration version's document (a farm with its backends, the policy list, another
    app's section), stored once however many versions hold it: a version after a change of one farm adds
    that farm's new part and a list of digests, not a copy of every farm (``farms/versions.py``)."""

    digest = models.CharField(max_length=32, unique=True)
    content = models.JSONField(encoder=DjangoJSONEncoder)

    def __str__(self) -> str:
        return f"part {self.digest}"
