"""Pages of the system app: System › TLS certificate (every role reads it, admins replace it)."""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import redirect, render
from django.views import View

from farms.roles import ADMIN, RoleRequiredMixin

from . import services, tls
from .forms import CertificateUploadForm


class CertificateView(RoleRequiredMixin, View):
    """The certificate the web server presents now, and the form that replaces it.

    A refused upload shows each problem next to its field (status 400) and changes nothing.
    """

    write_role = ADMIN
    template_name = "system/tls.html"

    def get(self, request):
        return render(request, self.template_name, {"current": tls.current(), "form": CertificateUploadForm()})

    def post(self, request):
        form = CertificateUploadForm(request.POST, request.FILES)
        if form.is_valid():
            try:
                new = services.certificate_replace(
                    certificate=form.pem("certificate"),
                    chain=form.pem("chain"),
                    key=form.pem("key"),
                    actor=request.user,
                )
            except tls.CertificateError as error:
                for field, problems in error.errors.items():
                    for problem in problems:
                        form.add_error(field, problem)
            else:
                messages.success(request, f"Certificate replaced: {new.subject}. New connections get it now.")
                return redirect("system:tls")
        return render(request, self.template_name, {"current": tls.current(), "form": form}, status=400)
