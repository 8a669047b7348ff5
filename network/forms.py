"""Forms of System > Network: the models' own validation (``clean()``) runs in them and in the services."""

from __future__ import annotations

from django import forms

from .models import Address, Interface, NetworkSettings, Route
from .services import INTERFACE_FIELDS, ROUTE_FIELDS, SETTINGS_FIELDS


class InterfaceForm(forms.ModelForm):
    class Meta:
        model = Interface
        fields = INTERFACE_FIELDS
        labels = {"mtu": "MTU", "bond": "Member of bond", "enabled": "Up"}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["parent"].queryset = Interface.objects.exclude(kind="vlan")
        self.fields["parent"].label_from_instance = lambda i: i.name
        self.fields["bond"].label_from_instance = lambda i: i.name

    def values(self) -> dict:
        return {name: self.cleaned_data[name] for name in INTERFACE_FIELDS}


class AddressForm(forms.ModelForm):
    class Meta:
        model = Address
        fields = ("interface", "address")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["interface"].queryset = Interface.objects.filter(bond=None)
        self.fields["interface"].label_from_instance = lambda i: i.name
        self.fields["address"].widget.attrs["placeholder"] = "198.18.0.10/24"


class RouteForm(forms.ModelForm):
    class Meta:
        model = Route
        fields = ROUTE_FIELDS

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["interface"].label_from_instance = lambda i: i.name
        self.fields["destination"].widget.attrs["placeholder"] = "default, or 198.18.64.0/18"

    def values(self) -> dict:
        return {name: self.cleaned_data[name] for name in ROUTE_FIELDS}


class SettingsForm(forms.ModelForm):
    class Meta:
        model = NetworkSettings
        fields = SETTINGS_FIELDS
        labels = {"dns_servers": "DNS servers", "search_domains": "Search domains", "ntp_servers": "NTP servers"}

    def values(self) -> dict:
        return {name: self.cleaned_data[name] for name in SETTINGS_FIELDS}
