from django.apps import AppConfig


class ClusterConfig(AppConfig):
    name = "cluster"
    verbose_name = "Cluster (HA pair)"

    def ready(self) -> None:
        from . import signals  # noqa: F401 (connects the push of configuration changes to the peer)
