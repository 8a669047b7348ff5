from django.apps import AppConfig


class ClusterConfig(AppConfig):
    name = "cluster"
    verbose_name = "Cluster (HA pair)"

    def ready(self):
        from . import backup_section

        backup_section.register()
