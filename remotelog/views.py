"""System › Remote syslog: the servers lbweb's events go to; every role reads, admins change them."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.views.generic import ListView

from farms.roles import RoleRequiredMixin
from lbweb.views import ObjectDeleteView, ObjectEditView

from . import services
from .forms import SyslogServerForm
from .models import SyslogServer


class SyslogServerListView(RoleRequiredMixin, ListView):
    """Every server, its transport and the kinds of event it receives."""

    queryset = SyslogServer.objects.order_by("name")
    template_name = "system/syslog.html"
    context_object_name = "servers"


class SyslogServerEditView(ObjectEditView):
    """Create or change a server."""

    form_class = SyslogServerForm
    noun = "syslog server"

    def get_object(self):
        pk = self.kwargs.get("pk")
        return get_object_or_404(SyslogServer, pk=pk) if pk else None

    def save(self, obj, form):
        if obj is None:
            return services.syslog_server_create(actor=self.request.user, **form.values())
        return services.syslog_server_update(server=obj, actor=self.request.user, **form.values())

    def saved_message(self, saved) -> str:
        return f"Syslog server {saved} saved; rsyslog follows in a moment."

    def cancel_url(self, obj):
        return reverse("remotelog:syslog")


class SyslogServerDeleteView(ObjectDeleteView):
    """Stop sending to a server."""

    noun = "syslog server"

    def get_object(self):
        return get_object_or_404(SyslogServer, pk=self.kwargs["pk"])

    def delete(self, obj):
        services.syslog_server_delete(server=obj, actor=self.request.user)

    def cancel_url(self, obj):
        return reverse("remotelog:syslog")

    done_url = cancel_url
