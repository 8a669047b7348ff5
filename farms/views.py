"""Server-rendered pages of the farms app."""

from django.contrib.auth.mixins import LoginRequiredMixin
from django.views.generic import ListView

from monitoring.health import heartbeat

from .models import ApplyRun, Farm


class FarmListView(LoginRequiredMixin, ListView):
    """Every farm with its VIP, backends (and their health), whether the kernel runs it, and healthd's state."""

    queryset = Farm.objects.prefetch_related("backends")
    template_name = "farms/farm_list.html"
    context_object_name = "farms"

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        context["last_run"] = ApplyRun.objects.first()
        context["healthd"] = heartbeat.read_status()
        return context
