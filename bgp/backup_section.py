"""BGP's part of a backup (``system/backup``): this node's settings, its peers (their TCP-MD5 passwords too: the
archive is encrypted) and each farm's announcement, by farm name. Restored after the farms, through the services, so
BIRD checks the result (``bird -p``) before the restore commits. Whether the node is drained is the node's state
of the moment, not configuration: a restore leaves it as it is."""

from __future__ import annotations

from typing import Any

from compiler.types import Json
from farms.config_io import ImportError_, ImportResult
from farms.models import Farm

from . import services
from .models import ANNOUNCEMENT_FIELDS, PEER_FIELDS, SETTINGS_FIELDS, BgpPeer, BgpSettings, FarmAnnouncement

KEYS = ("settings", "peers", "announcements")


def export() -> Json:
    settings = BgpSettings.load()
    return {
        "settings": {name: getattr(settings, name) for name in SETTINGS_FIELDS},
        "peers": [{n: getattr(p, n) for n in PEER_FIELDS} for p in BgpPeer.objects.order_by("name")],
        "announcements": [
            {"farm": a.farm.name, **{n: getattr(a, n) for n in ANNOUNCEMENT_FIELDS}}
            for a in FarmAnnouncement.objects.select_related("farm").order_by("farm__name")
        ],
    }


def _default(model, name: str):
    return model._meta.get_field(name).get_default()


def restore(data: Any, result: ImportResult) -> None:
    from system.backup.sections import attempt, fields_ok, items_ok, sync

    if not fields_ok(result, "bgp", data, KEYS):
        return
    if export() == {**export(), **data}:
        result.count("bgp", "unchanged")
        return
    peers = {}
    for index, entry in enumerate(items_ok(result, "bgp.peers", data.get("peers", []))):
        if fields_ok(result, f"bgp.peers[{index}]", entry, PEER_FIELDS, BgpPeer):
            peers[entry.get("name")] = (
                f"bgp.peers[{index}]",
                {n: entry.get(n, _default(BgpPeer, n)) for n in PEER_FIELDS},
            )
    sync(
        result, "bgp_peers", {p.name: p for p in BgpPeer.objects.all()}, peers, PEER_FIELDS,
        create=lambda _name, v: services.peer_create(**v),
        update=lambda peer, v: services.peer_update(peer=peer, **v),
        delete=lambda peer: services.peer_delete(peer=peer),
        location="bgp.peers",
    )  # fmt: skip
    farms = {f.name: f for f in Farm.objects.all()}
    listed = set()
    for index, entry in enumerate(items_ok(result, "bgp.announcements", data.get("announcements", []))):
        where = f"bgp.announcements[{index}]"
        if not fields_ok(result, where, entry, ("farm", *ANNOUNCEMENT_FIELDS), FarmAnnouncement):
            continue
        farm = farms.get(entry.get("farm"))
        if farm is None:
            result.errors.append(ImportError_(where, "farm", f"No farm '{entry.get('farm')}' in the backup."))
            continue
        listed.add(farm.pk)
        values = {n: entry.get(n, _default(FarmAnnouncement, n)) for n in ANNOUNCEMENT_FIELDS}
        announcement = services.announcement_of(farm)
        if attempt(result, where, lambda a=announcement, v=values: services.announcement_update(announcement=a, **v)):
            result.count("bgp_announcements", "updated", farm.name)
    FarmAnnouncement.objects.exclude(farm_id__in=listed).delete()  # the defaults, as a farm the backup lists none for
    if "settings" in data and fields_ok(result, "bgp.settings", data["settings"], SETTINGS_FIELDS, BgpSettings):
        values = {n: data["settings"].get(n, _default(BgpSettings, n)) for n in SETTINGS_FIELDS}
        if attempt(result, "bgp.settings", lambda: services.settings_update(**values)):
            result.count("bgp", "updated", "settings")
    services.request_deploy()


def register() -> None:
    from system.backup import sections

    sections.register("bgp", order=75, export=export, restore=restore)
