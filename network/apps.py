from django.apps import AppConfig


class NetworkConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "network"
    verbose_name = "System network"

    def ready(self):
        from . import backup_section

        backup_section.register()
