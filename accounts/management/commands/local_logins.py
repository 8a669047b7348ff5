"""``manage.py local_logins --enable``: the console's way back in when the directories fail and local logins are
off (System › Authentication refuses to switch them off only while no directory is enabled; a directory that
stops answering is not foreseen there). ``--status`` says what is in force."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from accounts.models import LdapSettings, LoginPolicy, OidcSettings, RadiusSettings
from accounts.services import local_logins_enable


class Command(BaseCommand):
    help = "Switch local logins back on (--enable), or show the login sources in force (--status)."

    def add_arguments(self, parser):
        action = parser.add_mutually_exclusive_group(required=True)
        action.add_argument("--enable", action="store_true", help="let local accounts log in again")
        action.add_argument("--status", action="store_true", help="print which sources of logins are enabled")

    def handle(self, *args, **options):
        if options["enable"]:
            local_logins_enable()
            self.stdout.write("Local accounts may log in again.")
        policy = LoginPolicy.load()
        sources = [str(model.load()) for model in (RadiusSettings, LdapSettings, OidcSettings) if model.load().enabled]
        self.stdout.write(f"local logins: {'on' if policy.local_logins else 'off'}")
        self.stdout.write(f"directories: {', '.join(sources) or 'none'}")
        self.stdout.write(f"second factor required for: {policy.get_second_factor_role_display()}")
