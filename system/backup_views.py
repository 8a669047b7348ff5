"""System › Backup: download the appliance as an encrypted archive, restore one, and the scheduled backups.

Every role sees the schedule's state; downloading, restoring and changing the schedule need the admin role. A
refused restore (a wrong passphrase, a damaged archive, a value this appliance refuses) shows each problem at its
place (status 400) and changes nothing.
"""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views import View

from farms.roles import ADMIN, RoleRequiredMixin

from .backup import services as backup
from .forms import BackupDownloadForm, BackupRestoreForm, BackupScheduleForm
from .models import BackupSchedule

FORMS = {"download": BackupDownloadForm, "restore": BackupRestoreForm, "schedule": BackupScheduleForm}


def _schedule_form(data=None) -> BackupScheduleForm:
    row = BackupSchedule.load()
    initial = {"enabled": row.enabled, "directory": row.directory, "interval_hours": row.interval_hours,
               "keep": row.keep}  # fmt: skip
    return BackupScheduleForm(data, initial=initial)


def _add_errors(form, exc: ValidationError) -> None:
    for field, problems in exc.message_dict.items():
        for problem in problems:
            form.add_error(field if field in form.fields else None, problem)


class BackupPageView(RoleRequiredMixin, View):
    write_role = ADMIN
    template_name = "system/backup.html"

    def page(self, request, status=200, **forms):
        context = {
            "download": forms.get("download") or BackupDownloadForm(),
            "restore": forms.get("restore") or BackupRestoreForm(),
            "schedule": forms.get("schedule") or _schedule_form(),
            "row": BackupSchedule.load(),
            "result": forms.get("result"),
        }
        return render(request, self.template_name, context, status=status)

    def get(self, request):
        return self.page(request)

    def post(self, request):
        action = request.POST.get("action")
        if action == "download":
            return self.download(request)
        if action == "restore":
            return self.restore(request)
        return self.schedule(request)

    def download(self, request):
        form = BackupDownloadForm(request.POST)
        if form.is_valid():
            try:
                data, name = backup.backup_create(passphrase=form.cleaned_data["passphrase"], actor=request.user)
            except ValidationError as exc:
                _add_errors(form, exc)
            else:
                response = HttpResponse(data, content_type="application/octet-stream")
                response["Content-Disposition"] = f'attachment; filename="{name}"'
                return response
        return self.page(request, 400, download=form)

    def restore(self, request):
        form = BackupRestoreForm(request.POST, request.FILES)
        result = None
        if form.is_valid():
            try:
                result = backup.backup_restore(
                    data=form.cleaned_data["archive"].read(),
                    passphrase=form.cleaned_data["passphrase"],
                    actor=request.user,
                )
            except ValidationError as exc:
                _add_errors(form, exc)
            else:
                if result.ok:
                    created = sum(c["created"] for c in result.counts.values())
                    updated = sum(c["updated"] for c in result.counts.values())
                    deleted = sum(c["deleted"] for c in result.counts.values())
                    messages.success(
                        request, f"Restored: {created} created, {updated} changed, {deleted} deleted. The worker "
                        "applies it now.",
                    )  # fmt: skip
                    return redirect("system:backup")
        return self.page(request, 400, restore=form, result=result)

    def schedule(self, request):
        form = _schedule_form(request.POST)
        if form.is_valid():
            values = dict(form.cleaned_data)
            values["passphrase"] = values["passphrase"] or None
            try:
                backup.schedule_update(actor=request.user, **values)
            except ValidationError as exc:
                _add_errors(form, exc)
            else:
                messages.success(request, "Backup schedule saved.")
                return redirect("system:backup")
        return self.page(request, 400, schedule=form)
