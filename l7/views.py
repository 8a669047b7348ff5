"""The HTTP farms page: services and backends with sessions in use against declared capacity, queue and time in
queue (from the collector's newest sample), and the certificates with their expiry (a warning ahead of time); and
the pages that edit what the API edits: certificates, a farm's HTTP options, its services, its backends' options.

The edit pages are ``lbweb.views``' ObjectEditView and ObjectDeleteView (admins write, the same form template and
confirmation as every app's), saving through ``l7/services.py``."""

from __future__ import annotations

import logging

from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin
from django.core.exceptions import ValidationError
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.generic import TemplateView

from farms.choices import L7_MODES
from farms.models import Backend, Farm
from farms.roles import ADMIN, RoleRequiredMixin
from lbweb.views import ObjectDeleteView, ObjectEditView, add_errors

from . import services
from .forms import BackendOptionsForm, CertificateForm, HttpOptionsForm, HttpServiceForm, SelfSignedForm
from .models import Certificate, HttpService, L7Backend, L7Farm

log = logging.getLogger("lbweb.l7")
FARM_FIGURES = (
    "requests",
    "retries",
    "responses_2xx",
    "responses_4xx",
    "responses_5xx",
    "latency_ms",
    "sessions",
    "queue",
    "backends",
)
BACKEND_FIGURES = ("sessions", "queue", "queue_time_ms")


def latest_http_figures() -> dict[int, dict]:
    """farm id -> its newest entry (long names) from the collector, {} when there is none."""
    try:
        from monitoring.store import decode_farm_fields, metric_store

        latest = metric_store().latest() or {}
    except Exception as exc:  # Redis down: the page shows the configuration without live figures
        log.debug("no metrics: %s", exc)
        return {}
    return {int(fid): decode_farm_fields(fields) for fid, fields in (latest.get("farms") or {}).items()}


class HttpFarmsView(LoginRequiredMixin, TemplateView):
    template_name = "l7/http_farms.html"

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        figures = latest_http_figures()
        farms = (
            Farm.objects.filter(mode__in=L7_MODES)
            .prefetch_related("backends__l7__service", "http_services")
            .select_related("l7")
            .order_by("name")
        )
        rows = []
        for farm in farms:
            live = dict.fromkeys(FARM_FIGURES) | figures.get(farm.id, {})  # "—" where nothing was measured
            backends = []
            for backend in farm.backends.all():
                options = getattr(backend, "l7", None)
                backends.append(
                    {
                        "backend": backend,
                        "service": options.service.name if options and options.service else "default",
                        "capacity": options.capacity if options else None,
                        "options": options,
                        "live": dict.fromkeys(BACKEND_FIGURES) | (live["backends"] or {}).get(str(backend.id), {}),
                    }
                )
            rows.append({"farm": farm, "live": live, "backends": backends, "services": farm.http_services.all()})
        context["farms"] = rows
        context["certificates"] = Certificate.objects.order_by("not_after")
        return context


def certificate_context(request) -> dict:
    """``certificate_alerts``: certificates expired or within LBWEB_CERT_WARN_DAYS of their end, on every page."""
    if not getattr(getattr(request, "user", None), "is_authenticated", False):
        return {}
    from django.conf import settings
    from django.utils import timezone

    soon = timezone.now() + timezone.timedelta(days=settings.LBWEB_CERT_WARN_DAYS)
    alerts = []
    for cert in Certificate.objects.filter(not_after__lte=soon).order_by("not_after"):
        days = cert.days_left
        alerts.append(
            f"Certificate {cert.name} expired on {cert.not_after:%Y-%m-%d}"
            if days < 0
            else f"Certificate {cert.name} expires in {days} day{'s' if days != 1 else ''} ({cert.not_after:%Y-%m-%d})"
        )
    return {"certificate_alerts": alerts}


def _http_farm_or_404(pk: int) -> Farm:
    return get_object_or_404(Farm, pk=pk, mode__in=L7_MODES)


def _http_page(anchor: str = "") -> str:
    return reverse("l7:http_farms") + (f"#{anchor}" if anchor else "")


class CertificateEditView(ObjectEditView):
    """Upload a certificate, or replace one (a renewal: the farms offering it are applied again)."""

    form_class = CertificateForm
    noun = "certificate"

    def get_object(self):
        pk = self.kwargs.get("pk")
        return get_object_or_404(Certificate, pk=pk) if pk else None

    def save(self, obj, form):
        values = {name: form.cleaned_data[name] for name in ("certificate", "chain", "private_key", "acme_domains")}
        if obj is None:
            return services.certificate_create(actor=self.request.user, name=form.cleaned_data["name"], **values)
        return services.certificate_update(target=obj, actor=self.request.user, **values)

    def cancel_url(self, obj):
        return _http_page("certificates")


class SelfSignedCertificateView(RoleRequiredMixin, TemplateView):
    """Generate a key and a self-signed certificate for some host names."""

    required_role = ADMIN
    template_name = "farms/object_edit.html"

    def render_form(self, form):
        context = {"form": form, "title": "New self-signed certificate", "cancel_url": _http_page("certificates")}
        return render(self.request, self.template_name, context)

    def get(self, request, *args, **kwargs):
        return self.render_form(SelfSignedForm())

    def post(self, request, *args, **kwargs):
        form = SelfSignedForm(request.POST)
        if form.is_valid():
            try:
                made = services.certificate_self_signed(
                    name=form.cleaned_data["name"], names=form.cleaned_data["names"].split(), actor=request.user
                )
            except ValidationError as exc:
                add_errors(form, exc)
            else:
                messages.success(request, f"Certificate {made} made for {', '.join(made.names)}.")
                return redirect(_http_page("certificates"))
        return self.render_form(form)


class CertificateDeleteView(ObjectDeleteView):
    """Delete a certificate no farm offers."""

    noun = "certificate"

    def get_object(self):
        return get_object_or_404(Certificate, pk=self.kwargs["pk"])

    def delete(self, obj):
        services.certificate_delete(target=obj, actor=self.request.user)

    def cancel_url(self, obj):
        return _http_page("certificates")

    done_url = cancel_url


class HttpOptionsEditView(ObjectEditView):
    """An HTTP farm's options and certificates."""

    form_class = HttpOptionsForm
    noun = "HTTP options of farm"  # saved: the farm

    def get_object(self):
        farm = _http_farm_or_404(self.kwargs["farm"])
        return L7Farm.objects.filter(farm=farm).first() or L7Farm(farm=farm)

    def page_title(self, obj) -> str:
        return f"HTTP options of farm {obj.farm}"

    def save(self, obj, form):
        values = form.values()
        services.farm_options_update(
            farm=obj.farm, actor=self.request.user, certificates=list(form.cleaned_data["certificates"]), **values
        )
        return obj.farm

    def cancel_url(self, obj):
        return _http_page(f"farm-{obj.farm_id}")

    def done_url(self, saved):
        return _http_page(f"farm-{saved.pk}")


class HttpServiceEditView(ObjectEditView):
    """Add a service to an HTTP farm, or change one."""

    form_class = HttpServiceForm
    noun = "service"

    def get_object(self):
        pk = self.kwargs.get("pk")
        return get_object_or_404(HttpService, pk=pk) if pk else None

    def new_instance(self):
        return HttpService(farm=_http_farm_or_404(self.kwargs["farm"]))

    def save(self, obj, form):
        if obj is None:
            return services.service_create(farm=form.instance.farm, actor=self.request.user, **form.values())
        return services.service_update(service=obj, actor=self.request.user, **form.values())

    def cancel_url(self, obj):
        farm_id = obj.farm_id if obj is not None else self.kwargs["farm"]
        return _http_page(f"farm-{farm_id}")


class HttpServiceDeleteView(ObjectDeleteView):
    """Delete a service; its backends go back to the farm's default service."""

    noun = "service"

    def get_object(self):
        return get_object_or_404(HttpService, pk=self.kwargs["pk"])

    def delete(self, obj):
        services.service_delete(service=obj, actor=self.request.user)

    def cancel_url(self, obj):
        return _http_page(f"farm-{obj.farm_id}")

    done_url = cancel_url


class BackendOptionsEditView(ObjectEditView):
    """A backend's service, declared capacity and TLS."""

    form_class = BackendOptionsForm
    noun = "HTTP options of backend"  # saved: the backend

    def get_object(self):
        backend = get_object_or_404(Backend, pk=self.kwargs["pk"], farm__mode__in=L7_MODES)
        return L7Backend.objects.filter(backend=backend).first() or L7Backend(backend=backend)

    def page_title(self, obj) -> str:
        return f"HTTP options of backend {obj.backend}"

    def save(self, obj, form):
        services.backend_options_update(backend=obj.backend, actor=self.request.user, **form.values())
        return obj.backend

    def cancel_url(self, obj):
        return _http_page(f"backend-{obj.backend_id}")

    def done_url(self, saved):
        return _http_page(f"backend-{saved.pk}")
