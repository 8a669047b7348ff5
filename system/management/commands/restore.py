"""Restore an encrypted backup from the console (docs/backup.md): the same checks and the one transaction as the
API's restore; ``--dry-run`` only checks. The passphrase as ``manage.py backup`` takes it. Exits 1 on any refusal,
having changed nothing."""

from __future__ import annotations

from pathlib import Path

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from system.backup import services as backup

from .backup import passphrase, refusal


class Command(BaseCommand):
    help = "Make the appliance what the backup FILE holds (passphrase: $LBWEB_BACKUP_PASSPHRASE); --dry-run checks."

    def add_arguments(self, parser):
        parser.add_argument("file", type=Path)
        parser.add_argument("--dry-run", action="store_true", help="check everything, change nothing")

    def handle(self, *args, file: Path, dry_run: bool, **options):
        try:
            data = file.read_bytes()
        except OSError as exc:
            raise CommandError(f"{file}: {exc.strerror}") from None
        try:
            result = backup.backup_restore(data=data, passphrase=passphrase(), dry_run=dry_run)
        except ValidationError as exc:
            raise refusal(exc) from None
        if not result.ok:
            lines = [f"{e.location or '-'} {e.field}: {e.message}" for e in result.errors]
            raise CommandError("nothing changed:\n" + "\n".join(lines))
        for kind, counts in sorted(result.counts.items()):
            self.stdout.write(f"{kind}: " + ", ".join(f"{n} {what}" for what, n in counts.items() if n))
        self.stdout.write("dry run: it would restore as above; nothing changed" if dry_run else "restored")
