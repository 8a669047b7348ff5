"""Server-rendered pages of the farms app.

Reads are open to every role; configuration changes need the admin role, backend states the operator
role (:mod:`farms.roles`). Every edit page validates with the model's ``clean()`` through a ModelForm
and can show the exact nftables change before saving ("Preview"); every write calls a service with
the user as ``actor``, so it lands in the audit trail.
"""

from __future__ import annotations

import json
import re

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.db.models import Count, Q
from django.http import HttpResponse, HttpResponseBadRequest
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views import View
from django.views.generic import DetailView, ListView

from lbweb import api_parsers, heartbeat
from lbweb.views import ObjectDeleteView, ObjectEditView, add_errors
from monitoring.store import metric_store

from . import config_io, health_services, liveness, preview, services
from .choices import BackendHealthChoices, BackendStateChoices, FarmModeChoices, FarmTrafficChoices
from .filtersets import AuditEventFilterSet
from .forms import (
    FARM_FIELD_WHEN,
    HEALTH_CHECK_FIELD_WHEN,
    BackendForm,
    BackendFormSet,
    ConfigImportForm,
    FarmForm,
    HealthCheckForm,
    NftlbImportForm,
    PolicyForm,
    applies,
)
from .models import ApplyRun, AuditEvent, Backend, Farm, HealthCheck, Policy
from .nftlb import nftlb_import
from .roles import ADMIN, OPERATOR, VIEWER, RoleRequiredMixin, has_role
from .specs import farm_spec, farm_traffic
from .summary import shares

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


def farm_page_context(farm: Farm) -> dict:
    """What the farm page shows besides the farm itself."""
    form = FarmForm(instance=farm)
    conditions = {name for when in FARM_FIELD_WHEN.values() for name in when}
    values = {name: getattr(farm, name) for name in conditions}
    options = []
    for title, fields in form.fieldsets():
        rows = [(f.label, _shown(farm, f.name)) for f in fields if applies(FARM_FIELD_WHEN.get(f.name), values)]
        if rows:
            options.append((title, rows))
    spec = farm_spec(farm)
    check = HealthCheck.effective_for(farm)
    check_values = {name: getattr(check, name) for name in ("type",)}
    first_port = farm.port_ranges[0][0] if farm.ports else None
    probed = "each backend's port" + (f", else {first_port}" if first_port else "")
    check_rows = [
        (f.label, probed if f.name == "port" and check.port is None else _shown(check, f.name))
        for _title, fields in HealthCheckForm(instance=check).fieldsets()
        for f in fields
        if f.name != "type" and applies(HEALTH_CHECK_FIELD_WHEN.get(f.name), check_values)
    ]
    connections, census_at = _open_connections(farm.pk)
    return {
        "options": options,
        "backends": backend_rows(farm, spec, connections),
        "events": AuditEvent.objects.filter(farm_ref=farm.pk)[:10],
        "healthd_words": healthd_words(heartbeat.read_status()),
        "check": check,
        "check_is_default": check.pk is None,
        "is_local": farm.mode == FarmModeChoices.LOCAL,
        "check_rows": check_rows,
        "traffic_words": traffic_words(farm, spec),
        "bulk_states": [(value, STATE_VERBS.get(value, label)) for value, label in BackendStateChoices.choices],
        "census_at": census_at,
    }


def _open_connections(farm_id: int) -> tuple[dict[int, int], float | None]:
    """Each backend's open connections from the newest census; nothing known when Redis is down."""
    try:
        return metric_store().open_connections(farm_id)
    except Exception:  # Redis down: the page says "—" or "not known", never 0
        return {}, None


def _clock(timestamp: float | None) -> str:
    """A census time as the server's local clock reads it, with its age."""
    if timestamp is None:
        return ""
    from datetime import datetime

    from django.utils import timezone

    moment = datetime.fromtimestamp(timestamp, tz=timezone.get_current_timezone())
    age = max(0, round(timezone.now().timestamp() - timestamp))
    return f"{moment:%H:%M:%S}, {age} s ago"


def _shown(obj, name: str) -> str:
    if name == "policies":
        return ", ".join(p.name for p in obj.policies.all()) or "—"
    display = getattr(obj, f"get_{name}_display", None)
    value = display() if display else getattr(obj, name)
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value) if value not in ("", None) else "—"


HEALTHD_STATES = {"impaired": "impaired", "stopped": "stopped", "never_seen": "not running", "unknown": "unknown"}


def healthd_words(status: dict) -> str:
    """The banner of the farm list and the farm page when health checking is not running as it should."""
    state = status.get("state")
    if state == "running":
        return ""
    words = f"Health checking {HEALTHD_STATES.get(state, state)}"
    detail = str(status.get("detail", "")).removeprefix(words.lower()).lstrip(": ")  # "stopped: stopped: ..." once
    return f"{words}: {detail}." if detail else f"{words}."


def traffic_words(farm: Farm, spec) -> str:
    """What new connections to the farm get now, in the words the compiler's rules would use."""
    traffic = spec.traffic
    if traffic == FarmTrafficChoices.BALANCED:
        count = len(spec.active_backends)
        return f"New connections are balanced over {count} backend{'s' if count != 1 else ''}."
    if traffic == FarmTrafficChoices.OFF:
        return "The farm is off: lbweb does not serve its VIP."
    if traffic == FarmTrafficChoices.LOCAL:
        return (
            "New connections go to the service listening on the VIP on the appliance itself, after the farm's "
            "policies and limits."
        )
    if traffic == FarmTrafficChoices.FALLBACK:
        return f"No backend takes new connections: they go to the fallback {farm.fallback_address}."
    why = "It has no backend" if not spec.backends else "No backend takes new connections"
    answer = "a TCP reset" if farm.protocol == "tcp" else "an ICMP port unreachable"
    return f"{why}: the farm rejects new connections ({answer})."


def backend_rows(farm: Farm, spec, connections: dict[int, int]) -> list[dict]:
    """Each backend with its state buttons, its health in words, and whether it takes new connections."""
    share = shares(spec)
    active = {b.id for b in spec.active_backends}
    eligible_priorities = [b.priority for b in spec.backends if b.eligible]
    rows = []
    for backend in farm.backends.all():
        if not spec.enabled:
            serving = "no: the farm is off"
        elif backend.state == BackendStateChoices.DISABLED:
            serving = "no: disabled"
        elif backend.health == BackendHealthChoices.DOWN:
            serving = "no: down"
        elif backend.state == BackendStateChoices.DRAIN:
            serving = "only clients bound by persistence (draining)"
        elif backend.pk in active:
            serving = f"yes: {share[backend.pk][1]} % of new connections"
        else:
            serving = f"standby: priority {backend.priority} waits while priority {min(eligible_priorities)} serves"
        rows.append(
            {
                "backend": backend,
                "actions": state_actions(backend),
                "serving": serving,
                "takes_traffic": backend.pk in active,
                "connections": connections.get(backend.pk),
            }
        )
    return rows


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
        connections, census_at = _open_connections(backend.farm_id)
        context = {
            "backend": backend,
            "farm": backend.farm,
            "census_at": census_at,
            "census_at_text": _clock(census_at),
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


# -- the whole configuration --------------------------------------------------------------------


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


class HealthCheckEditView(ObjectEditView):
    """A farm's own health check (without one, its protocol's default applies). Every role reads it; only
    admins change it (a ``command`` check runs a program)."""

    form_class = HealthCheckForm
    noun = "health check"
    required_role = VIEWER
    write_role = ADMIN

    def farm(self) -> Farm:
        return get_object_or_404(Farm, pk=self.kwargs["farm_pk"])

    def get_object(self):
        return HealthCheck.objects.filter(farm_id=self.kwargs["farm_pk"]).first()

    def new_instance(self):
        return HealthCheck.effective_for(self.farm())

    def page_title(self, obj) -> str:
        farm = obj.farm if obj is not None else self.farm()
        own = "" if obj is not None else f" (the {farm.protocol} default until it has its own)"
        return f"Health check of farm {farm.name}{own}"

    def save(self, obj, form):
        if obj is None:
            return health_services.health_check_create(farm=self.farm(), actor=self.request.user, **form.values())
        return health_services.health_check_update(health_check=obj, actor=self.request.user, **form.values())

    def cancel_url(self, obj):
        return reverse("farms:farm_detail", args=[self.kwargs["farm_pk"]])
