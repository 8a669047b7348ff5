from django.apps import AppConfig


class BgpConfig(AppConfig):
    name = "bgp"
    verbose_name = "BGP (route health injection)"
