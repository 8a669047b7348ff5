"""UI forms, built from the services' field lists: a field added to FARM_FIELDS appears here by itself.

Validation is the model's ``clean()`` (run by ModelForm on a copy of the object), so the pages show
the API's words next to the field at fault. Forms never save: the views call the services.
"""

from __future__ import annotations

import json

from django import forms

from . import capabilities, services
from .choices import FarmModeChoices, FarmSchedulerChoices, PersistenceChoices
from .fields import strict_formfield
from .health_services import HEALTH_CHECK_FIELDS
from .models import Backend, Farm, HealthCheck, Policy

# How the farm form is laid out; a field in none of these groups lands in "Other options".
FARM_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Service", ("name", "description", "vip", "protocol", "ports", "state")),
    ("Balancing", ("mode", "scheduler", "sched_param", "persistence", "persist_ttl")),
    ("Direct server return", ("interface", "oface", "ether_addr")),
    ("Source NAT", ("source_addr", "source_ports")),
    ("When no backend is active", ("when_all_down", "fallback_address", "fallback_port")),
    (
        "Limits (per client address)",
        (
            "new_rtlimit",
            "new_rtlimit_unit",
            "new_rtlimit_burst",
            "rst_rtlimit",
            "rst_rtlimit_unit",
            "rst_rtlimit_burst",
            "limits_ttl",
            "est_connlimit",
            "limit_verdict",
        ),
    ),  # fmt: skip
    ("Logging", ("log", "log_forward", "log_output", "log_drops", "log_prefix", "log_rtlimit", "log_rtlimit_unit")),
    ("Routing", ("mark",)),
    ("Connection tracking", ("helper", "tcp_strict", "intra_connect", "flow_offload")),
    ("Monitoring", ("count_bytes",)),
    ("Access policies", ("policies",)),
)
# When a farm field means something: {other field: the values it must have}. The edit page shows the field
# only then (static/lbweb/edit.js; without JavaScript every field shows) and the detail page leaves it out
# otherwise. Where the page hides a field, the model refuses a value in it (farms/validation.py, with its
# words; tests/farms/test_ui_actions.py checks every combination), so hiding never hides an option that works.
NAT = [FarmModeChoices.SNAT, FarmModeChoices.DNAT]
FILTERED = [*NAT, FarmModeChoices.LOCAL]  # through conntrack: policies, limits, tcp-strict (local: to its socket)
LOGGED = [*FILTERED, FarmModeChoices.STATELESS_DNAT, FarmModeChoices.DSR]
SCHEDULED = [m for m in FarmModeChoices.values if m != FarmModeChoices.LOCAL]  # a local farm has no backends
PERSISTENT = [v for v in PersistenceChoices.values if v]
FARM_FIELD_WHEN: dict[str, dict[str, list]] = {
    "scheduler": {"mode": SCHEDULED},
    "sched_param": {"scheduler": [FarmSchedulerChoices.HASH, FarmSchedulerChoices.MAGLEV]},
    "persistence": {"mode": [*NAT, FarmModeChoices.DSR]},
    "persist_ttl": {"mode": [*NAT, FarmModeChoices.DSR], "persistence": PERSISTENT},
    "interface": {"mode": [FarmModeChoices.DSR]},
    "oface": {"mode": [FarmModeChoices.DSR]},
    "ether_addr": {"mode": [FarmModeChoices.DSR]},
    "source_addr": {"mode": [FarmModeChoices.SNAT]},
    "source_ports": {"mode": [FarmModeChoices.SNAT]},
    "when_all_down": {"mode": SCHEDULED},
    "new_rtlimit": {"mode": FILTERED},
    "new_rtlimit_unit": {"mode": FILTERED},
    "new_rtlimit_burst": {"mode": FILTERED},
    "limits_ttl": {"mode": FILTERED},
    "est_connlimit": {"mode": FILTERED},
    "rst_rtlimit": {"mode": FILTERED, "protocol": ["tcp"]},
    "rst_rtlimit_unit": {"mode": FILTERED, "protocol": ["tcp"]},
    "rst_rtlimit_burst": {"mode": FILTERED, "protocol": ["tcp"]},
    "limit_verdict": {"mode": FILTERED},
    "log": {"mode": LOGGED},
    "log_forward": {"mode": NAT},
    "log_output": {"mode": NAT},
    "log_drops": {"mode": FILTERED},
    "log_prefix": {"mode": LOGGED},
    "log_rtlimit": {"mode": LOGGED},
    "log_rtlimit_unit": {"mode": LOGGED},
    "mark": {"mode": NAT},
    "helper": {"mode": NAT},
    "tcp_strict": {"mode": FILTERED},
    "intra_connect": {"mode": FILTERED},
    "flow_offload": {"mode": NAT},
    "count_bytes": {"mode": FILTERED},  # the farms whose bytes lbweb counts (through conntrack's mark)
    "policies": {"mode": FILTERED},
    "fallback_address": {"when_all_down": ["fallback"]},
    "fallback_port": {"when_all_down": ["fallback"]},
}
HTTP_FIELDS = ("http_method", "http_path", "http_statuses", "http_body", "http_host")
PROBING = ["tcp", "http", "https", "udp", "icmp", "command"]
HEALTH_CHECK_FIELD_WHEN: dict[str, dict[str, list]] = {
    **{name: {"type": ["http", "https"]} for name in HTTP_FIELDS},
    "tls_verify": {"type": ["https"]},
    "udp_send": {"type": ["udp"]},
    "udp_expect": {"type": ["udp"]},
    "command": {"type": ["command"]},
    "port": {"type": ["tcp", "http", "https", "udp"]},
    **{name: {"type": PROBING} for name in ("interval", "timeout", "rise", "fall", "cut_connections")},
}


def applies(when: dict[str, list] | None, values: dict) -> bool:
    """Whether a field with the condition ``when`` means something for these values."""
    return not when or all(values.get(name) in allowed for name, allowed in when.items())


class LimitedSelect(forms.Select):
    """A select whose options the kernel lacks are disabled, their label saying why."""

    def __init__(self, *args, unavailable: dict[str, str] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.unavailable = unavailable or {}

    def create_option(self, name, value, label, selected, index, subindex=None, attrs=None):
        option = super().create_option(name, value, label, selected, index, subindex, attrs)
        reason = self.unavailable.get(str(value))
        if reason and not selected:
            option["attrs"]["disabled"] = True
            option["label"] = f"{label} — {reason}"
        return option


BACKEND_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Backend", ("address", "port", "weight", "state")),
    ("Advanced", ("priority", "est_connlimit", "mark", "source_addr", "mac", "oface")),
)


class FieldsetsMixin:
    """``form.fieldsets``: (title, bound fields) in the declared groups, then every other field.

    Every field's wrapper says when it applies (``field_when``, a JSON condition edit.js reads), whether
    it is required (marked), and the first field gets the focus when the page opens.
    """

    groups: tuple[tuple[str, tuple[str, ...]], ...] = ()
    field_when: dict[str, dict[str, list]] = {}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        first = next(iter(self.fields), None)
        if first is not None and not self.is_bound:
            self.fields[first].widget.attrs["autofocus"] = True
        for field in self.fields.values():
            if field.required and not isinstance(field, forms.BooleanField):
                field.widget.attrs["aria-required"] = "true"

    def when_json(self, name: str) -> str:
        when = self.field_when.get(name)
        return json.dumps(when) if when else ""

    def fieldsets(self) -> list[tuple[str, list[forms.BoundField]]]:
        placed: set[str] = set()
        result = []
        for title, names in self.groups:
            fields = [self[name] for name in names if name in self.fields]
            placed.update(names)
            if fields:
                result.append((title, fields))
        rest = [self[name] for name in self.fields if name not in placed]
        if rest:
            result.append(("Other options", rest))
        for _title, fields in result:
            for bound in fields:
                bound.when = self.when_json(bound.name)
        return result

    def values(self) -> dict:
        """The model fields as ``clean()`` left them on the instance (ports sorted, addresses normalised)."""
        return {name: getattr(self.instance, name) for name in self.service_fields}


class FarmForm(FieldsetsMixin, forms.ModelForm):
    """Every option of a farm, and its access policies."""

    groups = FARM_GROUPS
    service_fields = services.FARM_FIELDS
    field_when = FARM_FIELD_WHEN

    class Meta:
        model = Farm
        formfield_callback = strict_formfield
        fields = [*services.FARM_FIELDS, "policies"]
        widgets = {"policies": forms.CheckboxSelectMultiple, "description": forms.TextInput}
        labels = {
            "vip": "VIP",
            "sched_param": "Hash fields",
            "persist_ttl": "Persistence timeout",
            "source_addr": "SNAT source address",
            "source_ports": "SNAT source ports",
            "new_rtlimit": "New connections per second per client",
            "new_rtlimit_burst": "Burst of new connections",
            "rst_rtlimit": "TCP resets per second",
            "est_connlimit": "Established connections",
            "limit_verdict": "Beyond a limit",
            "log": "Log new connections",
            "log_rtlimit": "Log lines per second",
            "helper": "Conntrack helper",
            "tcp_strict": "TCP strict",
            "intra_connect": "Intra-connect",
            "flow_offload": "Flow offload",
            "count_bytes": "Count bytes",
            "interface": "DSR interface",
        }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["policies"].queryset = Policy.objects.order_by("name")
        self.fields["policies"].help_text = "Deny or allow lists matched against the client's address." + (
            "" if self.fields["policies"].queryset.exists() else " None exists yet: create them on the Policies page."
        )
        self.limit_to_kernel(capabilities.published() or {})

    def limit_to_kernel(self, known: dict[str, bool]) -> None:
        """Offer only what the kernel under the worker can do (as it probed it): the rest is disabled, saying why,
        instead of failing at apply. Nothing is known before the worker published: everything is offered."""
        if known.get("flowtable") is False and not self.instance.flow_offload:
            field = self.fields["flow_offload"]
            field.widget.attrs["disabled"] = True  # not offered; a value sent anyway meets the model's refusal
            field.help_text = (
                "Not available: this kernel has no flowtables (CONFIG_NF_FLOW_TABLE), as the worker found."
            )
        helpers = {
            value: "not in this kernel"
            for value, _label in self.fields["helper"].choices
            if value and known.get(f"helper-{value}") is False
        }
        if helpers:
            self.fields["helper"].widget = LimitedSelect(choices=self.fields["helper"].choices, unavailable=helpers)
        if known.get("reject-nat") is False:
            reason = "this kernel cannot reject in the NAT hook (Linux 5.2 and later can)"
            for name in ("limit_verdict", "when_all_down"):
                field = self.fields[name]
                field.widget = LimitedSelect(choices=field.choices, unavailable={"reject": reason})

    @property
    def chosen_policies(self) -> list[Policy]:
        return list(self.cleaned_data.get("policies") or [])


class BackendForm(FieldsetsMixin, forms.ModelForm):
    """A backend of one farm (the farm is fixed by the page)."""

    groups = BACKEND_GROUPS
    service_fields = services.BACKEND_FIELDS

    class Meta:
        model = Backend
        formfield_callback = strict_formfield
        fields = list(services.BACKEND_FIELDS)
        labels = {"est_connlimit": "Established connections", "mac": "MAC (DSR)"}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for name in backend_fields_not_for(self.instance.farm if self.instance.farm_id else None):
            self.fields.pop(name, None)


def backend_fields_not_for(farm: Farm | None) -> set[str]:
    """Backend fields that mean nothing for ``farm``: its model refuses a value there anyway."""
    if farm is None:
        return set()
    hidden = set()
    if farm.mode == FarmModeChoices.DSR or farm.protocol == "all":
        hidden.add("port")  # DSR forwards frames unchanged; a farm for all protocols keeps every port
    if farm.mode != FarmModeChoices.DSR:
        hidden |= {"mac", "oface"}
    else:
        hidden.add("mark")  # frames forwarded at layer 2 are never routed
    if farm.mode not in NAT:
        hidden.add("est_connlimit")
    if farm.mode != FarmModeChoices.SNAT:
        hidden.add("source_addr")
    return hidden


INLINE_BACKEND_FIELDS = ("address", "port", "weight", "priority", "state", "mac")


class BackendInlineForm(forms.ModelForm):
    """One row of the farm page's backend editor (the rest of a backend's fields: its own page)."""

    class Meta:
        model = Backend
        formfield_callback = strict_formfield
        fields = list(INLINE_BACKEND_FIELDS)
        labels = {"mac": "MAC (DSR)"}

    def __init__(self, *args, farm: Farm, **kwargs):
        super().__init__(*args, **kwargs)
        self.instance.farm = farm
        for name in backend_fields_not_for(farm):
            self.fields.pop(name, None)
        which = f"backend {self.instance}" if self.instance.pk else "the new backend"
        for field in self.fields.values():
            field.help_text = ""  # one line per backend: the column headers say what each field is
            field.widget.attrs["aria-label"] = f"{field.label} of {which}"

    def values(self) -> dict:
        return {name: getattr(self.instance, name) for name in INLINE_BACKEND_FIELDS if name in self.fields}


class BaseBackendFormSet(forms.BaseModelFormSet):
    def __init__(self, *args, farm: Farm, **kwargs):
        self.farm = farm
        super().__init__(*args, queryset=farm.backends.order_by("id"), prefix="backends", **kwargs)

    def get_form_kwargs(self, index):
        return {**super().get_form_kwargs(index), "farm": self.farm}

    def add_fields(self, form, index):
        super().add_fields(form, index)
        if "DELETE" in form.fields:
            which = f"backend {form.instance}" if form.instance.pk else "the new backend"
            form.fields["DELETE"].widget.attrs["aria-label"] = f"Remove {which}"

    @property
    def empty_form(self):
        form = self.form(auto_id=self.auto_id, prefix=self.add_prefix("__prefix__"), empty_permitted=True,
                         use_required_attribute=False, farm=self.farm, renderer=self.renderer)  # fmt: skip
        self.add_fields(form, None)
        return form

    def validate_unique(self):
        """Two rows for one address and port: said on the second row (the model checks the database)."""
        seen = set()
        for form in self.forms:
            if not form.has_changed() and form.instance.pk is None or self._should_delete_form(form):
                continue
            key = (form.cleaned_data.get("address"), form.cleaned_data.get("port"))
            if key in seen and key[0]:
                form.add_error("address", "This backend is in the list twice.")
            seen.add(key)


BackendFormSet = forms.modelformset_factory(
    Backend, form=BackendInlineForm, formset=BaseBackendFormSet, extra=1, can_delete=True
)


class PolicyForm(FieldsetsMixin, forms.ModelForm):
    """A shared deny or allow list."""

    service_fields = services.POLICY_FIELDS

    class Meta:
        model = Policy
        fields = list(services.POLICY_FIELDS)
        widgets = {"elements": forms.Textarea(attrs={"rows": 6})}


class ConfigImportForm(forms.Form):
    """A configuration document, uploaded as a file or pasted."""

    file = forms.FileField(required=False, label="Configuration file (JSON)")
    text = forms.CharField(required=False, label="… or paste it here", widget=forms.Textarea(attrs={"rows": 8}))
    dry_run = forms.BooleanField(required=False, initial=True, label="Only check it (change nothing)")

    def clean(self):
        data = super().clean()
        if not data.get("file") and not data.get("text", "").strip():
            raise forms.ValidationError("Choose a file or paste a configuration.")
        return data

    def document_text(self) -> str:
        upload = self.cleaned_data.get("file")
        if upload:
            return upload.read().decode("utf-8", errors="replace")
        return self.cleaned_data["text"]


class NftlbImportForm(ConfigImportForm):
    """An nftlb (or SKUDONET L4) JSON document; all or nothing, or every valid farm alone."""

    file = forms.FileField(required=False, label="nftlb document (JSON)")
    partial = forms.BooleanField(
        required=False,
        label="Import every valid farm and policy, each whole, and list the others (otherwise: all or nothing)",
    )


class HealthCheckForm(FieldsetsMixin, forms.ModelForm):
    """How healthd probes one farm's backends."""

    service_fields = HEALTH_CHECK_FIELDS
    field_when = HEALTH_CHECK_FIELD_WHEN
    groups = (
        ("Probe", ("type", "port", "interval", "timeout", "rise", "fall", "cut_connections")),
        ("HTTP / HTTPS", ("http_method", "http_path", "http_statuses", "http_body", "http_host", "tls_verify")),
        ("UDP", ("udp_send", "udp_expect")),
        ("Command", ("command",)),
    )

    class Meta:
        model = HealthCheck
        fields = list(HEALTH_CHECK_FIELDS)
        labels = {
            "type": "Check",
            "http_method": "HTTP method",
            "http_path": "HTTP path",
            "http_statuses": "HTTP statuses",
            "http_body": "HTTP body contains",
            "http_host": "HTTP host",
            "tls_verify": "TLS verify",
            "udp_send": "UDP payload",
            "udp_expect": "UDP reply contains",
            "cut_connections": "Cut connections when down",
        }
