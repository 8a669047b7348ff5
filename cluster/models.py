"""The HA pair: one :class:`Cluster` (the VRRP and sync settings), its two :class:`Node` rows, and the
:class:`Transition` history each node's handler recorded.

The settings are the same on both nodes (the master pushes them with the farms, ``cluster.sync``); which
node *this* one is comes from ``LBWEB_NODE_NAME`` (default: the host name), never from the database.

Every value that reaches keepalived's or conntrackd's file is checked here against that engine's grammar
(``compiler.cluster.grammar``, the rules the generators hold to as well); :func:`pair_errors` checks what only the
two nodes together can say (one address family per link).
"""

from __future__ import annotations

import ipaddress
import re

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from compiler.cluster import grammar

from .choices import RoleChoices, VrrpVersionChoices


def _interfaces(text: str) -> list[str]:
    return text.split()


def _floating(line: str) -> tuple[str, str]:
    """ "198.18.1.1/24 back0" -> (address with prefix, interface)."""
    parts = line.split()
    if len(parts) != 2:
        raise ValueError(f"{line!r}: write ADDRESS/PREFIX INTERFACE")
    problem = grammar.interface_address_problem(parts[0])
    if problem:
        raise ValueError(f"{parts[0]!r}: {problem}")
    if grammar.interface_problem(parts[1]):
        raise ValueError(f"{parts[1]!r} is not an interface name")
    return str(ipaddress.ip_interface(parts[0])), parts[1]


def _ip(value: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(value)
    except ValueError:
        return None


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
        advert = grammar.advert_problem(self.vrrp_version, self.advert_interval)
        if advert:
            errors["advert_interval"] = advert
        if self.auth_pass and self.vrrp_version != VrrpVersionChoices.V2:
            errors["auth_pass"] = "VRRPv3 has no authentication (RFC 5798): leave it empty or use VRRPv2."
        elif self.auth_pass and grammar.auth_pass_problem(self.auth_pass):
            errors["auth_pass"] = grammar.auth_pass_problem(self.auth_pass)
        problems = {
            "interface": grammar.vrrp_interface_problem(self.interface or ""),
            "sync_interface": grammar.conntrackd_word_problem(self.sync_interface or ""),  # conntrackd's too
            "management_address": grammar.interface_address_problem(self.management_address or ""),
        }
        errors.update({name: problem for name, problem in problems.items() if problem})
        if self.interface == self.sync_interface:
            errors["sync_interface"] = "The sync link must be a dedicated interface, not the VRRP one."
        bad = [i for i in _interfaces(self.track_interfaces) if grammar.interface_problem(i)]
        if bad:
            errors["track_interfaces"] = f"Not interface names: {', '.join(bad)}."
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
                problem = not grammar.interface_problem(name) and missing_interface(name)
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

    def clean_fields(self, exclude=None) -> None:
        """Django's address field drops an IPv6 scope id without a word ('fe80::1%eth0' becomes 'fe80::1'): it is
        refused here, before the field sees it, so what is saved is what was typed."""
        scoped = {
            name: grammar.address_problem(value)
            for name in ("address", "sync_address")
            if isinstance(value := getattr(self, name), str) and "%" in value and name not in (exclude or ())
        }
        try:
            super().clean_fields(exclude=[*(exclude or ()), *scoped])
        except ValidationError as exc:
            raise ValidationError({**exc.message_dict, **scoped}) from exc
        if scoped:
            raise ValidationError(scoped)

    def clean(self) -> None:
        errors = {}
        if grammar.node_name_problem(self.name or ""):
            errors["name"] = grammar.node_name_problem(self.name or "")
        for name in ("address", "sync_address"):
            value = getattr(self, name) or ""
            if "%" not in value and _ip(value) is not None and grammar.address_problem(value):  # else: clean_fields
                errors[name] = grammar.address_problem(value)
        fingerprint = self.tls_fingerprint.replace(":", "").lower()
        if fingerprint and not re.fullmatch(r"[0-9a-f]{64}", fingerprint):
            errors["tls_fingerprint"] = "A SHA-256 fingerprint: 64 hexadecimal digits (colons allowed)."
        if not self.api_url.startswith("https://"):
            errors["api_url"] = "The peer is reached over HTTPS only."
        if self.address and self.sync_address and self.address == self.sync_address:
            errors["sync_address"] = "The sync link has its own address."
        if errors:
            raise ValidationError(errors)


def pair_errors(cluster: Cluster, first: Node, second: Node) -> dict[tuple[str | None, str], str]:
    """What the two nodes together must hold to: one family per link (keepalived refuses a peer of the other
    family; conntrackd reads an IPv4 destination as a bad IPv6 address and cannot sync), their own addresses
    each, and keepalived's management address in the nodes' family. Keyed by (node name or None, field)."""
    errors = {}
    for field, what in (("address", "VRRP"), ("sync_address", "sync")):
        mine, theirs = _ip(getattr(second, field)), _ip(getattr(first, field))
        if mine is None or theirs is None:
            continue
        if mine.version != theirs.version:
            errors[(second.name, field)] = (
                f"IPv{mine.version}, and {first.name}'s is IPv{theirs.version} ({theirs}): the two nodes' {what} "
                "addresses are one family."
            )
        elif mine == theirs:
            errors[(second.name, field)] = f"{first.name} has this {what} address: each node has its own."
    node = _ip(first.address)
    try:
        management = ipaddress.ip_interface(cluster.management_address)
    except ValueError:
        management = None
    if node is not None and management is not None and management.version != node.version:
        errors[(None, "management_address")] = (
            f"IPv{management.version}, and the nodes' VRRP addresses are IPv{node.version}: keepalived takes a "
            "floating address of its instance's family only."
        )
    return errors


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
