"""The only writers of the syslog servers, each audited in its transaction; the worker rewrites rsyslog's
configuration after the commit (``syslog.tasks.apply_syslog``, ``dataplane/syslog/``)."""

from __future__ import annotations

from django.db import transaction

from farms.audit import audited
from lbweb import enqueue
from lbweb.writes import validated_save

from .models import FIELDS, SyslogServer

APPLY_TASK = "syslog.tasks.apply_syslog"


def _apply_after_commit() -> None:
    enqueue.send_after_commit(APPLY_TASK, what="remote syslog's configuration")


@audited("create")
def syslog_server_create(**values) -> SyslogServer:
    """A new server, validated by ``SyslogServer.clean``; rsyslog follows after the commit."""
    with transaction.atomic():
        server = validated_save(SyslogServer(), FIELDS, values)
        _apply_after_commit()
    return server


@audited("update", target="server")
def syslog_server_update(*, server: SyslogServer, **values) -> SyslogServer:
    """Change a server's fields; a refused value changes nothing."""
    with transaction.atomic():
        validated_save(server, FIELDS, values)
        _apply_after_commit()
    return server


@audited("delete", target="server")
def syslog_server_delete(*, server: SyslogServer) -> None:
    """Remove a server: rsyslog stops sending to it."""
    with transaction.atomic():
        server.delete()
        _apply_after_commit()
