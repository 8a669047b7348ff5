"""System > Network: the interfaces, addresses, routes, DNS and NTP lbweb manages, beside what the
kernel has (as the worker last read it). Every role reads; admins change. Nothing here touches the
kernel: the services write the database and the worker applies.

A change that would cut the address this page was loaded through comes back with the reason and a
button that sends the same change again, confirmed.
"""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views import View

from farms.roles import ADMIN, RoleRequiredMixin
from lbweb.views import ObjectEditView

from . import selectors, services
from .forms import AddressForm, InterfaceForm, RouteForm, SettingsForm
from .models import Address, Interface, NetworkSettings, Route


def _confirmed(request) -> bool:
    return request.POST.get("confirm") == "1"


def _confirmation(request, exc: ValidationError) -> dict | None:
    """The question to ask again when a service refused a change because it cuts the management address: its
    words and the request's data, sent again with ``confirm=1`` if the admin confirms."""
    errors = exc.message_dict if hasattr(exc, "error_dict") else {}
    return {"message": errors["confirm"][0], "data": request.POST} if "confirm" in errors else None


class NetworkView(RoleRequiredMixin, View):
    write_role = ADMIN
    template_name = "network/network.html"

    def context(self, request, **forms) -> dict:
        observed = selectors.observed()
        managed = {i.name for i in Interface.objects.all()}
        management = services.Management.of(request)
        seen = {link["name"]: link for link in (observed or {}).get("links", [])}
        interfaces = Interface.objects.select_related("parent", "bond").prefetch_related("addresses", "vlans")
        return {
            "rows": [(i, seen.get(i.name)) for i in interfaces],
            "settings": NetworkSettings.load(),
            "interfaces": Interface.objects.select_related("parent", "bond").prefetch_related("addresses", "vlans"),
            "routes": Route.objects.select_related("interface"),
            "observed": observed,
            "observed_by_name": {link["name"]: link for link in (observed or {}).get("links", [])},
            "unmanaged": [
                link
                for link in (observed or {}).get("links", [])
                if link["name"] not in managed and link["name"] != "lo"
            ],
            "management": management,
            "interface_form": forms.get("interface_form") or InterfaceForm(prefix="if"),
            "address_form": forms.get("address_form") or AddressForm(prefix="addr"),
            "route_form": forms.get("route_form") or RouteForm(prefix="route"),
            "settings_form": forms.get("settings_form") or SettingsForm(instance=NetworkSettings.load(), prefix="dns"),
            "confirm": forms.get("confirm"),
        }

    def get(self, request):
        initial = {"name": request.GET["manage"], "kind": "ethernet"} if request.GET.get("manage") else None
        forms = {"interface_form": InterfaceForm(prefix="if", initial=initial)} if initial else {}
        return render(request, self.template_name, self.context(request, **forms))

    def post(self, request):
        action = request.POST.get("action", "")
        handler = getattr(self, f"do_{action}", None)
        if handler is None:
            return redirect("network:network")
        try:
            outcome = handler(request)
        except ValidationError as exc:
            confirm = _confirmation(request, exc)
            if confirm is not None:
                return render(request, self.template_name, self.context(request, confirm=confirm), status=409)
            messages.error(request, " ".join(exc.messages))
            return redirect("network:network")
        if isinstance(outcome, dict):  # a form with errors: shown where it is
            return render(request, self.template_name, self.context(request, **outcome), status=400)
        messages.success(request, f"{outcome}. The worker applies it in a moment.")
        return redirect("network:network")

    def do_interface_add(self, request):
        form = InterfaceForm(request.POST, prefix="if")
        if not form.is_valid():
            return {"interface_form": form}
        interface = services.interface_create(actor=request.user, **form.values())
        return f"Interface {interface} added"

    def do_interface_delete(self, request):
        interface = get_object_or_404(Interface, pk=request.POST.get("pk"))
        services.interface_delete(
            interface=interface,
            management=services.Management.of(request),
            confirm=_confirmed(request),
            actor=request.user,
        )
        return f"Interface {interface.name} no longer managed"

    def do_interface_toggle(self, request):
        interface = get_object_or_404(Interface, pk=request.POST.get("pk"))
        services.interface_update(
            interface=interface,
            enabled=not interface.enabled,
            management=services.Management.of(request),
            confirm=_confirmed(request),
            actor=request.user,
        )
        return f"Interface {interface.name} set {'up' if interface.enabled else 'down'}"

    def do_address_add(self, request):
        form = AddressForm(request.POST, prefix="addr")
        if not form.is_valid():
            return {"address_form": form}
        address = services.address_create(
            interface=form.cleaned_data["interface"], address=form.cleaned_data["address"], actor=request.user
        )
        return f"Address {address} added"

    def do_address_delete(self, request):
        address = get_object_or_404(Address, pk=request.POST.get("pk"))
        services.address_delete(
            address=address, management=services.Management.of(request), confirm=_confirmed(request), actor=request.user
        )
        return f"Address {address.address} removed"

    def do_route_add(self, request):
        form = RouteForm(request.POST, prefix="route")
        if not form.is_valid():
            return {"route_form": form}
        route = services.route_create(actor=request.user, **form.values())
        return f"Route {route} added"

    def do_route_delete(self, request):
        route = get_object_or_404(Route, pk=request.POST.get("pk"))
        services.route_delete(
            route=route, management=services.Management.of(request), confirm=_confirmed(request), actor=request.user
        )
        return f"Route {route} removed"

    def do_settings(self, request):
        form = SettingsForm(request.POST, instance=NetworkSettings.load(), prefix="dns")
        if not form.is_valid():
            return {"settings_form": form}
        services.settings_update(settings=NetworkSettings.load(), actor=request.user, **form.values())
        return "DNS and NTP saved"


class InterfaceEditView(ObjectEditView):
    """One interface's settings (admins); a change that cuts the management address asks first (409)."""

    form_class = InterfaceForm
    noun = "interface"
    template_name = "network/interface_edit.html"
    error_status = 400

    def get_object(self):
        return get_object_or_404(Interface, pk=self.kwargs["pk"])

    def get_form(self, obj, data=None):
        form = super().get_form(obj, data)
        if data is None:
            form.fields["name"].widget.attrs["autofocus"] = True
        return form

    def save(self, obj, form):
        services.interface_update(
            interface=obj,
            management=services.Management.of(self.request),
            confirm=_confirmed(self.request),
            actor=self.request.user,
            **form.values(),
        )
        return obj

    def refused(self, obj, form, exc):
        confirm = _confirmation(self.request, exc)
        if confirm is not None:
            return self.render_form(obj, form, status=409, confirm=confirm)
        return super().refused(obj, form, exc)

    def cancel_url(self, obj):
        return reverse("network:network")

    def saved_message(self, saved) -> str:
        return f"Interface {saved.name} saved. The worker applies it in a moment."
