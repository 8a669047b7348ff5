"""The only writers of backups and restores, each audited.

- :func:`backup_create`: every section's export in one document, sealed with a passphrase (``archive.py``).
- :func:`backup_restore`: open an archive and make the appliance equal to it in one transaction, through each
  app's services; a wrong passphrase, a damaged archive or any refused value changes nothing and says where.
- :func:`schedule_update` and :func:`scheduled_backup`: the backups the worker writes to a directory (beat asks
  every ``LBWEB_BACKUP_CHECK_SECONDS``; one is written when the last is ``interval_hours`` old).
"""

from __future__ import annotations

import json
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.serializers.json import DjangoJSONEncoder
from django.db import DatabaseError, transaction
from django.utils import timezone

from compiler.types import Json
from farms import audit
from farms.config_io import ImportError_, ImportResult, validation_errors
from farms.models import AuditEvent
from lbweb import enqueue
from lbweb.writes import validated_save

from ..models import BackupSchedule
from . import archive
from .sections import ordered

FORMAT_KEY = "lbweb_backup"
FORMAT_VERSION = 1
SCHEDULE_FIELDS = ("enabled", "directory", "interval_hours", "keep", "passphrase")


def document() -> Json:
    """The whole appliance as JSON, secrets included: keep it inside an archive."""
    return {
        FORMAT_KEY: FORMAT_VERSION,
        "created_at": timezone.now().isoformat(timespec="seconds"),
        "host": settings.LBWEB_NODE_NAME,
        "sections": {section.key: section.export() for section in ordered()},
    }


def filename(created_at=None) -> str:
    stamp = (created_at or timezone.now()).strftime("%Y%m%dT%H%M%SZ")
    return f"lbweb-{settings.LBWEB_NODE_NAME}-{stamp}{archive.SUFFIX}"


def _passphrase_checked(passphrase: Any) -> str:
    problem = archive.passphrase_problem(passphrase)
    if problem:
        raise ValidationError({"passphrase": problem})
    return passphrase


def backup_create(*, passphrase: str, actor=None) -> tuple[bytes, str]:
    """(the archive's bytes, its file name). Audited: who took the appliance's secrets away, and when."""
    _passphrase_checked(passphrase)
    now = timezone.now()
    doc = document()
    data = archive.seal(json.dumps(doc, cls=DjangoJSONEncoder, sort_keys=True).encode(), passphrase)
    name = filename(now)
    audit.record(actor=actor, action="backup", object_type="appliance", object_name=name,
                 after={"sections": sorted(doc["sections"]), "bytes": len(data)})  # fmt: skip
    return data, name


def read_archive(data: bytes, passphrase: str) -> Json:
    """The document inside an archive; ValidationError on ``passphrase`` or ``archive`` saying what is wrong."""
    _passphrase_checked(passphrase)
    try:
        text = archive.open_(data, passphrase)
    except archive.ArchiveError as exc:
        raise ValidationError({exc.field: str(exc)}) from None
    try:
        doc = json.loads(text)
    except ValueError:
        raise ValidationError({"archive": "The archive opens but holds no JSON document."}) from None
    if not isinstance(doc, dict) or doc.get(FORMAT_KEY) != FORMAT_VERSION or not isinstance(doc.get("sections"), dict):
        raise ValidationError(
            {"archive": f'The archive opens but is not an lbweb backup of format {FORMAT_VERSION} ("{FORMAT_KEY}").'}
        )
    return doc


def backup_restore(*, data: bytes, passphrase: str, actor=None, dry_run: bool = False) -> ImportResult:
    """Make the appliance equal to the archive, or change nothing and say why (every error, located).

    Raises ValidationError (``passphrase``, ``archive``) when the archive cannot be read; returns the result
    of the sections' restore otherwise (``ok`` False: rolled back). One audit event ``restore``."""
    doc = read_archive(data, passphrase)
    result = ImportResult(dry_run=dry_run)
    known = {section.key for section in ordered()}
    for key in sorted(set(doc["sections"]) - known):
        result.errors.append(ImportError_("sections", key, f"This appliance has no part '{key}' to restore."))
    present = [section for section in ordered() if section.key in doc["sections"]]
    actor_name = actor.get_username() if getattr(actor, "is_authenticated", False) else "system"
    with transaction.atomic():
        with audit.acting(actor), audit.quiet():
            for step in ("restore", "finish"):
                for section in present:
                    call = getattr(section, step)
                    if call is not None:
                        _run(section.key, call, doc["sections"][section.key], result)
        result.ok = not result.errors
        if result.ok and not dry_run:
            event = {
                "action": "restore",
                "object_type": "appliance",
                "object_name": f"backup of {doc.get('host')} made {doc.get('created_at')}",
                "after": {"counts": result.counts, "changes": result.changes},
            }
            if actor is None or get_user_model().objects.filter(pk=actor.pk).exists():
                audit.record(actor=actor, **event)
            else:  # the backup has not the restoring account: it is gone, its name stays on the record
                AuditEvent.objects.create(actor=None, actor_name=actor_name, **event)
        else:
            transaction.set_rollback(True)
    return result


def _run(key: str, call, data: Any, result: ImportResult) -> None:
    try:
        with transaction.atomic():
            call(data, result)
    except ValidationError as exc:
        result.errors.extend(validation_errors(key, exc))
    except DatabaseError as exc:  # a row the checks let through but the database refuses: rolled back too
        result.errors.append(ImportError_(key, "__all__", f"The database refused it: {exc}"))


# -- the schedule -----------------------------------------------------------------------------------


@transaction.atomic
def schedule_update(*, actor=None, **values) -> BackupSchedule:
    """Change the schedule; ``passphrase`` None (or left out) keeps the stored one. Enabled, the worker is asked
    at once (it writes a backup if one is due)."""
    row = BackupSchedule.load()
    before = row.audit_state() if BackupSchedule.objects.filter(pk=1).exists() else None
    passphrase = values.pop("passphrase", None)
    if passphrase is not None and passphrase != row.passphrase:
        values["passphrase"] = passphrase
        row.passphrase_changed = timezone.now()
    validated_save(row, SCHEDULE_FIELDS, values)
    audit.record(actor=actor, action="update", object_type="backup schedule", object_id=1, object_name=str(row),
                 before=before, after=row.audit_state())  # fmt: skip
    if row.enabled:  # the first backup at once (when due), not at beat's next look
        enqueue.send_after_commit("system.tasks.scheduled_backup", what="scheduled backup")
    return row


def scheduled_backup(*, force: bool = False) -> Path | None:
    """Write a backup to the schedule's directory when one is due (the worker's task); the path, or None."""
    row = BackupSchedule.load()
    if not row.enabled or not BackupSchedule.objects.filter(pk=1).exists():
        return None
    now = timezone.now()
    if not force and row.last_run and now - row.last_run < timedelta(hours=row.interval_hours):
        return None
    try:
        data, name = backup_create(passphrase=row.passphrase)
        path = _write(row.target, name, data)
        _prune(row.target, row.keep)
    except (OSError, ValidationError) as exc:
        BackupSchedule.objects.filter(pk=1).update(last_run=now, last_error=str(exc))
        return None
    BackupSchedule.objects.filter(pk=1).update(last_run=now, last_file=str(path), last_error="")
    return path


def _write(directory: Path, name: str, data: bytes) -> Path:
    """``directory/name``, 0600 in a directory lbweb made 0700, written whole before it takes its name."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = directory / name
    if path.exists():  # two within a second (a forced run): the later one keeps its own name
        path = directory / name.replace("Z" + archive.SUFFIX, f".{timezone.now():%f}Z{archive.SUFFIX}")
    partial = directory / f".{path.name}.partial"
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(partial, path)
    return path


def _prune(directory: Path, keep: int) -> None:
    """Delete all but the newest ``keep`` of this appliance's archives there (newest by time written)."""
    mine = directory.glob(f"lbweb-{settings.LBWEB_NODE_NAME}-*{archive.SUFFIX}")
    mine = sorted(mine, key=lambda p: (p.stat().st_mtime_ns, p.name))
    for old in mine[:-keep]:
        old.unlink(missing_ok=True)
