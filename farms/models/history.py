"""The history an operator reads: who changed what (the audit trail) and the configurations the kernel held
(versions, stored as shared parts)."""

from __future__ import annotations

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.utils import timezone

from .records import ApplyRun


class AuditEvent(models.Model):
    """Who changed what and when: one row per service call, written in the same transaction as the change."""

    time = models.DateTimeField(default=timezone.now, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_name = models.CharField(max_length=150, help_text="The account's name then ('system' for none).")
    action = models.CharField(max_length=30)
    object_type = models.CharField(max_length=30, db_index=True)
    object_id = models.BigIntegerField(null=True, blank=True)
    object_name = models.CharField(max_length=200, blank=True)
    farm_ref = models.BigIntegerField(
        null=True, blank=True, db_index=True, help_text="The farm this concerns (kept after the farm is deleted)."
    )
    before = models.JSONField(null=True, blank=True, encoder=DjangoJSONEncoder)
    after = models.JSONField(null=True, blank=True, encoder=DjangoJSONEncoder)

    class Meta:
        ordering = ("-time", "-id")

    def __str__(self) -> str:
        return f"{self.time:%Y-%m-%d %H:%M:%S} {self.actor_name} {self.action} {self.object_type} {self.object_name}"

    def changes(self) -> list[tuple[str, object, object]]:
        """(field, before, after) for every field whose value differs."""
        before, after = self.before or {}, self.after or {}
        if not isinstance(before, dict) or not isinstance(after, dict):
            return []
        names = list(before) + [k for k in after if k not in before]
        return [(k, before.get(k), after.get(k)) for k in names if before.get(k) != after.get(k)]


class ConfigVersion(models.Model):
    """The whole configuration as the kernel held it after a successful apply (the export document).

    Recorded by the worker (``farms/versions.py``) only when every farm had been applied and nothing newer
    was saved meanwhile, and only when the document differs from the newest version: a health
    transition or a reconcile that changes nothing adds no version. Restoring one is an import of its
    document (the same validation, preview, audit and apply as any import).
    """

    created = models.DateTimeField(default=timezone.now, db_index=True)
    generation = models.BigIntegerField(help_text="The configuration generation the kernel held.")
    digest = models.CharField(max_length=64, db_index=True, help_text="SHA-256 of the canonical document.")
    # Versions kept before parts existed hold their whole document; newer ones a manifest of ConfigParts.
    whole = models.JSONField(encoder=DjangoJSONEncoder, null=True, blank=True, db_column="document")
    manifest = models.JSONField(
        null=True, blank=True, help_text="Digests of the document's parts (ConfigPart): policies, each farm, sections."
    )
    apply_run = models.ForeignKey(ApplyRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    farms = models.PositiveIntegerField(default=0)
    backends = models.PositiveIntegerField(default=0)
    policies = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ("-id",)

    def __str__(self) -> str:
        return f"version {self.pk} (generation {self.generation}, {self.created:%Y-%m-%d %H:%M:%S})"


class ConfigPart(models.Model):
    """One piece of a configuration version's document (a farm with its backends, the policy list, another
    app's section), stored once however many versions hold it: a version after a change of one farm adds
    that farm's new part and a list of digests, not a copy of every farm (``farms/versions.py``)."""

    digest = models.CharField(max_length=32, unique=True)
    content = models.JSONField(encoder=DjangoJSONEncoder)

    def __str__(self) -> str:
        return f"part {self.digest}"
