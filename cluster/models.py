"""The HA pair: one :class:`Cluster` (the VRRP and sync settings), its two :class:`Node` rows, and the
:class:`Transition` history each node's handler recorded.

The settings are the same on both nodes (the master pushes them with the farms, ``cluster.sync``); which
node *this* one is comes from ``LBWEB_NODE_NAME`` (default: the host name), never from the database.
"""

from __future__ import annotations

import ipaddress
import re

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from .choices import RoleChoices, VrrpVersionChoices

IFNAME = re.compile(r"^[A-Za-z0-9_.-]{1,15}$")  # IFNAMSIZ - 1, no spaces or slashes


def _interfaces(text: str) -> list[str]:
    return text.split()


def _floating(line: str) -> tuple[str, str]:
    """ "198.18.1.1/24 back0" -> (address with prefix, interface)."""
    parts = line.split()
    if len(parts) != 2:
        raise ValueError(f"{line!r}: write ADDRESS/PREFIX INTERFACE")
    address = ipaddress.ip_interface(parts[0])
    if not IFNAME.match(parts[1]):
        raise ValueError(f"{parts[1]!r} is not an interface name")
    return str(address), parts[1]


class Cluster(models.Model):
    """The one HA pair this appliance belongs to (row 1). Disabled: lbweb runs alone, no keepalived."""

    enabled = models.BooleanField(default=False)
    vrid = models.PositiveSmallIntegerField(
        "virtual router id", default=51, validators=[MinValueValidator(1), MaxValueValidator(255)]
    )
    vrrp_version = models.PositiveSmallIntegerField(choices=VrrpVersionChoices.choices, default=VrrpVersionChoices.V3)
    advert_interval = models.FloatField(
        default=1.0, help_text="seconds between VRRP adverts; the backup takes over after about 3 of them"
    )
    auth_pass = models.CharField(
        "VRRP password", max_length=8, blank=True, help_text="VRRPv2 only (VRRPv3 has no authentication)"
    )
    preempt_delay = models.PositiveIntegerField(
        default=0,
        validators=[MaxValueValidator(1000)],
        help_text="seconds a returning node with the higher priority waits (resynchronising) before it takes "
        "the master role back; 0: it never does (nopreempt)",
    )
    interface = models.CharField(
        max_length=15, default="eth0", help_text="VRRP adverts and the farms' VIPs (the clients' side)"
    )
    sync_interface = models.CharField(
        max_length=15, default="eth1", help_text="the dedicated link conntrackd synchronises over"
    )
    track_interfaces = models.CharField(
        max_length=200, blank=True, help_text="more interfaces whose loss makes this node give the role up"
    )
    track_conntrackd = models.BooleanField(
        default=True, help_text="a node whose conntrackd does not answer gives the role up"
    )
    management_address = models.CharField(
        max_length=64, help_text="floating address of the master's UI and API, ADDRESS/PREFIX (keepalived's own)"
    )
    extra_addresses = models.TextField(
        blank=True,
        help_text="more floating addresses, one per line: ADDRESS/PREFIX INTERFACE (the backends' gateway, "
        "SNAT sources)",
    )
    token = models.CharField(
        max_length=128, blank=True, help_text="shared secret the nodes present to each other's API (32+ characters)"
    )
    journal_offset = models.BigIntegerField(default=0, editable=False)  # bytes of the journal already ingested
    pushed_generation = models.BigIntegerField(default=0, editable=False)  # what the peer acknowledged
    pushed_at = models.DateTimeField(null=True, editable=False)
    push_error = models.TextField(blank=True, editable=False)
    received_generation = models.BigIntegerField(default=0, editable=False)  # what this node got from the master
    received_at = models.DateTimeField(null=True, editable=False)
    received_from = models.CharField(max_length=64, blank=True, editable=False)
    peer_status = models.JSONField(default=dict, editable=False)  # what the peer last said of itself
    peer_seen_at = models.DateTimeField(null=True, editable=False)

    def __str__(self) -> str:
        return f"cluster vrid {self.vrid}" + ("" if self.enabled else " (disabled)")

    @classmethod
    def load(cls) -> Cluster:
        return cls.objects.filter(pk=1).first() or cls(pk=1)

    def floating_extra(self) -> list[tuple[str, str]]:
        return [_floating(line) for line in self.extra_addresses.splitlines() if line.strip()]

    def clean(self) -> None:
        errors: dict[str, str] = {}
        if self.vrrp_version == VrrpVersionChoices.V2:
            if self.advert_interval < 1 or self.advert_interval != int(self.advert_interval):
                errors["advert_interval"] = "VRRPv2 adverts are whole seconds (1-255): use VRRPv3 for less."
        elif not 0.01 <= self.advert_interval <= 40.95:
            errors["advert_interval"] = "VRRPv3 adverts are 0.01 to 40.95 seconds apart."
        if self.auth_pass and self.vrrp_version != VrrpVersionChoices.V2:
            errors["auth_pass"] = "VRRPv3 has no authentication (RFC 5798): leave it empty or use VRRPv2."
        for name in ("interface", "sync_interface"):
            if not IFNAME.match(getattr(self, name) or ""):
                errors[name] = "An interface name: up to 15 letters, digits, '.', '-' or '_'."
        if self.interface == self.sync_interface:
            errors["sync_interface"] = "The sync link must be a dedicated interface, not the VRRP one."
        bad = [i for i in _interfaces(self.track_interfaces) if not IFNAME.match(i)]
        if bad:
            errors["track_interfaces"] = f"Not interface names: {', '.join(bad)}."
        try:
            ipaddress.ip_interface(self.management_address)
            if "/" not in self.management_address:
                raise ValueError
        except ValueError:
            errors["management_address"] = "An address with its prefix length, e.g. 198.18.2.100/24."
        try:
            self.floating_extra()
        except ValueError as exc:
            errors["extra_addresses"] = str(exc)
        for name, message in self._missing_interfaces().items():
            errors.setdefault(name, message)
        if self.enabled and len(self.token) < 32:
            errors["token"] = "At least 32 characters: the nodes trust each other's configuration with it."
        if errors:
            raise ValidationError(errors)

    def _missing_interfaces(self) -> dict[str, str]:
        """The interfaces named here that the appliance has not (network/appliance.py), among those new or
        changed: an edit elsewhere is never refused because an interface went away."""
        from network.appliance import missing_interface

        stored = Cluster.objects.filter(pk=self.pk).first() if self.pk else None

        def names(cluster, field: str) -> set[str]:
            if cluster is None:
                return set()
            if field == "extra_addresses":
                try:
                    return {interface for _, interface in cluster.floating_extra()}
                except ValueError:
                    return set()
            return set(_interfaces(getattr(cluster, field)))

        errors: dict[str, str] = {}
        for field in ("interface", "sync_interface", "track_interfaces", "extra_addresses"):
            for name in sorted(names(self, field) - names(stored, field)):
                problem = IFNAME.match(name) and missing_interface(name)
                if problem:
                    errors.setdefault(field, problem)
        return errors


class Node(models.Model):
    """One of the pair's two appliances."""

    name = models.CharField(max_length=64, unique=True, help_text="its LBWEB_NODE_NAME (default: its host name)")
    address = models.GenericIPAddressField(help_text="its own address on the VRRP interface")
    sync_address = models.GenericIPAddressField(help_text="its own address on the sync link")
    api_url = models.URLField(help_text="its API, e.g. https://198.18.2.11:8000 (the peer pushes here)")
    tls_fingerprint = models.CharField(
        "TLS certificate SHA-256", max_length=95, blank=True,
        help_text="its web certificate's SHA-256 fingerprint, pinned by the peer (manage.py cluster fingerprint)",
    )  # fmt: skip
    priority = models.PositiveSmallIntegerField(default=100, validators=[MinValueValidator(1), MaxValueValidator(254)])

    class Meta:
        ordering = ["-priority", "name"]

    def __str__(self) -> str:
        return self.name

    @property
    def is_local(self) -> bool:
        return self.name == settings.LBWEB_NODE_NAME

    def clean(self) -> None:
        errors = {}
        fingerprint = self.tls_fingerprint.replace(":", "").lower()
        if fingerprint and not re.fullmatch(r"[0-9a-f]{64}", fingerprint):
            errors["tls_fingerprint"] = "A SHA-256 fingerprint: 64 hexadecimal digits (colons allowed)."
        if not self.api_url.startswith("https://"):
            errors["api_url"] = "The peer is reached over HTTPS only."
        if self.address and self.sync_address and self.address == self.sync_address:
            errors["sync_address"] = "The sync link has its own address."
        if errors:
            raise ValidationError(errors)


class Transition(models.Model):
    """A VRRP state change of a node, as its handler recorded it (with each step's timing)."""

    node = models.CharField(max_length=64)
    at = models.DateTimeField()
    from_state = models.CharField(max_length=16)
    to_state = models.CharField(max_length=16, choices=RoleChoices.choices)
    reason = models.CharField(max_length=300)
    steps = models.JSONField(default=list)
    addresses_up_ms = models.FloatField(null=True, help_text="event to floating addresses up (master only)")

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["node", "-at"])]

    def __str__(self) -> str:
        return f"{self.node}: {self.from_state} -> {self.to_state} at {self.at:%Y-%m-%d %H:%M:%S}"

    @property
    def ok(self) -> bool:
        return all(step.get("ok") for step in self.steps)
