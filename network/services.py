"""The only code that writes the network settings: validated, audited, then applied by the worker.

Each write validates with the model's ``clean()``, is audited (:mod:`farms.audit`) in its transaction,
gives the network a new generation and asks the worker for an apply once the transaction commits.

A write that would cut the management address (the appliance's address the request came in on) is
refused unless the caller confirms: deleting that address, taking down or deleting its interface or
an interface it runs on (a VLAN's parent, a bond's member), putting that interface in a bond, or removing
the route the client is reached by. :class:`Management` says what the request came in on.
"""

from __future__ import annotations

import ipaddress
import urllib.parse
from dataclasses import dataclass

from django.core.exceptions import ValidationError
from django.db import transaction

from farms.audit import audited
from lbweb import enqueue
from lbweb.writes import validated_save

from .models import Address, Interface, NetworkSettings, Route

INTERFACE_FIELDS = ("name", "kind", "description", "enabled", "mtu", "parent", "vlan_id", "bond_mode", "bond")
ROUTE_FIELDS = ("destination", "gateway", "interface", "metric")
SETTINGS_FIELDS = ("dns_servers", "search_domains", "ntp_servers")


@dataclass(frozen=True)
class Management:
    """Where the request came from and in on: the client's address and the appliance's own address."""

    address: str | None = None
    client: str | None = None

    @classmethod
    def of(cls, request) -> Management:
        """The local address of the request's connection (gunicorn hands its socket to the app), else the
        ``Host`` header when it is an address; the client from the connection."""
        meta = getattr(request, "META", {})
        local = None
        sock = meta.get("gunicorn.socket")
        if sock is not None:
            try:
                local = sock.getsockname()[0]
            except OSError:
                local = None
        if local is None:
            local = urllib.parse.urlsplit(f"//{request.get_host()}").hostname
        return cls(address=_address_or_none(local), client=_address_or_none(meta.get("REMOTE_ADDR")))


def _address_or_none(text: str | None) -> str | None:
    try:
        return str(ipaddress.ip_address((text or "").split("%")[0])) if text else None
    except ValueError:
        return None


def _apply_after_commit() -> int:
    generation = NetworkSettings.bump()
    what = f"network apply of generation {generation}"  # broker down: applied when the worker starts
    enqueue.send_after_commit("network.tasks.apply_network", kwargs={"generation": generation}, what=what)
    return generation


# -- the management address ---------------------------------------------------------------------


def carriers(address: str) -> list[Interface]:
    """The interfaces the management address depends on: the one holding it, the parent it runs on (a
    VLAN), the members it runs over (a bond)."""
    holder = next((a.interface for a in Address.objects.select_related("interface") if a.ip == address), None)
    if holder is None:
        return []
    found, todo = [], [holder]
    while todo:
        interface = todo.pop()
        if interface in found:
            continue
        found.append(interface)
        if interface.parent_id:
            todo.append(interface.parent)
        todo.extend(interface.members.all())
    return found


def guard(management: Management | None, confirm: bool, cut: str | None) -> None:
    """Refuse a change that cuts the management address, unless confirmed."""
    if cut and management and management.address and not confirm:
        raise ValidationError(
            {
                "confirm": f"This cuts {management.address}, the address you are connected to ({cut}). "
                "Confirm to do it anyway: this session will most likely end."
            }
        )


def _interface_cut(interface: Interface, management: Management | None, values: dict | None) -> str | None:
    if not management or not management.address:
        return None
    if interface not in carriers(management.address):
        return None
    if values is None:
        return f"deleting {interface.name} removes it"
    if values.get("enabled") is False:
        return f"taking {interface.name} down removes it"
    if values.get("bond") is not None:
        return f"{interface.name} cannot carry it as a bond member"
    if any(k in values and values[k] != getattr(interface, k) for k in ("kind", "parent", "vlan_id", "name")):
        return f"re-making {interface.name} drops it for a while"
    return None


def _route_cut(route: Route, management: Management | None) -> str | None:
    """The route the client is reached by, when it is not on a network the appliance is on."""
    if not management or not management.client or not management.address:
        return None
    client = ipaddress.ip_address(management.client)
    for address in Address.objects.all():
        if client in ipaddress.ip_interface(address.address).network:
            return None
    covering = [r for r in Route.objects.all() if client in ipaddress.ip_network(r.destination)]
    covering.sort(key=lambda r: (-ipaddress.ip_network(r.destination).prefixlen, r.metric))
    if covering and covering[0].pk == route.pk:
        return f"your client {client} is reached through the route to {route.label}"
    return None


# -- interfaces ---------------------------------------------------------------------------------


@audited("create")
@transaction.atomic
def interface_create(**values) -> Interface:
    """Manage an interface: an Ethernet device the machine has, or a VLAN or bond lbweb creates."""
    interface = validated_save(Interface(), INTERFACE_FIELDS, values)
    _apply_after_commit()
    return interface


@audited("update", "interface")
@transaction.atomic
def interface_update(
    *, interface: Interface, management: Management | None = None, confirm: bool = False, **values
) -> Interface:
    """Change an interface (up/down, MTU, bond membership, ...)."""
    guard(management, confirm, _interface_cut(interface, management, values))
    validated_save(interface, INTERFACE_FIELDS, values)
    _apply_after_commit()
    return interface


@audited("delete", "interface")
@transaction.atomic
def interface_delete(*, interface: Interface, management: Management | None = None, confirm: bool = False) -> None:
    """Stop managing an interface: lbweb's addresses and routes on it go; a VLAN or bond it made is deleted."""
    guard(management, confirm, _interface_cut(interface, management, None))
    if interface.vlans.exists():
        names = ", ".join(v.name for v in interface.vlans.all())
        raise ValidationError({"interface": f"VLANs {names} run on {interface.name}: delete them first."})
    interface.delete()
    _apply_after_commit()


# -- addresses ----------------------------------------------------------------------------------


@audited("create")
@transaction.atomic
def address_create(*, interface: Interface, address: str) -> Address:
    """Add an address (with its prefix) to an interface."""
    row = validated_save(Address(interface=interface), ("address",), {"address": address})
    _apply_after_commit()
    return row


@audited("delete", "address")
@transaction.atomic
def address_delete(*, address: Address, management: Management | None = None, confirm: bool = False) -> None:
    """Remove an address lbweb put on an interface."""
    if management and management.address == address.ip:
        guard(management, confirm, f"deleting {address.address} from {address.interface}")
    address.delete()
    _apply_after_commit()


# -- routes -------------------------------------------------------------------------------------


@audited("create")
@transaction.atomic
def route_create(**values) -> Route:
    """Add a static route ('default': the default gateway)."""
    route = validated_save(Route(), ROUTE_FIELDS, values)
    _apply_after_commit()
    return route


@audited("update", "route")
@transaction.atomic
def route_update(*, route: Route, management: Management | None = None, confirm: bool = False, **values) -> Route:
    """Change a route (its gateway, interface or metric)."""
    guard(management, confirm, _route_cut(route, management))
    validated_save(route, ROUTE_FIELDS, values)
    _apply_after_commit()
    return route


@audited("delete", "route")
@transaction.atomic
def route_delete(*, route: Route, management: Management | None = None, confirm: bool = False) -> None:
    """Remove a static route lbweb added."""
    guard(management, confirm, _route_cut(route, management))
    route.delete()
    _apply_after_commit()


# -- DNS and NTP --------------------------------------------------------------------------------


@audited("update", "settings")
@transaction.atomic
def settings_update(*, settings: NetworkSettings, **values) -> NetworkSettings:
    """Name servers, search domains and NTP servers (written for systemd-resolved and -timesyncd)."""
    validated_save(settings, SETTINGS_FIELDS, values, update_fields=list(values))  # the worker's columns are its own
    _apply_after_commit()
    return settings
