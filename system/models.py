"""The system app's one table: the schedule of backups written to a directory (``system/backup``)."""

from __future__ import annotations

import os
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models


class BackupSchedule(models.Model):
    """Row 1: whether the worker writes an encrypted backup to ``directory`` every ``interval_hours``, and the
    newest ``keep`` it leaves there. The passphrase is stored so the worker can use it; it is never shown again
    (the API says only whether one is set, the audit trail when it changed)."""

    SECRETS = {"passphrase": "passphrase_changed"}

    enabled = models.BooleanField(default=False)
    directory = models.CharField(
        max_length=300,
        blank=True,
        help_text="Absolute, made 0700 if missing (blank: backups/ in lbweb's state directory).",
    )
    interval_hours = models.PositiveIntegerField(default=24, validators=[MinValueValidator(1), MaxValueValidator(720)])
    keep = models.PositiveIntegerField(
        default=14, validators=[MinValueValidator(1), MaxValueValidator(1000)], help_text="Older backups are deleted."
    )
    passphrase = models.CharField(max_length=500, blank=True)
    passphrase_changed = models.DateTimeField(null=True, blank=True, editable=False)
    last_run = models.DateTimeField(null=True, blank=True, editable=False)
    last_file = models.CharField(max_length=400, blank=True, editable=False)
    last_error = models.TextField(blank=True, editable=False)

    def __str__(self) -> str:
        return "backup schedule"

    @property
    def target(self) -> Path:
        """Where the backups go: ``directory``, or ``backups/`` in the state directory (the appliance's worker may
        write only under it)."""
        return Path(self.directory) if self.directory else Path(settings.VAR_DIR) / "backups"

    @classmethod
    def load(cls) -> BackupSchedule:
        return cls.objects.filter(pk=1).first() or cls(pk=1)

    def audit_state(self) -> dict:
        return {
            "enabled": self.enabled,
            "directory": self.directory,
            "interval_hours": self.interval_hours,
            "keep": self.keep,
            "passphrase": f"set (changed {self.passphrase_changed:%Y-%m-%d %H:%M:%S} UTC)"
            if self.passphrase and self.passphrase_changed
            else ("set" if self.passphrase else "not set"),
        }

    def clean(self) -> None:
        from .backup.archive import passphrase_problem

        errors = {}
        if self.directory:
            path = Path(self.directory)
            if not path.is_absolute() or ".." in path.parts or any(c in self.directory for c in "\n\r\0"):
                errors["directory"] = "Give an absolute path, without '..'."
            else:
                problem = _directory_problem(path)
                if problem:
                    errors["directory"] = problem
        if self.passphrase:
            problem = passphrase_problem(self.passphrase)
            if problem:
                errors["passphrase"] = problem
        if self.enabled and not self.passphrase:
            errors.setdefault("passphrase", "Give the passphrase the backups are encrypted with.")
        if errors:
            raise ValidationError(errors)


def _directory_problem(path: Path) -> str | None:
    """Why lbweb cannot write backups into ``path`` (or the nearest directory above it that exists), or None."""
    try:
        existing = next(p for p in (path, *path.parents) if p.exists())
    except OSError as exc:  # a directory above it that lbweb may not enter
        return f"lbweb cannot reach {path}: {exc.strerror}."
    if existing == path and not path.is_dir():
        return f"{path} exists and is not a directory."
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable by lbweb."
    return None
