"""The whole configuration: import (lbweb's document, nftlb's) and export."""

from __future__ import annotations

import json

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views import View

from lbweb import api_parsers

from .. import config_io
from ..forms import ConfigImportForm, NftlbImportForm
from ..nftlb import nftlb_import
from ..roles import ADMIN, RoleRequiredMixin


class DocumentImportView(RoleRequiredMixin, View):
    """A page that imports an uploaded or pasted JSON document (admins): the form, the JSON parse, the import's
    report with status 400 when it refused. Subclasses say which form and which import."""

    write_role = ADMIN
    form_class: type  # a form with document_text() and dry_run
    template_name: str

    def import_document(self, document, data: dict, user):
        raise NotImplementedError

    def imported(self, result) -> HttpResponse | None:
        """What follows a successful import: None shows the report on the page."""
        return None

    def get(self, request):
        return render(request, self.template_name, {"form": self.form_class()})

    def post(self, request):
        form = self.form_class(request.POST, request.FILES)
        result = None
        if form.is_valid():
            try:
                document = api_parsers.loads(form.document_text())
            except ValueError as exc:  # malformed, or nested deeper than any document lbweb takes
                form.add_error(None, f"Not JSON: {exc}")
            else:
                result = self.import_document(document, form.cleaned_data, request.user)
                if result.ok and not result.dry_run and (follow := self.imported(result)) is not None:
                    return follow
        status = 200 if result is None or result.ok else 400
        return render(request, self.template_name, {"form": form, "result": result}, status=status)


class ConfigView(DocumentImportView):
    """Export the whole configuration as one JSON file; import one (admins), all or nothing."""

    form_class = ConfigImportForm
    template_name = "farms/config.html"

    def import_document(self, document, data: dict, user):
        return config_io.import_config(document, actor=user, dry_run=data["dry_run"])

    def imported(self, result) -> HttpResponse:
        messages.success(self.request, "Configuration imported; the kernel follows in a moment.")
        return redirect("farms:config")


class NftlbImportPageView(DocumentImportView):
    """Import an nftlb document (admins): all or nothing, or partial; the report says what lbweb does
    otherwise than nftlb, what it leaves out and, for a partial import, what it skipped and why."""

    form_class = NftlbImportForm
    template_name = "farms/nftlb_import.html"

    def import_document(self, document, data: dict, user):
        return nftlb_import(document=document, dry_run=data["dry_run"], partial=data["partial"], actor=user)


class ConfigExportView(RoleRequiredMixin, View):
    """The configuration document as a file to download."""

    def get(self, request):
        body = json.dumps(config_io.export_config(), indent=2)
        response = HttpResponse(body, content_type="application/json")
        response["Content-Disposition"] = 'attachment; filename="lbweb-config.json"'
        return response
