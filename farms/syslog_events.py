"""The audit trail, apply runs and health transitions as remote syslog events (``lbweb/syslog_events.py``).

Each is sent once its transaction commits (a change that rolled back is no event), with its RFC 5424 MSGID
(``compiler.syslog.spec``: audit, apply, health) and its fields as structured data. The audit trail never holds a
secret (``SingletonSettings.audit_state``), so neither do these events.
"""

from __future__ import annotations

from django.db import transaction

from compiler.syslog import spec as kinds
from lbweb import syslog_events


def _after_commit(msgid: str, text: str, data: dict, severity: str = "info") -> None:
    transaction.on_commit(lambda: syslog_events.send(msgid, text, data, severity=severity))


def audit(event) -> None:
    """One audit entry: who, what, which object, and the fields it changed (before -> after)."""
    changes = {name: {"before": before, "after": after} for name, before, after in event.changes()}
    data = {
        "id": event.pk,
        "actor": event.actor_name,
        "action": event.action,
        "type": event.object_type,
        "object_id": event.object_id,
        "object": event.object_name,
        "farm": event.farm_ref,
        "changes": changes or None,
    }
    text = f"{event.actor_name} {event.action} {event.object_type} {event.object_name}".strip()
    _after_commit(kinds.AUDIT, text, data, "notice")


def apply_run(run) -> None:
    """One apply run of the worker (nftables, or HAProxy when ``writer`` is haproxy) and its result."""
    data = {
        "id": run.pk,
        "generation": run.generation,
        "kind": run.kind,
        "reason": run.reason,
        "writer": run.writer,
        "ok": "yes" if run.ok else "no",
        "duration_ms": round(run.duration_ms, 1),
        "farms_changed": run.farms_changed,
        "error": run.error or None,
    }
    text = f"apply #{run.pk} generation {run.generation} {run.kind} {'ok' if run.ok else 'failed: ' + run.error}"
    _after_commit(kinds.APPLY, text, data, "info" if run.ok else "err")


def health(event) -> None:
    """One backend's health transition."""
    backend = event.backend
    data = {
        "farm": backend.farm.name,
        "farm_id": backend.farm_id,
        "backend": str(backend),
        "backend_id": backend.pk,
        "previous": event.previous,
        "current": event.current,
        "reason": event.reason,
    }
    text = f"backend {backend} of farm {backend.farm.name}: {event.previous} -> {event.current} ({event.reason})"
    _after_commit(kinds.HEALTH, text, data, "warning" if event.current == "down" else "notice")


def cluster(transition) -> None:
    """One transition of this node of the HA pair, as the handler journalled it (``cluster.services``)."""
    failed = [step.get("step", "") for step in transition.steps or [] if not step.get("ok", True)]
    data = {
        "node": transition.node,
        "previous": transition.from_state,
        "state": transition.to_state,
        "reason": transition.reason,
        "failed_steps": ",".join(failed) or None,
    }
    text = f"node {transition.node}: {transition.from_state} -> {transition.to_state} ({transition.reason})"
    bad = transition.to_state in ("fault", "stop") or failed
    _after_commit(kinds.CLUSTER, text, data, "warning" if bad else "notice")
