"""Print a new API token of an account (shown once; only its digest is stored)."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from knox.models import AuthToken


class Command(BaseCommand):
    help = "Create an API token for USERNAME and print it (valid LBWEB_TOKEN_TTL_HOURS, or --ttl-hours)."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--ttl-hours", type=float, help="validity in hours (default: LBWEB_TOKEN_TTL_HOURS)")

    def handle(self, *args, username: str, ttl_hours: float | None, **options):
        user = get_user_model().objects.filter(username=username, is_active=True).first()
        if user is None:
            raise CommandError(f"no active account named '{username}'")
        if ttl_hours is not None and ttl_hours <= 0:
            raise CommandError("--ttl-hours must be more than 0")
        ttl = timedelta(hours=ttl_hours) if ttl_hours is not None else settings.LBWEB_TOKEN_TTL
        instance, token = AuthToken.objects.create(user=user, expiry=ttl)
        self.stderr.write(f"token of '{username}', valid until {instance.expiry:%Y-%m-%d %H:%M} UTC (shown once):")
        self.stdout.write(token)
