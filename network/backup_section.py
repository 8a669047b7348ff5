"""System › Network's part of a backup (``system/backup``): interfaces with their addresses, routes, DNS and NTP.

Interfaces refer to one another by name (a VLAN's parent, a bond's members). A restore that finds the network as
the backup has it changes nothing; otherwise it takes lbweb's interfaces, addresses and routes away and makes them
again from the backup, through the services (so every check applies), and the worker applies the result once
after the restore commits. An interface the machine does not have is reported by the worker, as for any change.
"""

from __future__ import annotations

from typing import Any

from compiler.types import Json
from farms.config_io import ImportError_, ImportResult

from . import services
from .choices import InterfaceKindChoices
from .models import Address, Interface, NetworkSettings, Route

INTERFACE_FIELDS = (*services.INTERFACE_FIELDS, "addresses")
ROUTE_FIELDS = services.ROUTE_FIELDS
KEYS = ("interfaces", "routes", "settings")


def export() -> Json:
    interfaces = Interface.objects.select_related("parent", "bond").prefetch_related("addresses").order_by("name")
    settings = NetworkSettings.load()
    return {
        "interfaces": [
            {
                **{name: getattr(i, name) for name in services.INTERFACE_FIELDS if name not in ("parent", "bond")},
                "parent": i.parent.name if i.parent_id else None,
                "bond": i.bond.name if i.bond_id else None,
                "addresses": sorted(a.address for a in i.addresses.all()),
            }
            for i in interfaces
        ],
        "routes": [
            {
                **{n: getattr(r, n) for n in ROUTE_FIELDS if n != "interface"},
                "interface": r.interface.name if r.interface_id else None,
            }
            for r in Route.objects.select_related("interface").order_by("destination", "metric", "id")
        ],  # fmt: skip
        "settings": {name: getattr(settings, name) for name in services.SETTINGS_FIELDS},
    }


def _kind_order(entry: Json) -> int:
    """Bonds and Ethernet devices first, then what runs on them (VLANs), members last (their bond exists)."""
    if entry.get("kind") == InterfaceKindChoices.VLAN:
        return 1
    return 2 if entry.get("bond") else 0


def restore(data: Any, result: ImportResult) -> None:
    from system.backup.sections import attempt, fields_ok, items_ok

    if not fields_ok(result, "network", data, KEYS):
        return
    if export() == {**export(), **data}:
        result.count("network", "unchanged")
        return
    errors_before = len(result.errors)
    interfaces = items_ok(result, "network.interfaces", data.get("interfaces", []))
    routes = items_ok(result, "network.routes", data.get("routes", []))
    for index, entry in enumerate(interfaces):
        fields_ok(result, f"network.interfaces[{index}]", entry, INTERFACE_FIELDS, Interface)
    for index, entry in enumerate(routes):
        fields_ok(result, f"network.routes[{index}]", entry, ROUTE_FIELDS, Route)
    if len(result.errors) > errors_before:
        return
    services._apply_after_commit()  # the worker applies what is left, even when the backup has nothing
    Route.objects.all().delete()
    Address.objects.all().delete()
    for interface in Interface.objects.exclude(kind=InterfaceKindChoices.VLAN):
        interface.vlans.all().delete()
    Interface.objects.all().delete()
    made: dict[str, Interface] = {}
    for index, entry in sorted(enumerate(interfaces), key=lambda pair: _kind_order(pair[1])):
        where = f"network.interfaces[{index}]"
        values = {k: v for k, v in entry.items() if k in services.INTERFACE_FIELDS}
        for ref in ("parent", "bond"):
            name = values.get(ref)
            if name and name not in made:
                result.errors.append(ImportError_(where, ref, f"No interface '{name}' in the backup."))
                break
            values[ref] = made.get(name) if name else None
        else:
            if attempt(result, where, lambda v=values: made.setdefault(v["name"], services.interface_create(**v))):
                result.count("interfaces", "created", values["name"])
                interface = made[values["name"]]
                for address in entry.get("addresses") or []:
                    write = lambda i=interface, a=address: services.address_create(interface=i, address=a)  # noqa: E731
                    attempt(result, where + ".addresses", write)
    for index, entry in enumerate(routes):
        where = f"network.routes[{index}]"
        values = dict(entry)
        name = values.get("interface")
        if name and name not in made:
            result.errors.append(ImportError_(where, "interface", f"No interface '{name}' in the backup."))
            continue
        values["interface"] = made.get(name) if name else None
        if attempt(result, where, lambda v=values: services.route_create(**v)):
            result.count("routes", "created", str(values.get("destination")))
    if "settings" in data and fields_ok(result, "network.settings", data["settings"], services.SETTINGS_FIELDS,
                                        NetworkSettings):  # fmt: skip
        attempt(result, "network.settings",
                lambda: services.settings_update(settings=NetworkSettings.load(), **data["settings"]))  # fmt: skip


def register() -> None:
    from system.backup import sections

    sections.register("network", order=60, export=export, restore=restore)
