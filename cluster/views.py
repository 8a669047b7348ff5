"""The Cluster page (every role reads it; settings change through ``PUT /api/v1/cluster/``, admins) and the
line every page's header carries in a cluster: which node is master, and whether it is this one."""

from __future__ import annotations

from django.conf import settings
from django.views.generic import TemplateView

from farms.roles import RoleRequiredMixin

from .models import Cluster, Node
from .roles import local_role
from .status import cluster_status


def cluster_context(request) -> dict:
    """``cluster_banner``: "Cluster master: n1 (this node)" on every page of a node in a cluster."""
    if not getattr(getattr(request, "user", None), "is_authenticated", False):
        return {}
    if not Cluster.objects.filter(pk=1, enabled=True).exists():
        return {}
    role = str(local_role()["role"])
    me = settings.LBWEB_NODE_NAME
    if role == "master":
        return {"cluster_banner": f"Cluster master: {me} (this node)"}
    peer = Node.objects.exclude(name=me).first()
    peer_role = (Cluster.load().peer_status or {}).get("role")
    if role == "backup" and peer is not None:
        return {"cluster_banner": f"Cluster master: {peer.name} (this node, {me}, is backup)"}
    master = peer.name if peer is not None and peer_role == "master" else "unknown"
    return {"cluster_banner": f"Cluster master: {master} (this node, {me}, is {role})"}


class ClusterPageView(RoleRequiredMixin, TemplateView):
    template_name = "cluster/cluster.html"

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        context["status"] = cluster_status()
        context["cluster"] = Cluster.load()
        context["nodes"] = Node.objects.all()
        return context
