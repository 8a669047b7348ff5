"""Dashboard pages. They render a light shell; the charts fetch /api/v1/metrics/ every interval."""

from django.conf import settings
from django.contrib.auth.mixins import LoginRequiredMixin
from django.http import HttpResponse, HttpResponseNotAllowed
from django.views.generic import DetailView, TemplateView

from farms.models import Farm

from .selectors import DEFAULT_WINDOW, WINDOWS


class DashboardContextMixin:
    """What every dashboard page's script needs to know."""

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        context["windows"] = list(WINDOWS)
        context["default_window"] = DEFAULT_WINDOW
        context["interval"] = settings.LBWEB_METRICS_INTERVAL
        context["conntrack_warn"] = settings.LBWEB_CONNTRACK_WARN
        return context


class DashboardView(LoginRequiredMixin, DashboardContextMixin, TemplateView):
    """The whole appliance: connections, throughput, CPU per core, conntrack, and every farm's latest figures."""

    template_name = "monitoring/overview.html"


class FarmDashboardView(LoginRequiredMixin, DashboardContextMixin, DetailView):
    """One farm: throughput, new and active connections, per backend, and the backends' state over time."""

    queryset = Farm.objects.prefetch_related("backends")
    template_name = "monitoring/farm.html"
    context_object_name = "farm"


def prometheus_metrics(request):
    """``/metrics`` for Prometheus, behind a metrics token (``Authorization: Bearer <token>``) and nothing else:
    a scraper's credential reads the figures and cannot reach the API or the pages."""
    from .models import MetricsToken
    from .prometheus import CONTENT_TYPE, exposition

    if request.method not in ("GET", "HEAD"):
        return HttpResponseNotAllowed(["GET", "HEAD"])
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or MetricsToken.authenticate(token.strip()) is None:
        response = HttpResponse("A metrics token is needed: Authorization: Bearer <token>.\n", status=401)
        response["WWW-Authenticate"] = 'Bearer realm="lbweb metrics"'
        response["Content-Type"] = "text/plain; charset=utf-8"
        return response
    return HttpResponse(exposition(), content_type=CONTENT_TYPE)
