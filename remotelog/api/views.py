"""System › Remote syslog in the API: ``/api/v1/system/syslog-servers/`` (every role reads, admins write)."""

from __future__ import annotations

from rest_framework import viewsets

from .. import services
from ..models import SyslogServer
from .serializers import SyslogServerSerializer


class SyslogServerViewSet(viewsets.ModelViewSet):
    queryset = SyslogServer.objects.order_by("name")
    serializer_class = SyslogServerSerializer
    filterset_fields = ["name", "transport", "enabled"]

    def perform_destroy(self, instance: SyslogServer) -> None:
        services.syslog_server_delete(server=instance, actor=self.request.user)
