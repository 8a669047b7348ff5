"""The farms' list and page, and the pages that create, change, delete and retry a farm."""

from __future__ import annotations

from django.contrib import messages
from django.db.models import Count, Q
from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse
from django.views import View
from django.views.generic import DetailView, ListView

from lbweb import heartbeat
from lbweb.views import ObjectDeleteView, ObjectEditView

from .. import preview, services
from ..choices import BackendStateChoices
from ..forms import BackendFormSet, FarmForm
from ..models import ApplyRun, Farm
from ..roles import ADMIN, OPERATOR, RoleRequiredMixin, has_role
from ..specs import farm_traffic
from .page_parts import PAGE_SIZE, farm_page_context, healthd_words


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
        context["farms"] = list(context["farms"])
        for farm in context["farms"]:
            farm.traffic_now = farm_traffic(farm)
        context["last_run"] = ApplyRun.objects.first()
        context["query"] = self.request.GET.get("q", "")
        context["healthd"] = heartbeat.read_status()
        context["healthd_words"] = healthd_words(context["healthd"])
        return context


class FarmDetailView(RoleRequiredMixin, DetailView):
    """One farm: what happens to new connections, its backends with their health and one-click states (one
    by one or several at once), its health check, every option that applies, its apply status and history.
    Admins edit the backends inline ("Add another")."""

    queryset = Farm.objects.prefetch_related("backends", "policies")
    template_name = "farms/farm_detail.html"
    context_object_name = "farm"

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        farm = self.object
        context.update(farm_page_context(farm))
        if has_role(self.request.user, ADMIN) and "backend_formset" not in kwargs:
            context["backend_formset"] = BackendFormSet(farm=farm)
        return context


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


class FarmRetryView(RoleRequiredMixin, View):
    """One click: apply an isolated farm again as it is (the worker otherwise waits for it to change)."""

    required_role = OPERATOR
    http_method_names = ["post"]

    def post(self, request, pk: int):
        farm = get_object_or_404(Farm, pk=pk)
        services.farm_retry(farm=farm, actor=request.user)
        messages.success(request, f"Farm {farm.name}: applying it again.")
        return redirect("farms:farm_detail", pk=farm.pk)
