"""The apply runs and the audit log."""

from __future__ import annotations

import re

from django.views.generic import ListView

from .. import liveness
from ..filtersets import AuditEventFilterSet
from ..models import ApplyRun, AuditEvent, Farm
from ..roles import RoleRequiredMixin
from .page_parts import PAGE_SIZE

FARM_LINE = re.compile(r"^farm (\d+): (.*)$")


def error_groups(error: str, names: dict[int, str]) -> list[dict]:
    """A run's error as the page shows it: each distinct message once, with the farms it concerns
    (by name; a farm deleted since keeps its id). The worker writes one ``farm <id>: <message>`` line
    per refused farm, and a bisected batch repeats the kernel's words for every farm it refused."""
    groups: dict[str, dict] = {}
    for line in error.splitlines():
        match = FARM_LINE.match(line)
        farm = (int(match.group(1)), names.get(int(match.group(1)))) if match else None
        message = match.group(2) if match else line
        group = groups.setdefault(message, {"message": message, "farms": []})
        if farm and farm not in group["farms"]:
            group["farms"].append(farm)
    return list(groups.values())


class ApplyRunListView(RoleRequiredMixin, ListView):
    """Every apply of the worker: generation, kind, duration, and the kernel's words when it failed,
    under the worker's liveness (a stopped worker shows here first: nothing reaches the kernel)."""

    template_name = "farms/applyrun_list.html"
    context_object_name = "runs"
    paginate_by = PAGE_SIZE

    def get_queryset(self):
        runs = ApplyRun.objects.all()
        if self.request.GET.get("failed"):
            runs = runs.filter(ok=False)
        return runs

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        runs = list(context["runs"])
        ids = {int(m.group(1)) for r in runs for line in r.error.splitlines() if (m := FARM_LINE.match(line))}
        names = dict(Farm.objects.filter(id__in=ids).values_list("id", "name"))
        for run in runs:
            run.error_groups = error_groups(run.error, names)
        context["runs"] = runs
        state = liveness.status()
        context["worker"] = state["processes"].get("worker", {})
        context["pending"] = state["pending"]
        return context


class AuditEventListView(RoleRequiredMixin, ListView):
    """Who changed what and when, with before and after; filtered by the API's own filterset."""

    template_name = "farms/auditevent_list.html"
    context_object_name = "events"
    paginate_by = PAGE_SIZE

    def get_queryset(self):
        self.filterset = AuditEventFilterSet(self.request.GET or None, queryset=AuditEvent.objects.all())
        if not self.filterset.is_bound:
            return AuditEvent.objects.all()
        return self.filterset.qs if self.filterset.is_valid() else AuditEvent.objects.none()

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        events = AuditEvent.objects.order_by()
        names = dict(Farm.objects.values_list("id", "name"))
        refs = sorted(set(events.exclude(farm_ref=None).values_list("farm_ref", flat=True)) | set(names))
        gone = dict(  # a deleted farm keeps its name in its own events
            events.filter(object_type="farm", object_id__in=[r for r in refs if r not in names]).values_list(
                "object_id", "object_name"
            )
        )
        context["filter"] = self.filterset
        context["farms"] = [(r, names.get(r) or f"{gone.get(r, f'#{r}')} (deleted)") for r in refs]
        context["actions"] = sorted(set(events.values_list("action", flat=True)))
        context["actors"] = sorted(set(events.values_list("actor_name", flat=True)))
        context["object_types"] = sorted(set(events.values_list("object_type", flat=True)))
        context["active_filters"] = {k: v for k, v in self.request.GET.items() if v and k != "page"}
        context["filter_errors"] = self.filterset.errors if self.filterset.is_bound else {}
        return context
