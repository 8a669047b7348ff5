"""Server-rendered pages of the farms app.

Reads are open to every role; configuration changes need the admin role, backend states the operator
role (:mod:`farms.roles`). Every edit page validates with the model's ``clean()`` through a ModelForm
and can show the exact nftables change before saving ("Preview"); every write calls a service with
the user as ``actor``, so it lands in the audit trail.
"""

from __future__ import annotations

import copy
import json

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.db.models import Count, Q
from django.http import HttpResponse, HttpResponseBadRequest
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views import View
from django.views.generic import DetailView, ListView

from monitoring.health import heartbeat

from . import config_io, health_services, preview, services
from .choices import BackendStateChoices
from .forms import BackendForm, ConfigImportForm, FarmForm, HealthCheckForm, PolicyForm
from .models import ApplyRun, AuditEvent, Backend, Farm, HealthCheck, Policy
from .roles import ADMIN, OPERATOR, RoleRequiredMixin

# The verb on a backend's one-click button for each state it can be put in (the label otherwise).
STATE_VERBS = {
    BackendStateChoices.ENABLED: "Enable",
    BackendStateChoices.DRAIN: "Drain",
    BackendStateChoices.DISABLED: "Disable",
}
PAGE_SIZE = 100


def state_actions(backend: Backend) -> list[dict]:
    """The one-click state buttons of a backend: one per other state of BackendStateChoices."""
    return [
        {"value": value, "verb": STATE_VERBS.get(value, label), "label": label}
        for value, label in BackendStateChoices.choices
        if value != backend.state
    ]


# -- farms --------------------------------------------------------------------------------------


class FarmListView(RoleRequiredMixin, ListView):
    """Every farm: state, VIP, mode, backends enabled/total, whether the kernel runs it, live rate."""

    template_name = "farms/farm_list.html"
    context_object_name = "farms"
    paginate_by = PAGE_SIZE

    def get_queryset(self):
        farms = Farm.objects.annotate(
            backends_total=Count("backends", distinct=True),
            backends_enabled=Count("backends", filter=Q(backends__state=BackendStateChoices.ENABLED), distinct=True),
        ).order_by("name")
        query = self.request.GET.get("q", "").strip()
        if query:
            farms = farms.filter(Q(name__icontains=query) | Q(vip__icontains=query) | Q(description__icontains=query))
        return farms

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        context["last_run"] = ApplyRun.objects.first()
        context["query"] = self.request.GET.get("q", "")
        context["healthd"] = heartbeat.read_status()
        return context


class FarmDetailView(RoleRequiredMixin, DetailView):
    """One farm: every option, its backends with one-click states, its apply status and its history."""

    queryset = Farm.objects.prefetch_related("backends", "policies")
    template_name = "farms/farm_detail.html"
    context_object_name = "farm"

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        farm = self.object
        form = FarmForm(instance=farm)
        context["options"] = [
            (title, [(f.label, _shown(farm, f.name)) for f in fields]) for title, fields in form.fieldsets()
        ]
        context["backends"] = [(b, state_actions(b)) for b in farm.backends.all()]
        context["events"] = AuditEvent.objects.filter(farm_ref=farm.pk)[:10]
        return context


def _shown(farm: Farm, name: str) -> str:
    if name == "policies":
        return ", ".join(p.name for p in farm.policies.all()) or "—"
    display = getattr(farm, f"get_{name}_display", None)
    value = display() if display else getattr(farm, name)
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value) if value not in ("", None) else "—"


class ObjectEditView(RoleRequiredMixin, View):
    """Create or edit one object: validate, optionally preview the kernel change, save through a service."""

    required_role = ADMIN
    template_name = "farms/object_edit.html"
    form_class = None
    noun = ""

    def get_object(self):
        return None

    def new_instance(self):
        return self.form_class._meta.model()

    def get_form(self, obj, data=None):
        return self.form_class(data, instance=copy.copy(obj) if obj is not None else self.new_instance())

    def preview(self, obj, form) -> preview.Preview | None:
        return None

    def save(self, obj, form):
        raise NotImplementedError

    def cancel_url(self, obj) -> str:
        raise NotImplementedError

    def done_url(self, saved) -> str:
        return self.cancel_url(saved)

    def render_form(self, obj, form, change_preview=None):
        context = {
            "form": form,
            "object": obj,
            "noun": self.noun,
            "title": f"Edit {self.noun} {obj}" if obj is not None else f"New {self.noun}",
            "preview": change_preview,
            "cancel_url": self.cancel_url(obj),
            "can_preview": type(self).preview is not ObjectEditView.preview,
        }
        return render(self.request, self.template_name, context)

    def get(self, request, *args, **kwargs):
        obj = self.get_object()
        return self.render_form(obj, self.get_form(obj))

    def post(self, request, *args, **kwargs):
        obj = self.get_object()
        form = self.get_form(obj, request.POST)
        if not form.is_valid():
            return self.render_form(obj, form)
        if "_preview" in request.POST:
            return self.render_form(obj, form, self.preview(obj, form))
        try:
            saved = self.save(obj, form)
        except ValidationError as exc:
            _add_errors(form, exc)
            return self.render_form(obj, form)
        messages.success(request, f"{self.noun.capitalize()} {saved} saved; the kernel follows in a moment.")
        return redirect(self.done_url(saved))


def _add_errors(form, exc: ValidationError) -> None:
    if hasattr(exc, "error_dict"):
        for name, errors in exc.error_dict.items():
            form.add_error(name if name in form.fields else None, errors)
    else:
        form.add_error(None, exc)


class FarmEditView(ObjectEditView):
    """Create a farm, or change any of its options."""

    form_class = FarmForm
    noun = "farm"

    def get_object(self):
        pk = self.kwargs.get("pk")
        return get_object_or_404(Farm, pk=pk) if pk else None

    def preview(self, obj, form):
        return preview.farm_change(obj, form.values(), form.chosen_policies)

    def save(self, obj, form):
        values, policies, actor = form.values(), form.chosen_policies, self.request.user
        if obj is None:
            return services.farm_create(policies=policies, actor=actor, **values)
        return services.farm_update(farm=obj, policies=policies, actor=actor, **values)

    def cancel_url(self, obj):
        return reverse("farms:farm_detail", args=[obj.pk]) if obj is not None else reverse("farms:farm_list")


class ObjectDeleteView(RoleRequiredMixin, View):
    """Confirm, with the kernel change it causes, then delete through a service."""

    required_role = ADMIN
    template_name = "farms/object_delete.html"
    noun = ""

    def get_object(self):
        raise NotImplementedError

    def preview(self, obj) -> preview.Preview | None:
        return None

    def delete(self, obj) -> None:
        raise NotImplementedError

    def cancel_url(self, obj) -> str:
        raise NotImplementedError

    def done_url(self, obj) -> str:
        raise NotImplementedError

    def render_page(self, obj, error: str = ""):
        context = {
            "object": obj,
            "noun": self.noun,
            "preview": self.preview(obj),
            "cancel_url": self.cancel_url(obj),
            "error": error,
        }
        return render(self.request, self.template_name, context)

    def get(self, request, *args, **kwargs):
        return self.render_page(self.get_object())

    def post(self, request, *args, **kwargs):
        obj = self.get_object()
        done, name = self.done_url(obj), str(obj)
        try:
            self.delete(obj)
        except ValidationError as exc:
            return self.render_page(obj, " ".join(exc.messages))
        messages.success(request, f"{self.noun.capitalize()} {name} deleted.")
        return redirect(done)


class FarmDeleteView(ObjectDeleteView):
    """Delete a farm and its backends."""

    noun = "farm"

    def get_object(self):
        return get_object_or_404(Farm, pk=self.kwargs["pk"])

    def preview(self, obj):
        return preview.farm_removal(obj)

    def delete(self, obj):
        services.farm_delete(farm=obj, actor=self.request.user)

    def cancel_url(self, obj):
        return reverse("farms:farm_detail", args=[obj.pk])

    def done_url(self, obj):
        return reverse("farms:farm_list")


# -- backends -----------------------------------------------------------------------------------


class BackendEditView(ObjectEditView):
    """Add a backend to a farm, or change one."""

    form_class = BackendForm
    noun = "backend"

    def get_object(self):
        pk = self.kwargs.get("pk")
        return get_object_or_404(Backend.objects.select_related("farm"), pk=pk) if pk else None

    def farm(self, obj) -> Farm:
        return obj.farm if obj is not None else get_object_or_404(Farm, pk=self.kwargs["farm_pk"])

    def new_instance(self):
        return Backend(farm=self.farm(None))

    def preview(self, obj, form):
        return preview.backend_change(self.farm(obj), obj, form.values())

    def save(self, obj, form):
        if obj is None:
            return services.backend_create(farm=self.farm(None), actor=self.request.user, **form.values())
        return services.backend_update(backend=obj, actor=self.request.user, **form.values())

    def cancel_url(self, obj):
        return reverse("farms:farm_detail", args=[self.farm(obj).pk])


class BackendDeleteView(ObjectDeleteView):
    """Remove a backend from its farm."""

    noun = "backend"

    def get_object(self):
        return get_object_or_404(Backend.objects.select_related("farm"), pk=self.kwargs["pk"])

    def preview(self, obj):
        return preview.backend_removal(obj)

    def delete(self, obj):
        services.backend_delete(backend=obj, actor=self.request.user)

    def cancel_url(self, obj):
        return reverse("farms:farm_detail", args=[obj.farm_id])

    done_url = cancel_url


class BackendStateView(RoleRequiredMixin, View):
    """One click: put a backend in a state of BackendStateChoices, or ``cut`` (disable and end its connections)."""

    required_role = OPERATOR
    http_method_names = ["post"]

    def post(self, request, pk: int):
        backend = get_object_or_404(Backend.objects.select_related("farm"), pk=pk)
        state = request.POST.get("state", "")
        try:
            if state == "cut":
                services.backend_maintenance(backend=backend, mode="cut", actor=request.user)
            elif state in BackendStateChoices.values:
                services.backend_update(backend=backend, state=state, actor=request.user)
            else:
                return HttpResponseBadRequest(f"unknown backend state '{state}'")
        except ValidationError as exc:
            messages.error(request, " ".join(exc.messages))
        else:
            messages.success(request, f"Backend {backend}: {backend.get_state_display()}.")
        return redirect(reverse("farms:farm_detail", args=[backend.farm_id]) + f"#backend-{backend.pk}")


class FarmRetryView(RoleRequiredMixin, View):
    """One click: apply an isolated farm again as it is (the worker otherwise waits for it to change)."""

    required_role = OPERATOR
    http_method_names = ["post"]

    def post(self, request, pk: int):
        farm = get_object_or_404(Farm, pk=pk)
        services.farm_retry(farm=farm, actor=request.user)
        messages.success(request, f"Farm {farm.name}: applying it again.")
        return redirect("farms:farm_detail", pk=farm.pk)


# -- policies -----------------------------------------------------------------------------------


class PolicyListView(RoleRequiredMixin, ListView):
    """Shared deny and allow lists, and the farms that use them."""

    queryset = Policy.objects.prefetch_related("farms").order_by("name")
    template_name = "farms/policy_list.html"
    context_object_name = "policies"
    paginate_by = PAGE_SIZE


class PolicyEditView(ObjectEditView):
    """Create or change a policy."""

    form_class = PolicyForm
    noun = "policy"

    def get_object(self):
        pk = self.kwargs.get("pk")
        return get_object_or_404(Policy, pk=pk) if pk else None

    def save(self, obj, form):
        if obj is None:
            return services.policy_create(actor=self.request.user, **form.values())
        return services.policy_update(policy=obj, actor=self.request.user, **form.values())

    def cancel_url(self, obj):
        return reverse("farms:policy_list")


class PolicyDeleteView(ObjectDeleteView):
    """Delete a policy no farm uses."""

    noun = "policy"

    def get_object(self):
        return get_object_or_404(Policy, pk=self.kwargs["pk"])

    def delete(self, obj):
        services.policy_delete(policy=obj, actor=self.request.user)

    def cancel_url(self, obj):
        return reverse("farms:policy_list")

    done_url = cancel_url


# -- history ------------------------------------------------------------------------------------


class ApplyRunListView(RoleRequiredMixin, ListView):
    """Every apply of the worker: generation, kind, duration, and the kernel's words when it failed."""

    template_name = "farms/applyrun_list.html"
    context_object_name = "runs"
    paginate_by = PAGE_SIZE

    def get_queryset(self):
        runs = ApplyRun.objects.all()
        if self.request.GET.get("failed"):
            runs = runs.filter(ok=False)
        return runs


class AuditEventListView(RoleRequiredMixin, ListView):
    """Who changed what and when, with before and after."""

    template_name = "farms/auditevent_list.html"
    context_object_name = "events"
    paginate_by = PAGE_SIZE
    filters = ("actor_name", "object_type", "action", "farm_ref")

    def get_queryset(self):
        events = AuditEvent.objects.all()
        for name in self.filters:
            value = self.request.GET.get(name)
            if value:
                events = events.filter(**{name: value})
        return events

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        context["active_filters"] = {n: self.request.GET[n] for n in self.filters if self.request.GET.get(n)}
        context["object_types"] = AuditEvent.objects.order_by().values_list("object_type", flat=True).distinct()
        context["actors"] = AuditEvent.objects.order_by().values_list("actor_name", flat=True).distinct()
        return context


# -- the whole configuration --------------------------------------------------------------------


class ConfigView(RoleRequiredMixin, View):
    """Export the whole configuration as one JSON file; import one (admins), all or nothing."""

    write_role = ADMIN
    template_name = "farms/config.html"

    def get(self, request):
        return render(request, self.template_name, {"form": ConfigImportForm()})

    def post(self, request):
        form = ConfigImportForm(request.POST, request.FILES)
        result = None
        if form.is_valid():
            try:
                document = json.loads(form.document_text())
            except json.JSONDecodeError as exc:
                form.add_error(None, f"Not JSON: {exc}")
            else:
                result = config_io.import_config(document, actor=request.user, dry_run=form.cleaned_data["dry_run"])
                if result.ok and not result.dry_run:
                    messages.success(request, "Configuration imported; the kernel follows in a moment.")
                    return redirect("farms:config")
        status = 200 if result is None or result.ok else 400
        return render(request, self.template_name, {"form": form, "result": result}, status=status)


class ConfigExportView(RoleRequiredMixin, View):
    """The configuration document as a file to download."""

    def get(self, request):
        body = json.dumps(config_io.export_config(), indent=2)
        response = HttpResponse(body, content_type="application/json")
        response["Content-Disposition"] = 'attachment; filename="lbweb-config.json"'
        return response


class HealthCheckEditView(ObjectEditView):
    """A farm's own health check (without one, its protocol's default applies)."""

    form_class = HealthCheckForm
    noun = "health check"

    def farm(self) -> Farm:
        return get_object_or_404(Farm, pk=self.kwargs["farm_pk"])

    def get_object(self):
        return HealthCheck.objects.filter(farm_id=self.kwargs["farm_pk"]).first()

    def new_instance(self):
        return HealthCheck.effective_for(self.farm())

    def save(self, obj, form):
        if obj is None:
            return health_services.health_check_create(farm=self.farm(), **form.values())
        return health_services.health_check_update(health_check=obj, **form.values())

    def cancel_url(self, obj):
        return reverse("farms:farm_detail", args=[self.kwargs["farm_pk"]])
