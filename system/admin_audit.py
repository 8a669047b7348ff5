"""Writes made on Django's admin site (accounts, groups, i.e. roles, API tokens) go into lbweb's audit trail.

The admin does not go through lbweb's services: it saves models itself and writes a ``LogEntry`` (who,
what, the change message) in the same transaction. Each such entry becomes an ``AuditEvent`` with the
same actor, so "every write is audited" holds for the admin too, and the audit log shows who gave whom
which role.
"""

from __future__ import annotations

from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.db.models.signals import post_save

from farms.audit import record

ACTIONS = {ADDITION: "create", CHANGE: "update", DELETION: "delete"}


def audit_admin_write(sender, instance: LogEntry, created: bool, **_kwargs) -> None:
    if not created:
        return
    object_id = str(instance.object_id or "")
    record(
        actor=instance.user,
        action=ACTIONS.get(instance.action_flag, "admin"),
        object_type=(instance.content_type.model if instance.content_type_id else "admin")[:30],
        object_id=int(object_id) if object_id.isdigit() else None,
        object_name=instance.object_repr,
        after={"admin": instance.get_change_message() or ACTIONS.get(instance.action_flag, "")},
    )


def connect() -> None:
    post_save.connect(audit_admin_write, sender=LogEntry, dispatch_uid="lbweb-audit-admin-writes")
