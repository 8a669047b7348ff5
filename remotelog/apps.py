from django.apps import AppConfig


class RemotelogConfig(AppConfig):
    """System › Remote syslog: the syslog servers lbweb forwards its events to (through rsyslog)."""

    name = "remotelog"
    verbose_name = "Remote syslog"

    def ready(self):
        from . import backup_section

        backup_section.register()
