from django.apps import AppConfig


class AccountsConfig(AppConfig):
    """Who may log in and how: directory logins (LDAP, RADIUS, OpenID Connect), local accounts, second factors."""

    name = "accounts"
    verbose_name = "Accounts"

    def ready(self):
        from . import backup_section

        backup_section.register()
