"""Forms of the HTTP farm pages: certificates, a farm's HTTP options, its services and its backends' options.

ModelForms over the rows ``l7/services.py`` writes, so the pages refuse what the API refuses with the same words
(the models' ``clean()``); the views save through the services (audited, one apply after commit)."""

from __future__ import annotations

from django import forms

from farms.forms import FieldsetsMixin

from . import services
from .choices import PersistenceChoices
from .models import Certificate, HttpService, L7Backend, L7Farm

PEM = forms.Textarea(attrs={"rows": 8, "spellcheck": "false", "class": "mono"})
JSON = forms.Textarea(attrs={"rows": 3, "spellcheck": "false", "class": "mono"})


class CertificateForm(FieldsetsMixin, forms.ModelForm):
    """A certificate uploaded as PEM (a fullchain file may go whole into the certificate field)."""

    service_fields = ("name", "certificate", "chain", "private_key", "acme_domains")

    class Meta:
        model = Certificate
        fields = ["name", "certificate", "chain", "private_key", "acme_domains"]
        widgets = {"certificate": PEM, "chain": PEM, "private_key": forms.Textarea(attrs={"rows": 6, "class": "mono"})}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["private_key"].strip = False
        if self.instance.pk:
            self.initial["private_key"] = ""  # a stored key is never sent back to the browser
            self.fields["name"].disabled = True


class SelfSignedForm(forms.Form):
    """A new key and a certificate it signs itself, for testing or an internal service."""

    name = forms.SlugField(max_length=64, widget=forms.TextInput(attrs={"autofocus": True}))
    names = forms.CharField(label="Host names", help_text="Space separated, e.g. shop.example.com www.example.com")

    def fieldsets(self):
        return [("Self-signed certificate", [self["name"], self["names"]])]


class HttpOptionsForm(FieldsetsMixin, forms.ModelForm):
    """An HTTP farm's options and the certificates it offers."""

    groups = (
        ("Certificates", ("certificates", "default_certificate", "redirect_ports", "hsts_max_age", "http2")),
        ("Requests", ("forwarded_headers", "headers", "redirects", "error_pages")),
        ("Retries", ("retry_on", "retries", "redispatch")),
        ("PROXY protocol from the load balancers in front", ("accept_proxy", "proxy_trusted")),
        (
            "Timeouts (seconds)",
            (
                "timeout_client", "timeout_server", "timeout_connect", "timeout_http_request", "timeout_keep_alive",
                "timeout_tunnel",
            ),
        ),
    )  # fmt: skip
    field_when = {"proxy_trusted": {"accept_proxy": [True]}}
    service_fields = services.L7FARM_FIELDS

    class Meta:
        model = L7Farm
        fields = [*services.L7FARM_FIELDS, "certificates"]
        widgets = {"headers": JSON, "redirects": JSON, "error_pages": JSON}


class HttpServiceForm(FieldsetsMixin, forms.ModelForm):
    """A service: requests chosen by host and path prefix, with their scheduler and persistence."""

    groups = (
        ("Which requests", ("name", "position", "hosts", "host_regex", "path_prefix")),
        ("Backends", ("scheduler", "persistence", "persistence_ttl", "persistence_header", "cookie_name")),
        ("Queue and reuse", ("queue_timeout", "reuse", "headers")),
    )
    field_when = {
        "persistence_ttl": {"persistence": [value for value in PersistenceChoices.values if value]},
        "persistence_header": {"persistence": [PersistenceChoices.HEADER.value]},
        "cookie_name": {"persistence": [PersistenceChoices.COOKIE.value]},
    }
    service_fields = services.SERVICE_FIELDS

    class Meta:
        model = HttpService
        fields = list(services.SERVICE_FIELDS)
        widgets = {"headers": JSON}


class BackendOptionsForm(FieldsetsMixin, forms.ModelForm):
    """What a backend of an HTTP farm has beyond an L4 backend: its service, declared capacity, TLS."""

    field_when = {"tls_verify": {"tls": [True]}, "tls_sni": {"tls": [True]}}
    service_fields = services.BACKEND_OPTION_FIELDS

    class Meta:
        model = L7Backend
        fields = list(services.BACKEND_OPTION_FIELDS)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["service"].queryset = HttpService.objects.filter(farm_id=self.instance.backend.farm_id)
        self.fields["service"].empty_label = "default (requests no service matched)"
        self.fields["service"].label_from_instance = lambda service: service.name
