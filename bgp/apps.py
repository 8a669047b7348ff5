from django.apps import AppConfig


class BgpConfig(AppConfig):
    name = "bgp"
    verbose_name = "BGP (route health injection)"

    def ready(self):
        from . import backup_section

        backup_section.register()
