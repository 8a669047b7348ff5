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
from django.views import View

from farms.roles import ADMIN, RoleRequiredMixin

from . import selectors, services
from .forms import AddressForm, InterfaceForm, RouteForm, SettingsForm
from .models import Address, Interface, NetworkSettings, Route


def _confirmed(request) -> bool:
    return request.POST.get("confirm") == "1"


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
            errors = exc.message_dict if hasattr(exc, "error_dict") else {"__all__": exc.messages}
            if "confirm" in errors:
                confirm = {"message": errors["confirm"][0], "data": request.POST}
                return render(request, self.template_name, self.context(request, confirm=confirm), status=409)
            messages.error(request, " ".join(m for ms in errors.values() for m in ms))
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


class InterfaceEditView(RoleRequiredMixin, View):
    """One interface's settings (admins)."""

    required_role = ADMIN
    template_name = "network/interface_edit.html"

    def get(self, request, pk: int):
        interface = get_object_or_404(Interface, pk=pk)
        form = InterfaceForm(instance=interface)
        form.fields["name"].widget.attrs["autofocus"] = True
        return render(request, self.template_name, {"interface": interface, "form": form})

    def post(self, request, pk: int):
        interface = get_object_or_404(Interface, pk=pk)
        form = InterfaceForm(request.POST, instance=Interface.objects.get(pk=pk))
        context = {"interface": interface, "form": form}
        if form.is_valid():
            try:
                services.interface_update(
                    interface=Interface.objects.get(pk=pk),
                    management=services.Management.of(request),
                    confirm=_confirmed(request),
                    actor=request.user,
                    **form.values(),
                )
            except ValidationError as exc:
                errors = exc.message_dict if hasattr(exc, "error_dict") else {"__all__": exc.messages}
                if "confirm" in errors:
                    context["confirm"] = {"message": errors["confirm"][0], "data": request.POST}
                    return render(request, self.template_name, context, status=409)
                for field, problems in errors.items():
                    for problem in problems:
                        form.add_error(field if field in form.fields else None, problem)
            else:
                messages.success(request, f"Interface {interface.name} saved. The worker applies it in a moment.")
                return redirect("network:network")
        return render(request, self.template_name, context, status=400)
