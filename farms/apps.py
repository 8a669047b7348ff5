from django.apps import AppConfig


class FarmsConfig(AppConfig):
    name = "farms"
    verbose_name = "Farms"

    def ready(self):
        from . import backup_section

        backup_section.register()
