"""The BGP page (every role reads it) and its edit pages (admins), on the generic object pages of
``lbweb/views.py``: the settings, each peer, each farm's announcement, and the node's drain."""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse
from django.views import View
from django.views.generic import TemplateView

from farms.models import Farm
from farms.roles import ADMIN, RoleRequiredMixin, has_role
from lbweb.views import ObjectDeleteView, ObjectEditView

from . import services
from .forms import BgpPeerForm, BgpSettingsForm, FarmAnnouncementForm
from .models import BgpPeer, BgpSettings, FarmAnnouncement


class BgpPageView(RoleRequiredMixin, TemplateView):
    template_name = "bgp/bgp.html"

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        bgp = BgpSettings.load()
        status = bgp.status or {}
        sessions = status.get("sessions", {})
        announcements = {a.farm_id: a for a in FarmAnnouncement.objects.all()}
        context.update(
            can_configure=has_role(self.request.user, ADMIN),
            bgp=bgp,
            status=status,
            peers=[(p, sessions.get(f"peer{p.pk}", {})) for p in BgpPeer.objects.all()],
            farms=[(f, status.get("farms", {}).get(f.name, ""), announcements.get(f.pk)) for f in Farm.objects.all()],
        )
        return context


class BgpSettingsEditView(ObjectEditView):
    form_class = BgpSettingsForm
    noun = "BGP settings"

    def get_object(self):
        return BgpSettings.load()

    def page_title(self, obj) -> str:
        return "BGP settings"

    def save(self, obj, form):
        return services.settings_update(settings=obj, actor=self.request.user, **form.values())

    def saved_message(self, saved) -> str:
        return "BGP settings saved; BIRD follows in a moment."

    def cancel_url(self, obj) -> str:
        return reverse("bgp:bgp")


class BgpPeerEditView(ObjectEditView):
    form_class = BgpPeerForm
    noun = "BGP peer"

    def get_object(self):
        return get_object_or_404(BgpPeer, pk=self.kwargs["pk"]) if "pk" in self.kwargs else None

    def save(self, obj, form):
        if obj is None:
            return services.peer_create(actor=self.request.user, **form.values())
        return services.peer_update(peer=obj, actor=self.request.user, **form.values())

    def cancel_url(self, obj) -> str:
        return reverse("bgp:bgp")


class BgpPeerDeleteView(ObjectDeleteView):
    noun = "BGP peer"

    def get_object(self):
        return get_object_or_404(BgpPeer, pk=self.kwargs["pk"])

    def delete(self, obj) -> None:
        services.peer_delete(peer=obj, actor=self.request.user)

    def cancel_url(self, obj) -> str:
        return reverse("bgp:bgp")

    done_url = cancel_url


class FarmAnnouncementEditView(ObjectEditView):
    form_class = FarmAnnouncementForm
    noun = "announcement"

    def get_object(self):
        return services.announcement_of(get_object_or_404(Farm, pk=self.kwargs["farm_id"]))

    def get_form(self, obj, data=None):
        return self.form_class(data, instance=obj)

    def page_title(self, obj) -> str:
        return f"BGP announcement of farm {obj.farm.name}"

    def save(self, obj, form):
        return services.announcement_update(announcement=obj, actor=self.request.user, **form.values())

    def cancel_url(self, obj) -> str:
        return reverse("bgp:bgp")


class BgpDrainView(RoleRequiredMixin, View):
    """POST drained=1 (drain) or drained=0 (announce again)."""

    required_role = ADMIN

    def post(self, request):
        drained = request.POST.get("drained") == "1"
        services.drain(settings=BgpSettings.load(), drained=drained, actor=request.user)
        messages.success(request, "Node drained: graceful shutdown first, then withdrawal." if drained
                         else "Node no longer drained: its VIPs are announced again.")  # fmt: skip
        return redirect("bgp:bgp")
