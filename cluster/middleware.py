"""On a cluster's backup, every write is refused with a message naming the master (HTTP 409).

The backup's configuration is the master's copy (``cluster.sync``): a change made here would be overwritten
by the next push, or worse, kept until then. Reads, logging in and out, and the peer's own pushes pass.
"""

from __future__ import annotations

from django.http import HttpResponse, JsonResponse

SAFE = {"GET", "HEAD", "OPTIONS", "TRACE"}
ALLOWED = (
    "/api/v1/cluster/sync/",
    "/api/v1/auth/",
    "/accounts/login/",
    "/accounts/logout/",
    "/admin/login/",
    "/admin/logout/",
)


def refusal() -> str | None:
    """The message when this node is a cluster's backup (or in fault), else None."""
    from .models import Cluster, Node
    from .roles import local_role

    role = local_role()["role"]
    if role not in ("backup", "fault"):
        return None
    if not Cluster.objects.filter(pk=1, enabled=True).exists():
        return None
    from django.conf import settings

    master = Node.objects.exclude(name=settings.LBWEB_NODE_NAME).first()
    where = f"{master.name} ({master.api_url})" if master else "the other node"
    return (
        f"This node ({settings.LBWEB_NODE_NAME}) is the cluster's {role}: its configuration is the master's copy. "
        f"Make changes on the master, {where}."
    )


class BackupRefusesWrites:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.method not in SAFE and not request.path.startswith(ALLOWED):
            message = refusal()
            if message:
                if request.path.startswith("/api/"):
                    return JsonResponse({"detail": message, "code": "cluster_backup"}, status=409)
                return HttpResponse(message, status=409, content_type="text/plain; charset=utf-8")
        return self.get_response(request)
