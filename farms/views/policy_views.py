"""The shared deny and allow lists."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.views.generic import ListView

from lbweb.views import ObjectDeleteView, ObjectEditView

from .. import services
from ..forms import PolicyForm
from ..models import Policy
from ..roles import RoleRequiredMixin
from .page_parts import PAGE_SIZE


class PolicyListView(RoleRequiredMixin, ListView):
    """Shared deny and allow lists, and the farms that use them."""

    queryset = Policy.objects.prefetch_related("farms").order_by("name")
    template_name = "farms/policy_list.html"
    context_object_name = "policies"
    paginate_by = PAGE_SIZE


class PolicyEditView(ObjectEditView):
    """Create or change a policy."""

    form_class = PolicyForm
    noun = "policy"

    def get_object(self):
        pk = self.kwargs.get("pk")
        return get_object_or_404(Policy, pk=pk) if pk else None

    def save(self, obj, form):
        if obj is None:
            return services.policy_create(actor=self.request.user, **form.values())
        return services.policy_update(policy=obj, actor=self.request.user, **form.values())

    def cancel_url(self, obj):
        return reverse("farms:policy_list")


class PolicyDeleteView(ObjectDeleteView):
    """Delete a policy no farm uses."""

    noun = "policy"

    def get_object(self):
        return get_object_or_404(Policy, pk=self.kwargs["pk"])

    def delete(self, obj):
        services.policy_delete(policy=obj, actor=self.request.user)

    def cancel_url(self, obj):
        return reverse("farms:policy_list")

    done_url = cancel_url
