"""Print a new token for /metrics (shown once; only its digest is stored). It reads metrics, nothing else."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from monitoring import services


class Command(BaseCommand):
    help = "Create a token that can only read /metrics, named NAME (e.g. prometheus), and print it."

    def add_arguments(self, parser):
        parser.add_argument("name")

    def handle(self, *args, name: str, **options):
        try:
            _row, token = services.metrics_token_create(name=name)
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from exc
        self.stderr.write(f"metrics token '{name}' (shown once; send it as 'Authorization: Bearer <token>'):")
        self.stdout.write(token)
