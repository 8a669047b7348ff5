"""The HTTP farms page: services and backends with sessions in use against declared capacity, queue and time in
queue (from the collector's newest sample), and the certificates with their expiry (a warning ahead of time)."""

from __future__ import annotations

import logging

from django.contrib.auth.mixins import LoginRequiredMixin
from django.views.generic import TemplateView

from farms.choices import L7_MODES
from farms.models import Farm

from .models import Certificate

log = logging.getLogger("lbweb.l7")


def latest_http_figures() -> dict[int, dict]:
    """farm id -> its newest entry (long names) from the collector, {} when there is none."""
    try:
        from monitoring.store import decode_farm_fields, metric_store

        latest = metric_store().latest() or {}
    except Exception as exc:  # Redis down: the page shows the configuration without live figures
        log.debug("no metrics: %s", exc)
        return {}
    return {int(fid): decode_farm_fields(fields) for fid, fields in (latest.get("farms") or {}).items()}


class HttpFarmsView(LoginRequiredMixin, TemplateView):
    template_name = "l7/http_farms.html"

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        figures = latest_http_figures()
        farms = (
            Farm.objects.filter(mode__in=L7_MODES)
            .prefetch_related("backends__l7__service", "http_services")
            .select_related("l7")
            .order_by("name")
        )
        rows = []
        for farm in farms:
            live = figures.get(farm.id, {})
            backends = []
            for backend in farm.backends.all():
                options = getattr(backend, "l7", None)
                backends.append(
                    {
                        "backend": backend,
                        "service": options.service.name if options and options.service else "default",
                        "capacity": options.capacity if options else None,
                        "live": live.get("backends", {}).get(str(backend.id), {}),
                    }
                )
            rows.append({"farm": farm, "live": live, "backends": backends, "services": farm.http_services.all()})
        context["farms"] = rows
        context["certificates"] = Certificate.objects.order_by("not_after")
        return context
