"""Server-rendered pages of the farms app."""

from django.contrib.auth.mixins import LoginRequiredMixin
from django.views.generic import ListView

from .models import ApplyRun, Farm


class FarmListView(LoginRequiredMixin, ListView):
    """Every farm with its VIP, backends and whether the kernel runs it."""

    queryset = Farm.objects.prefetch_related("backends")
    template_name = "farms/farm_list.html"
    context_object_name = "farms"

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        context["last_run"] = ApplyRun.objects.first()
        return context
