"""This node's current VRRP role, as its transition handler last wrote it (``STATE_DIR/role``).

A file, not the database: the handler runs on the failover's critical path without Django, and the web reads
the file on every write request (``cluster.middleware``) for the price of one small read.
"""

from __future__ import annotations

import json

from django.conf import settings

from .choices import RoleChoices

_STATES = {"MASTER": RoleChoices.MASTER, "BACKUP": RoleChoices.BACKUP, "FAULT": RoleChoices.FAULT}


def local_role() -> dict:
    """{"role": RoleChoices value, "since": unix time or None}."""
    try:
        data = json.loads((settings.LBWEB_CLUSTER_DIR / "role").read_text())
    except (OSError, ValueError):
        return {"role": RoleChoices.UNKNOWN, "since": None}
    return {"role": _STATES.get(data.get("state"), RoleChoices.STOPPED), "since": data.get("since")}
