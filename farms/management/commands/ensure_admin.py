"""Create the first administrator if there is none (used by the set-up; safe to run again)."""

import os
import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Create user 'admin' (password from LBWEB_ADMIN_PASSWORD, or generated and printed once)."

    def add_arguments(self, parser):
        parser.add_argument("--username", default=os.environ.get("LBWEB_ADMIN_USER", "admin"))

    def handle(self, *args, username: str, **options):
        User = get_user_model()
        given = os.environ.get("LBWEB_ADMIN_PASSWORD")
        user = User.objects.filter(username=username).first()
        if user:
            if given:
                user.set_password(given)
                user.save(update_fields=["password"])
                self.stdout.write(f"admin account '{username}': password set from LBWEB_ADMIN_PASSWORD")
            else:
                self.stdout.write(f"admin account '{username}' exists (password unchanged)")
            return
        password = given or secrets.token_urlsafe(12)
        User.objects.create_superuser(username=username, email="", password=password)
        if given:
            self.stdout.write(f"admin account '{username}' created with the password from LBWEB_ADMIN_PASSWORD")
        else:
            self.stdout.write(
                self.style.WARNING(f"admin account '{username}' created; password (shown once): {password}")
            )
