from django import forms

from farms.forms import FieldsetsMixin

from .models import FIELDS, KIND_FIELDS, SyslogServer


class SyslogServerForm(FieldsetsMixin, forms.ModelForm):
    """One syslog server: where, how, and which kinds of event it receives."""

    service_fields = FIELDS
    groups = (
        ("Server", ("name", "enabled", "host", "port", "transport")),
        ("TLS", ("ca_certificate", "peer_name")),
        ("Events sent", tuple(KIND_FIELDS)),
    )
    field_when = {"ca_certificate": {"transport": ["tls"]}, "peer_name": {"transport": ["tls"]}}

    class Meta:
        model = SyslogServer
        fields = list(FIELDS)
        widgets = {"ca_certificate": forms.Textarea(attrs={"rows": 6, "spellcheck": "false"})}

    def values(self) -> dict:
        return {name: getattr(self.instance, name) for name in FIELDS}
