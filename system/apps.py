from django.apps import AppConfig


class SystemConfig(AppConfig):
    """The appliance itself rather than its farms: the web server's TLS certificate and API tokens."""

    name = "system"
    verbose_name = "System"

    def ready(self):
        from . import admin_audit, schema  # noqa: F401 - schema registers the OpenAPI extension

        admin_audit.connect()
