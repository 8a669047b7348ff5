"""The pages that create, change, delete a backend, set its state (one or many) and cut its connections."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpResponseBadRequest
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views import View

from lbweb.views import ObjectDeleteView, ObjectEditView, add_errors

from .. import preview, services
from ..choices import BackendStateChoices
from ..forms import BackendForm, BackendFormSet
from ..models import Backend, Farm
from ..roles import ADMIN, OPERATOR, RoleRequiredMixin
from .page_parts import clock_text, farm_page_context, open_connections


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
        if state == "cut":  # never in one click: the confirmation page says how many connections end
            return redirect("farms:backend_cut", pk=backend.pk)
        try:
            if state in BackendStateChoices.values:
                services.backend_update(backend=backend, state=state, actor=request.user)
            else:
                return HttpResponseBadRequest(f"unknown backend state '{state}'")
        except ValidationError as exc:
            messages.error(request, " ".join(exc.messages))
        else:
            messages.success(request, f"Backend {backend}: {backend.get_state_display()}.")
        return redirect(reverse("farms:farm_detail", args=[backend.farm_id]) + f"#backend-{backend.pk}")


class BackendCutView(RoleRequiredMixin, View):
    """Cut a backend: disable it and end its established connections now, after a confirmation that shows
    how many are open (the newest conntrack census). The worker records how many it ended in the audit."""

    required_role = OPERATOR
    template_name = "farms/backend_cut.html"

    def get(self, request, pk: int):
        backend = get_object_or_404(Backend.objects.select_related("farm"), pk=pk)
        connections, census_at = open_connections(backend.farm_id)
        context = {
            "backend": backend,
            "farm": backend.farm,
            "census_at": census_at,
            "census_at_text": clock_text(census_at),
            "connections": connections.get(backend.pk, 0 if census_at is not None else None),
        }
        return render(request, self.template_name, context)

    def post(self, request, pk: int):
        backend = get_object_or_404(Backend.objects.select_related("farm"), pk=pk)
        try:
            services.backend_maintenance(backend=backend, mode="cut", actor=request.user)
        except ValidationError as exc:
            messages.error(request, " ".join(exc.messages))
        else:
            messages.success(request, f"Backend {backend}: disabled; its connections are being ended.")
        return redirect(reverse("farms:farm_detail", args=[backend.farm_id]) + f"#backend-{backend.pk}")


class BackendBulkStateView(RoleRequiredMixin, View):
    """Several backends of a farm in one state at once (the checkboxes of the farm page)."""

    required_role = OPERATOR
    http_method_names = ["post"]

    def post(self, request, pk: int):
        farm = get_object_or_404(Farm, pk=pk)
        state = request.POST.get("state", "")
        ids = [int(i) for i in request.POST.getlist("backend") if i.isdigit()]
        chosen = list(farm.backends.filter(pk__in=ids))
        if not chosen:
            messages.error(request, "Choose the backends first (the boxes of the first column).")
            return redirect("farms:farm_detail", pk=farm.pk)
        try:
            changed = services.backends_set_state(backends=chosen, state=state, actor=request.user)
        except ValidationError as exc:
            messages.error(request, " ".join(exc.messages))
        else:
            label = dict(BackendStateChoices.choices).get(state, state).split(" (")[0].lower()
            names = ", ".join(str(b) for b in changed) or "none (all were already so)"
            messages.success(request, f"{label.capitalize()}: {names}.")
        return redirect(reverse("farms:farm_detail", args=[farm.pk]) + "#backends-title")


class FarmBackendsEditView(RoleRequiredMixin, View):
    """The farm page's backend editor: change, add ("Add another") and remove backends in one save, all or
    nothing, each change audited; "Preview" shows the kernel change of the whole edit first."""

    required_role = ADMIN
    http_method_names = ["post"]

    def post(self, request, pk: int):
        farm = get_object_or_404(Farm.objects.prefetch_related("backends", "policies"), pk=pk)
        formset = BackendFormSet(request.POST, farm=farm)
        if not formset.is_valid():
            return self.render(farm, formset)
        kept, removed, changed = [], [], []
        for form in formset.forms:
            if formset._should_delete_form(form):
                if form.instance.pk is not None:
                    removed.append(form.instance)
            elif form.instance.pk is not None or form.has_changed():
                kept.append(form.instance)
                if form.instance.pk is None or form.has_changed():
                    changed.append(form)
        if "_preview" in request.POST:
            return self.render(farm, formset, preview.backends_change(farm, kept))
        rows = [(form.instance if form.instance.pk is not None else None, form.values()) for form in changed]
        try:
            services.backends_edit(farm=farm, rows=rows, removed=removed, actor=request.user)
        except services.BackendRowsError as exc:
            for index, error in exc.rows.items():
                add_errors(changed[index], error)
            return self.render(farm, formset, status=400)
        count = len(changed) + len(removed)
        messages.success(request, f"Backends saved ({count} change{'s' if count != 1 else ''}); the kernel follows.")
        return redirect(reverse("farms:farm_detail", args=[farm.pk]) + "#backends-title")

    def render(self, farm: Farm, formset, change_preview=None, status: int | None = None):
        farm = Farm.objects.prefetch_related("backends", "policies").get(pk=farm.pk)  # as saved
        context = {"farm": farm, "object": farm, "backend_formset": formset, "preview": change_preview}
        context.update(farm_page_context(farm))
        status = status or (400 if not formset.is_valid() else 200)
        return render(self.request, "farms/farm_detail.html", context, status=status)
