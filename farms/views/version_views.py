"""Pages of the configuration history: the versions, a diff of any two, and a restore previewed first.

The restore page shows the import's dry run (what would be created, changed and deleted, by name) and
the diff from the configuration as it is now; only the confirmation writes (``versions.restore``).
"""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.views import View
from django.views.generic import ListView

from .. import config_io, versions
from ..models import ConfigVersion
from ..roles import ADMIN, RoleRequiredMixin
from .page_parts import PAGE_SIZE


class ConfigVersionListView(RoleRequiredMixin, ListView):
    """Every configuration the kernel held, newest first; pick two to compare."""

    template_name = "farms/configversion_list.html"
    context_object_name = "versions"
    paginate_by = PAGE_SIZE

    def get_queryset(self):
        return ConfigVersion.objects.defer("whole", "manifest").select_related("apply_run")


class ConfigVersionDiffView(RoleRequiredMixin, View):
    """What changes from one version (``old``, default: the one before ``new``) to another."""

    def get(self, request):
        new = _version(request.GET.get("new")) or ConfigVersion.objects.first()
        if new is None:
            return redirect("farms:configversion_list")
        old = _version(request.GET.get("old")) or ConfigVersion.objects.filter(id__lt=new.id).first() or new
        context = {
            "old": old,
            "new": new,
            "change": versions.diff(versions.document_of(old), versions.document_of(new)),
        }
        context["empty"] = versions.is_empty(context["change"])
        context["choices"] = ConfigVersion.objects.defer("whole", "manifest")[:200]
        return render(request, "farms/configversion_diff.html", context)


class ConfigVersionRestoreView(RoleRequiredMixin, View):
    """Restore one version: GET previews (a dry run of the import), POST restores (admins)."""

    required_role = ADMIN

    def get(self, request, pk: int):
        version = get_object_or_404(ConfigVersion, pk=pk)
        result = versions.restore(version=version, actor=request.user, dry_run=True)
        current = versions.canonical(config_io.export_config())
        change = versions.diff(current, versions.document_of(version))
        context = {"version": version, "result": result, "change": change, "empty": versions.is_empty(change)}
        return render(request, "farms/configversion_restore.html", context)

    def post(self, request, pk: int):
        version = get_object_or_404(ConfigVersion, pk=pk)
        result = versions.restore(version=version, actor=request.user)
        if not result.ok:
            context = {"version": version, "result": result, "change": None, "empty": True}
            return render(request, "farms/configversion_restore.html", context, status=400)
        messages.success(request, f"Configuration version {version.pk} restored; the kernel follows in a moment.")
        return redirect("farms:configversion_list")


def _version(raw: str | None) -> ConfigVersion | None:
    return ConfigVersion.objects.filter(pk=int(raw)).first() if raw and raw.isdigit() else None
