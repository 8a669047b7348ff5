"""Is the appliance keeping up? The liveness of every process and how long changes have waited.

Read by ``GET /api/v1/status/`` and by every page (the banner of ``base.html``). A change is saved
first and applied after (docs/how-a-change-reaches-the-kernel.md): with the worker stopped, writes still
succeed and stay "pending", so without this nothing would say that nothing reaches the kernel. Cheap enough
for every page: one Redis MGET and one database query.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db.models import Count, F, Min, Q
from django.utils import timezone

from lbweb import heartbeat

from .models import Farm


def pending_changes() -> dict[str, Any]:
    """Farms whose configuration the kernel does not have yet (failed ones excepted: they wait for an edit)."""
    pending = Farm.objects.filter(applied_generation__lt=F("config_generation")).exclude(
        Q(failed_generation__gte=F("config_generation")) & ~Q(apply_error="")
    )
    figures = pending.aggregate(n=Count("id"), since=Min("updated"))
    count = figures["n"]
    waiting = (timezone.now() - figures["since"]).total_seconds() if count and figures["since"] else 0.0
    return {"changes": count, "waiting_seconds": round(max(0.0, waiting), 1)}


def status() -> dict[str, Any]:
    """Processes, pending changes, and the alerts a person must see (empty when all is well)."""
    processes = heartbeat.process_states()
    pending = pending_changes()
    alerts = [
        f"{name} not running" if state["state"] in ("stopped", "never_seen") else state["detail"]
        for name, state in processes.items()
        if state["state"] != "running"
    ]
    stalled = pending["changes"] and pending["waiting_seconds"] > settings.LBWEB_APPLY_STALL_SECONDS
    if stalled:
        noun = "change" if pending["changes"] == 1 else "changes"
        alerts.append(f"{pending['changes']} {noun} waiting for {pending['waiting_seconds']:.0f} s")
    return {"processes": processes, "pending": {**pending, "stalled": bool(stalled)}, "alerts": alerts}


def liveness_context(request) -> dict[str, Any]:
    """The banner's alerts, for signed-in users only (the login page reads nothing)."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {"liveness_alerts": status()["alerts"]}
