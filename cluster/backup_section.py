"""The cluster's part of a backup (``system/backup``): the HA pair's settings (its token included) and its nodes.

Restored through ``cluster_update``, so every check holds: an enabled cluster must name this appliance as one of
its two nodes (``LBWEB_NODE_NAME``), and this node's keepalived and conntrackd must accept the files it makes. A
restore onto a machine with another name is refused at ``cluster.nodes`` and says so.
"""

from __future__ import annotations

from typing import Any

from compiler.types import Json
from farms.config_io import ImportResult

from . import services
from .models import Cluster, Node

KEYS = ("settings", "nodes")


def export() -> Json:
    cluster = Cluster.load()
    return {
        "settings": {name: getattr(cluster, name) for name in services.CLUSTER_FIELDS},
        "nodes": [{n: getattr(node, n) for n in services.NODE_FIELDS} for node in Node.objects.order_by("name")],
    }


def restore(data: Any, result: ImportResult) -> None:
    from system.backup.sections import attempt, fields_ok, items_ok

    if not fields_ok(result, "cluster", data, KEYS):
        return
    if export() == {**export(), **data}:
        result.count("cluster", "unchanged")
        return
    settings = data.get("settings", {})
    nodes = items_ok(result, "cluster.nodes", data.get("nodes", []))
    if not fields_ok(result, "cluster.settings", settings, services.CLUSTER_FIELDS, Cluster):
        return
    if not nodes:
        Node.objects.all().delete()
    if attempt(result, "cluster", lambda: services.cluster_update(nodes=nodes or None, **settings)):
        result.count("cluster", "updated", "cluster")


def register() -> None:
    from system.backup import sections

    sections.register("cluster", order=70, export=export, restore=restore)
