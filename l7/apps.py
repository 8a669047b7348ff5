from django.apps import AppConfig


class L7Config(AppConfig):
    """HTTP and HTTPS farms on HAProxy."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "l7"
    verbose_name = "HTTP farms"

    def ready(self):
        from . import backup_section, config_section

        config_section.register()
        backup_section.register()
