"""What an operator configures first: farms, the policies they share, and the generation every write moves.

The database is the truth; the kernel converges to it. Every write bumps the configuration generation; the
worker records up to which generation each farm is in the kernel, so "applied / pending / failed" is never a
guess.
"""

from __future__ import annotations

import ipaddress

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import F

from compiler import maglev
from compiler.limits import KERNEL_INT_MAX
from compiler.ports import PortSyntaxError, format_ports, overlaps, parse_ports

from ..choices import (
    L7_MODES,
    ApplyStatusChoices,
    FarmAllDownChoices,
    FarmModeChoices,
    FarmProtocolChoices,
    FarmSchedulerChoices,
    FarmStateChoices,
    HashFieldChoices,
    HelperChoices,
    LimitVerdictChoices,
    PersistenceChoices,
    PolicyTypeChoices,
    RateUnitChoices,
)
from ..fields import AddressField
from ..validation import (
    farm_option_errors,
    interface_errors,
    management_errors,
    parse_address,
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
