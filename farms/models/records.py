"""What the worker records: each apply it ran, what it put in the kernel per unit and how that read back,
and the live load least-connections balances by. Written by the worker, read by the web."""

from __future__ import annotations

from django.db import models

from ..choices import (
    ApplyKindChoices,
)
from .backends import Backend


class BackendLoad(models.Model):
    """Live connection count of a backend and the weight least-connections derives from it (worker-written)."""

    backend = models.OneToOneField(Backend, on_delete=models.CASCADE, related_name="load")
    connections = models.PositiveIntegerField(default=0)
    weight = models.PositiveIntegerField(default=1)
    updated = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.backend}: {self.connections} connections, weight {self.weight}"


class KernelUnit(models.Model):
    """What the worker last put in the kernel for one farm or policy (kept after it is deleted, until removed)."""

    key = models.CharField(max_length=40, primary_key=True)  # "farm:<id>" or "policy:<id>"
    name = models.CharField(max_length=48)
    digest = models.CharField(max_length=32)
    objects_json = models.JSONField(default=dict)
    applied_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.name} ({self.digest})"


class KernelFingerprint(models.Model):
    """What the kernel held of one unit (a farm, a policy, or "skeleton") right after lbweb wrote it, as
    normalised hashes of its objects (``dataplane/kernel/drift/record.py``): the reference a reconcile compares with."""

    key = models.CharField(max_length=40, primary_key=True)
    record = models.JSONField(default=dict)
    written_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"fingerprint of {self.key}"


class ApplyRun(models.Model):
    """One attempt of the worker to bring the kernel to a configuration generation."""

    generation = models.BigIntegerField()
    kind = models.CharField(max_length=12, choices=ApplyKindChoices)
    reason = models.CharField(max_length=40, blank=True)
    started = models.DateTimeField()
    duration_ms = models.FloatField(default=0)
    ok = models.BooleanField(default=False)
    error = models.TextField(blank=True)
    digest = models.CharField(max_length=32, blank=True)
    farms_changed = models.IntegerField(default=0)
    commands = models.IntegerField(default=0)
    writer = models.CharField(
        max_length=12,
        blank=True,
        help_text="Who wrote the transaction: 'netlink' (lbweb's own batch, the same cost whatever the number "
        "of farms), 'libnftables' (full applies, and changes lbweb cannot transcribe), or blank (nothing sent).",
    )
    drift = models.JSONField(
        default=list,
        blank=True,
        help_text="What a reconcile found changed in the kernel behind lbweb's back: one entry per unit "
        "(unit, name, differences), repaired by this run.",
    )

    class Meta:
        ordering = ("-id",)

    def __str__(self) -> str:
        return f"apply #{self.pk} gen {self.generation} {self.kind} {'ok' if self.ok else 'failed'}"
