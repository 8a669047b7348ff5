"""How a unit the kernel refuses is found and isolated, so that one bad farm costs one failed attempt.

A change the kernel refuses is split in halves until the refused units are alone (``dataplane/bisection.py``,
shared with HAProxy's isolation); a
refused farm is then failed with the kernel's words (and what they mean when a capability is missing)
and left out of every later apply and reconcile until it is written again or retried
(:func:`isolated_farms`). A refused policy, or a farm deleted meanwhile, fails the run instead.
"""

from __future__ import annotations

from collections.abc import Hashable

from django.db.models import F

from farms.choices import L7_MODES
from farms.models import Farm

from .bisection import bisect  # noqa: F401 (the search, shared with HAProxy's isolation)
from .kernel import capabilities
from .kernel.interface import Interface
from .outcome import Outcome

ISOLATED = "isolated, retried when the farm changes: "


def isolated_farms(http: bool = False) -> dict[int, str]:
    """Farms the kernel refused, or whose apply crashed the kernel writer, at their current configuration
    (id -> the reason shown). They are left out of every apply and reconcile, and what the kernel held
    of them before stays as it was, until the farm is written again or retried (both move its
    configuration generation): one refused farm costs one failed attempt, not a full rebuild at every
    apply and reconcile that would wipe every farm's persistence entries and counters. ``http``: the HTTP
    farms HAProxy refused instead (``dataplane/l7/applier.py``), kept the same way."""
    rows = Farm.objects.filter(failed_generation__gte=F("config_generation"), apply_error__startswith=ISOLATED)
    rows = rows.filter(mode__in=L7_MODES) if http else rows.exclude(mode__in=L7_MODES)
    return dict(rows.values_list("id", "apply_error"))


def pending_farms() -> bool:
    """Whether a farm waits for an apply (isolated farms wait for a change, not for the worker)."""
    waiting = Farm.objects.exclude(mode__in=L7_MODES).filter(applied_generation__lt=F("config_generation"))
    return waiting.exclude(failed_generation__gte=F("config_generation"), apply_error__startswith=ISOLATED).exists()


def farm_id(key: Hashable) -> int:
    """The farm id of a unit key (``farm:<id>``)."""
    return int(str(key).split(":")[1])


def isolate(kernel: Interface, refused: dict[Hashable, str], outcome: Outcome) -> None:
    """Record refused units: a farm is failed and isolated with the kernel's words (and what they mean
    when a capability is missing); a policy, or a farm already deleted, fails the run."""
    farms = {farm_id(k): m for k, m in refused.items() if str(k).startswith("farm:")}
    rows = {r["id"]: r for r in Farm.objects.filter(id__in=list(farms)).values("id", "flow_offload", "helper")}
    probed = capabilities.probe(kernel) if any(not m.startswith("crashed") for m in farms.values()) else {}
    for fid, row in rows.items():
        outcome.failed[fid] = ISOLATED + explain(row["flow_offload"], row["helper"], farms[fid], probed)
    others = [f"{k}: {m}" for k, m in refused.items() if not (str(k).startswith("farm:") and farm_id(k) in rows)]
    if others:
        outcome.error = "\n".join([*others, *(f"farm {fid}: {m}" for fid, m in sorted(outcome.failed.items()))])


def explain(flow_offload: bool, helper: str, message: str, capabilities: dict[str, bool]) -> str:
    """The kernel's words, plus what they mean when a known capability is missing."""
    if flow_offload and not capabilities.get("flowtable", True):
        return (
            "flow offload needs flowtable support in the kernel (CONFIG_NF_FLOW_TABLE), which this kernel "
            f"lacks; turn flow_offload off for this farm. Kernel said: {message}"
        )
    if helper and not capabilities.get(f"helper-{helper}", True):
        return f"the conntrack helper '{helper}' is not available in this kernel. Kernel said: {message}"
    return message
