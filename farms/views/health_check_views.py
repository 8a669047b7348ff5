"""A farm's own health check."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from django.urls import reverse

from lbweb.views import ObjectEditView

from .. import health_services
from ..forms import HealthCheckForm
from ..models import Farm, HealthCheck
from ..roles import ADMIN, VIEWER


class HealthCheckEditView(ObjectEditView):
    """A farm's own health check (without one, its protocol's default applies). Every role reads it; only
    admins change it (a ``command`` check runs a program)."""

    form_class = HealthCheckForm
    noun = "health check"
    required_role = VIEWER
    write_role = ADMIN

    def farm(self) -> Farm:
        return get_object_or_404(Farm, pk=self.kwargs["farm_pk"])

    def get_object(self):
        return HealthCheck.objects.filter(farm_id=self.kwargs["farm_pk"]).first()

    def new_instance(self):
        return HealthCheck.effective_for(self.farm())

    def page_title(self, obj) -> str:
        farm = obj.farm if obj is not None else self.farm()
        own = "" if obj is not None else f" (the {farm.protocol} default until it has its own)"
        return f"Health check of farm {farm.name}{own}"

    def save(self, obj, form):
        if obj is None:
            return health_services.health_check_create(farm=self.farm(), actor=self.request.user, **form.values())
        return health_services.health_check_update(health_check=obj, actor=self.request.user, **form.values())

    def cancel_url(self, obj):
        return reverse("farms:farm_detail", args=[self.kwargs["farm_pk"]])
