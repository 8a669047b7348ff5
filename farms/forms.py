"""UI forms, built from the services' field lists: a field added to FARM_FIELDS appears here by itself.

Validation is the model's ``clean()`` (run by ModelForm on a copy of the object), so the pages show
the API's words next to the field at fault. Forms never save: the views call the services.
"""

from __future__ import annotations

from django import forms

from . import services
from .fields import strict_formfield
from .health_services import HEALTH_CHECK_FIELDS
from .models import Backend, Farm, HealthCheck, Policy

# How the farm form is laid out; a field in none of these groups lands in "Other options".
FARM_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Service", ("name", "description", "vip", "protocol", "ports", "state")),
    ("Balancing", ("mode", "scheduler", "sched_param", "persistence", "persist_ttl", "interface")),
    ("Source NAT", ("source_addr", "source_ports")),
    ("Limits", ("new_rtlimit", "new_rtlimit_burst", "rst_rtlimit", "est_connlimit", "limit_verdict")),
    ("Logging", ("log", "log_prefix", "log_rtlimit")),
    ("Connection tracking", ("helper", "tcp_strict", "intra_connect", "flow_offload")),
    ("Access policies", ("policies",)),
)
BACKEND_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Backend", ("address", "port", "weight", "state")),
    ("Advanced", ("priority", "est_connlimit", "mac")),
)


class FieldsetsMixin:
    """``form.fieldsets``: (title, bound fields) in the declared groups, then every other field."""

    groups: tuple[tuple[str, tuple[str, ...]], ...] = ()

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
        return result

    def values(self) -> dict:
        """The model fields as ``clean()`` left them on the instance (ports sorted, addresses normalised)."""
        return {name: getattr(self.instance, name) for name in self.service_fields}


class FarmForm(FieldsetsMixin, forms.ModelForm):
    """Every option of a farm, and its access policies."""

    groups = FARM_GROUPS
    service_fields = services.FARM_FIELDS

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
            "interface": "DSR interface",
        }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["policies"].queryset = Policy.objects.order_by("name")
        self.fields["policies"].help_text = "Deny or allow lists matched against the client's address." + (
            "" if self.fields["policies"].queryset.exists() else " None exists yet: create them on the Policies page."
        )

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
    groups = (
        ("Probe", ("type", "port", "interval", "timeout", "rise", "fall", "cut_connections")),
        ("HTTP / HTTPS", ("http_method", "http_path", "http_statuses", "http_body", "http_host", "tls_verify")),
        ("UDP", ("udp_send", "udp_expect")),
        ("Command", ("command",)),
    )

    class Meta:
        model = HealthCheck
        fields = list(HEALTH_CHECK_FIELDS)
