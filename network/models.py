"""The appliance's own network: interfaces (Ethernet, VLAN, bond), addresses, routes, DNS and NTP.

The web process writes these rows (``network/services.py``, audited); the worker makes the kernel
match them with pyroute2 (``dataplane/network/kernel.py``) and writes them as systemd-networkd, -resolved and
-timesyncd files (``network/networkd.py``) so they hold across a reboot. lbweb manages only what it
is given here: an interface nobody declared, an address or a route lbweb did not add is left alone.
"""

from __future__ import annotations

import ipaddress
import re

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models, transaction

from .choices import BondModeChoices, InterfaceKindChoices

IFNAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,14}$")


def validate_ifname(value: str) -> None:
    if not IFNAME.match(value or "") or value in (".", ".."):
        raise ValidationError("1 to 15 letters, digits, '_', '.' or '-' (the kernel's limit for a name).")


def split_list(text: str) -> list[str]:
    return [part for part in re.split(r"[\s,]+", text or "") if part]


class Interface(models.Model):
    """A network interface lbweb manages: an existing Ethernet device, or a VLAN or bond it creates."""

    name = models.CharField(max_length=15, unique=True, validators=[validate_ifname])
    kind = models.CharField(max_length=8, choices=InterfaceKindChoices, default=InterfaceKindChoices.ETHERNET)
    description = models.CharField(max_length=200, blank=True)
    enabled = models.BooleanField(default=True, help_text="Up (on) or down (off).")
    mtu = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(68), MaxValueValidator(65535)],
        help_text="Empty: as it is.",
    )
    parent = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="vlans",
        help_text="VLAN: the interface it runs on.",
    )
    vlan_id = models.PositiveSmallIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1), MaxValueValidator(4094)], verbose_name="VLAN id"
    )
    bond_mode = models.CharField(max_length=13, choices=BondModeChoices, blank=True)
    bond = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="members",
        limit_choices_to={"kind": InterfaceKindChoices.BOND},
        help_text="Make this interface a member of that bond (it then has no address of its own).",
    )
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ("name",)

    def __str__(self) -> str:
        return self.name

    def audit_state(self) -> dict:
        return {
            "name": self.name,
            "kind": self.kind,
            "enabled": self.enabled,
            "mtu": self.mtu,
            "parent": self.parent.name if self.parent_id else None,
            "vlan_id": self.vlan_id,
            "bond_mode": self.bond_mode,
            "bond": self.bond.name if self.bond_id else None,
            "addresses": sorted(a.address for a in self.addresses.all()) if self.pk else [],
        }

    def clean(self) -> None:
        errors: dict[str, str] = {}
        if self.kind == InterfaceKindChoices.VLAN:
            if self.parent_id is None:
                errors["parent"] = "A VLAN runs on a parent interface."
            elif self.parent_id == self.pk or (self.parent and self.parent.kind == InterfaceKindChoices.VLAN):
                errors["parent"] = "The parent of a VLAN is an Ethernet interface or a bond."
            if self.vlan_id is None:
                errors["vlan_id"] = "A VLAN needs its id (1-4094)."
            elif (
                self.parent_id
                and Interface.objects.filter(parent_id=self.parent_id, vlan_id=self.vlan_id)
                .exclude(pk=self.pk)
                .exists()
            ):
                errors["vlan_id"] = f"VLAN {self.vlan_id} exists on {self.parent} already."
        else:
            if self.parent_id is not None:
                errors["parent"] = "Only a VLAN has a parent."
            if self.vlan_id is not None:
                errors["vlan_id"] = "Only a VLAN has a VLAN id."
        if self.kind == InterfaceKindChoices.BOND and not self.bond_mode:
            errors["bond_mode"] = "A bond needs its mode."
        if self.kind != InterfaceKindChoices.BOND and self.bond_mode:
            errors["bond_mode"] = "Only a bond has a mode."
        if self.bond_id is not None:
            if self.kind != InterfaceKindChoices.ETHERNET:
                errors["bond"] = "Only an Ethernet interface joins a bond."
            elif self.bond_id == self.pk or (self.bond and self.bond.kind != InterfaceKindChoices.BOND):
                errors["bond"] = "Choose a bond."
            elif self.pk and self.addresses.exists():
                errors["bond"] = "A bond member has no address of its own: remove its addresses first."
            elif self.pk and self.vlans.exists():
                errors["bond"] = "A bond member carries no VLAN: move its VLANs to the bond first."
        if self.pk and self.kind != InterfaceKindChoices.BOND and self.members.exists():
            errors["kind"] = "This bond has members: take them out first."
        if self.kind == InterfaceKindChoices.ETHERNET and "name" not in errors:
            errors.update(self._missing_device())
        if errors:
            raise ValidationError(errors)

    def _missing_device(self) -> dict[str, str]:
        """An Ethernet interface is a device the machine has (lbweb makes only VLANs and bonds): checked when
        it is new or renamed, against what the worker read (network/appliance.py)."""
        from .appliance import missing_interface

        before = Interface.objects.filter(pk=self.pk).values_list("name", "kind").first() if self.pk else None
        if before == (self.name, InterfaceKindChoices.ETHERNET) or not IFNAME.match(self.name or ""):
            return {}
        problem = missing_interface(self.name)
        return {"name": problem} if problem else {}


class Address(models.Model):
    """An address with its prefix on an interface (``198.18.0.10/24``, ``2001:2::10/64``)."""

    interface = models.ForeignKey(Interface, on_delete=models.CASCADE, related_name="addresses")
    address = models.CharField(max_length=49, help_text="Address and prefix length, e.g. 198.18.0.10/24.")

    class Meta:
        ordering = ("interface__name", "address")
        constraints = [models.UniqueConstraint(fields=["interface", "address"], name="network_address_unique")]

    def __str__(self) -> str:
        return f"{self.address} on {self.interface.name}" if self.interface_id else self.address

    def audit_state(self) -> dict:
        return {"interface": self.interface.name, "address": self.address}

    @property
    def ip(self) -> str:
        return str(ipaddress.ip_interface(self.address).ip)

    def clean(self) -> None:
        try:
            value = ipaddress.ip_interface(self.address.strip())
        except ValueError:
            raise ValidationError({"address": "An address with its prefix length, e.g. 198.18.0.10/24."}) from None
        if value.ip.is_link_local or value.ip.is_multicast or value.ip.is_unspecified or value.ip.is_loopback:
            raise ValidationError({"address": "Not a link-local, multicast, loopback or unspecified address."})
        if "/" not in self.address:
            raise ValidationError({"address": "Give the prefix length too, e.g. /24 or /64."})
        self.address = value.with_prefixlen
        if self.interface_id and self.interface.bond_id:
            raise ValidationError(
                {"interface": f"{self.interface} is a member of bond {self.interface.bond}: no address of its own."}
            )
        same = [a for a in Address.objects.exclude(pk=self.pk).select_related("interface") if a.ip == str(value.ip)]
        if same:
            raise ValidationError({"address": f"{value.ip} is on {same[0].interface} already."})


class Route(models.Model):
    """A static route; destination ``default`` (0.0.0.0/0 or ::/0) is the default gateway."""

    destination = models.CharField(max_length=49, help_text="A network (198.18.64.0/18), or 'default'.")
    gateway = models.GenericIPAddressField(
        null=True, blank=True, help_text="Next hop (empty: on-link via the interface)."
    )
    interface = models.ForeignKey(Interface, null=True, blank=True, on_delete=models.CASCADE, related_name="routes")
    metric = models.PositiveIntegerField(default=0, validators=[MaxValueValidator(2**32 - 1)])

    class Meta:
        ordering = ("destination", "metric")
        constraints = [models.UniqueConstraint(fields=["destination", "metric"], name="network_route_unique")]

    def __str__(self) -> str:
        via = f" via {self.gateway}" if self.gateway else ""
        dev = f" dev {self.interface.name}" if self.interface_id else ""
        return f"{self.label}{via}{dev}"

    def audit_state(self) -> dict:
        return {
            "destination": self.destination,
            "gateway": self.gateway,
            "interface": self.interface.name if self.interface_id else None,
            "metric": self.metric,
        }

    @property
    def is_default(self) -> bool:
        return self.destination in ("0.0.0.0/0", "::/0")

    @property
    def label(self) -> str:
        return f"default ({'IPv4' if ':' not in self.destination else 'IPv6'})" if self.is_default else self.destination

    def clean(self) -> None:
        text = (self.destination or "").strip().lower()
        gateway = ipaddress.ip_address(self.gateway) if self.gateway else None
        if text == "default":
            text = "::/0" if gateway and gateway.version == 6 else "0.0.0.0/0"
        try:
            network = ipaddress.ip_network(text)
        except ValueError:
            raise ValidationError(
                {"destination": "A network with its prefix (198.18.64.0/18), or 'default'."}
            ) from None
        self.destination = network.with_prefixlen
        if gateway is None and self.interface_id is None:
            raise ValidationError({"gateway": "Give a gateway, an interface, or both."})
        if gateway is not None and gateway.version != network.version:
            raise ValidationError(
                {"gateway": f"The gateway must be an IPv{network.version} address, as the destination."}
            )
        if gateway is not None and (gateway.is_multicast or gateway.is_unspecified or gateway.is_loopback):
            raise ValidationError({"gateway": "Not a multicast, loopback or unspecified address."})
        if Route.objects.filter(destination=self.destination, metric=self.metric).exclude(pk=self.pk).exists():
            raise ValidationError({"destination": f"A route to {self.label} with metric {self.metric} exists already."})


class NetworkSettings(models.Model):
    """One row: DNS and NTP, and where the worker stands (generation asked, applied, and the last error)."""

    dns_servers = models.CharField(max_length=300, blank=True, help_text="Name servers, e.g. 198.18.0.53 2001:2::53.")
    search_domains = models.CharField(max_length=300, blank=True, help_text="Search domains, e.g. lab.example.")
    ntp_servers = models.CharField(max_length=300, blank=True, help_text="NTP servers (names or addresses).")
    generation = models.BigIntegerField(default=0, editable=False)
    applied_generation = models.BigIntegerField(default=0, editable=False)
    apply_error = models.TextField(blank=True, editable=False)
    applied_at = models.DateTimeField(null=True, blank=True, editable=False)
    applied_plan = models.JSONField(default=dict, blank=True, editable=False, help_text="What the worker last applied.")

    class Meta:
        verbose_name_plural = "network settings"

    def __str__(self) -> str:
        return "network settings"

    def audit_state(self) -> dict:
        return {"dns_servers": self.dns_servers, "search_domains": self.search_domains, "ntp_servers": self.ntp_servers}

    @classmethod
    def load(cls) -> NetworkSettings:
        return cls.objects.get_or_create(pk=1)[0]

    @classmethod
    def bump(cls) -> int:
        """A new generation for the network (inside the caller's transaction)."""
        with transaction.atomic():
            cls.objects.get_or_create(pk=1)
            cls.objects.filter(pk=1).update(generation=models.F("generation") + 1)
            return cls.objects.get(pk=1).generation

    @property
    def status(self) -> str:
        if self.applied_generation >= self.generation:
            return "failed" if self.apply_error else "applied"
        return "pending"

    def clean(self) -> None:
        errors = {}
        bad = [s for s in split_list(self.dns_servers) if not _is_ip(s)]
        if bad:
            errors["dns_servers"] = f"Not an address: {', '.join(bad)}."
        bad = [d for d in split_list(self.search_domains) if not re.match(r"^[A-Za-z0-9.-]{1,253}$", d)]
        if bad:
            errors["search_domains"] = f"Not a domain name: {', '.join(bad)}."
        bad = [n for n in split_list(self.ntp_servers) if not (_is_ip(n) or re.match(r"^[A-Za-z0-9.-]{1,253}$", n))]
        if bad:
            errors["ntp_servers"] = f"Not a name or an address: {', '.join(bad)}."
        if errors:
            raise ValidationError(errors)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return False
