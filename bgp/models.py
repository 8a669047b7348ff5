"""BGP: this node's :class:`BgpSettings` (row 1), the :class:`BgpPeer` routers it announces to, and each farm's
:class:`FarmAnnouncement` (whether, and with which MED and communities, its VIP is announced).

Every value that reaches BIRD's file is checked here against BIRD's grammar (``compiler.bgp.grammar``, the rules the
generator holds to as well): the UI, the API and the generator refuse the same values with the same words.
"""

from __future__ import annotations

import ipaddress

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator
from django.db import models

from compiler.bgp import grammar
from farms.models import Farm


def _family(value: str) -> int | None:
    try:
        return ipaddress.ip_address(value).version
    except ValueError:
        return None


class BgpSettings(models.Model):
    """This node's BGP speaker (BIRD): its AS and router id, BFD's timers, and whether the operator drained it."""

    enabled = models.BooleanField(default=False, help_text="run BIRD and announce the farms' VIPs to the peers")
    local_asn = models.PositiveBigIntegerField("local AS", default=65000)
    router_id = models.CharField(
        max_length=15, blank=True, help_text="an IPv4 address, usually this node's own on the peering link"
    )
    bfd_interval_ms = models.PositiveIntegerField(
        "BFD interval (ms)", default=100, help_text="BFD packets each way; a dead node is noticed after the "
        "multiplier's count of them (100 ms x 3: 0.3 s)",
    )  # fmt: skip
    bfd_multiplier = models.PositiveSmallIntegerField("BFD multiplier", default=3)
    drain_seconds = models.PositiveIntegerField(
        default=30,
        validators=[MaxValueValidator(3600)],
        help_text="a drained node announces its VIPs with the graceful-shutdown community this long, then "
        "withdraws them",
    )
    drained = models.BooleanField(default=False, editable=False)
    drained_at = models.DateTimeField(null=True, editable=False)
    status = models.JSONField(default=dict, editable=False)  # what the worker last announced, and why not

    class Meta:
        verbose_name = "BGP settings"
        verbose_name_plural = "BGP settings"

    def __str__(self) -> str:
        return f"BGP AS {self.local_asn}" + ("" if self.enabled else " (disabled)")

    @classmethod
    def load(cls) -> BgpSettings:
        return cls.objects.filter(pk=1).first() or cls(pk=1)

    def audit_state(self) -> dict:
        return {name: getattr(self, name) for name in SETTINGS_FIELDS + ("drained",)}

    def clean(self) -> None:
        errors: dict[str, str] = {}
        asn = grammar.asn_problem(self.local_asn) if isinstance(self.local_asn, int) else None
        if asn:
            errors["local_asn"] = asn
        if self.router_id and grammar.router_id_problem(self.router_id):
            errors["router_id"] = grammar.router_id_problem(self.router_id)
        elif self.enabled and not self.router_id:
            errors["router_id"] = "BGP needs a router id: this node's IPv4 address on the peering link, say."
        if isinstance(self.bfd_interval_ms, int) and not 10 <= self.bfd_interval_ms <= 10000:
            errors["bfd_interval_ms"] = grammar.bfd_problem(self.bfd_interval_ms, 3)
        if isinstance(self.bfd_multiplier, int) and not 1 <= self.bfd_multiplier <= 255:
            errors["bfd_multiplier"] = grammar.bfd_problem(100, self.bfd_multiplier)
        if errors:
            raise ValidationError(errors)


SETTINGS_FIELDS = ("enabled", "local_asn", "router_id", "bfd_interval_ms", "bfd_multiplier", "drain_seconds")


class BgpPeer(models.Model):
    """A router this node announces the VIPs to (one BGP session, with BFD when on)."""

    name = models.SlugField(max_length=48, unique=True, help_text="letters, digits, hyphens and underscores")
    address = models.CharField(max_length=64, unique=True, help_text="the router's address (IPv4 or IPv6)")
    asn = models.PositiveBigIntegerField("AS", help_text="the router's AS (its own for iBGP)")
    password = models.CharField(
        "TCP-MD5 password", max_length=80, blank=True, help_text="the session's TCP-MD5 key (RFC 2385); empty: none"
    )
    hold_time = models.PositiveIntegerField(default=9, help_text="seconds; 0: none (BFD still watches the link)")
    keepalive_time = models.PositiveIntegerField(default=3, help_text="seconds, at most a third of the hold time")
    multihop = models.PositiveSmallIntegerField(
        default=0, help_text="0: the router is on a directly connected link; otherwise the TTL (eBGP multihop)"
    )
    bfd = models.BooleanField("BFD", default=True, help_text="BFD watches the session: a dead link in < 1 s")
    source_address = models.CharField(
        max_length=64, blank=True, help_text="this node's address the session starts from (empty: the route's)"
    )

    class Meta:
        ordering = ("name",)
        verbose_name = "BGP peer"

    def __str__(self) -> str:
        return self.name

    def audit_state(self) -> dict:
        state = {name: getattr(self, name) for name in PEER_FIELDS if name != "password"}
        state["password_set"] = bool(self.password)
        return state

    def clean(self) -> None:
        problems = {
            "address": grammar.peer_address_problem(self.address or ""),
            "password": self.password and grammar.password_problem(self.password),
            "hold_time": isinstance(self.hold_time, int) and grammar.hold_time_problem(self.hold_time),
            "multihop": isinstance(self.multihop, int) and grammar.multihop_problem(self.multihop),
            "source_address": self.source_address and grammar.peer_address_problem(self.source_address),
        }
        if isinstance(self.asn, int):
            problems["asn"] = grammar.asn_problem(self.asn)
        if isinstance(self.keepalive_time, int) and isinstance(self.hold_time, int):
            problems["keepalive_time"] = grammar.keepalive_problem(self.keepalive_time, self.hold_time)
        if isinstance(self.multihop, int):
            problems.setdefault("source_address", None)
            problems["source_address"] = problems["source_address"] or grammar.multihop_bfd_problem(
                self.multihop, self.bfd, self.source_address
            )
        errors = {name: problem for name, problem in problems.items() if problem}
        ok = "address" not in errors and "source_address" not in errors
        if ok and self.source_address and _family(self.source_address) != _family(self.address):
            errors["source_address"] = (
                f"IPv{_family(self.source_address)}, and the peer is IPv{_family(self.address)}: one family."
            )
        if "address" not in errors:
            self.address = str(ipaddress.ip_address(self.address))  # one spelling, so unique means one router
        if errors:
            raise ValidationError(errors)


PEER_FIELDS = ("name", "address", "asn", "password", "hold_time", "keepalive_time", "multihop", "bfd", "source_address")


class FarmAnnouncement(models.Model):
    """How a farm's VIP is announced (a farm without one is announced with no MED and no community)."""

    farm = models.OneToOneField(Farm, on_delete=models.CASCADE, related_name="bgp")
    announce = models.BooleanField(default=True, help_text="announce this farm's VIP while it can serve here")
    med = models.PositiveBigIntegerField(
        "MED", null=True, blank=True, help_text="multi-exit discriminator sent with the route; empty: none"
    )
    communities = models.CharField(
        max_length=500, blank=True,
        help_text="communities added to the route, e.g. 65000:100 or 65000:1:2 (large), spaces between",
    )  # fmt: skip

    class Meta:
        ordering = ("farm__name",)

    def __str__(self) -> str:
        return f"{self.farm.name}" if self.farm_id else "announcement"

    def audit_state(self) -> dict:
        return {"farm": self.farm.name, **{name: getattr(self, name) for name in ANNOUNCEMENT_FIELDS}}

    def parsed_communities(self) -> tuple:
        return grammar.parse_communities(self.communities)

    def clean(self) -> None:
        errors = {}
        if grammar.med_problem(self.med):
            errors["med"] = grammar.med_problem(self.med)
        if grammar.communities_problem(self.communities or ""):
            errors["communities"] = grammar.communities_problem(self.communities or "")
        else:
            self.communities = " ".join(":".join(map(str, c)) for c in self.parsed_communities())
        if errors:
            raise ValidationError(errors)


ANNOUNCEMENT_FIELDS = ("announce", "med", "communities")
