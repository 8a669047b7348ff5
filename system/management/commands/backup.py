"""Write the whole appliance to an encrypted archive from the console (docs/backup.md).

The passphrase comes from ``LBWEB_BACKUP_PASSPHRASE`` (never from the command line, where ``ps`` shows it), or is
asked for at the terminal. The file is written 0600. Audited as a download, by "system".
"""

from __future__ import annotations

import os
from pathlib import Path

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from system.backup import services as backup


def passphrase() -> str:
    given = os.environ.get("LBWEB_BACKUP_PASSPHRASE")
    if given:
        return given
    import getpass

    try:
        return getpass.getpass("Backup passphrase: ")
    except (EOFError, KeyboardInterrupt):
        raise CommandError("no passphrase: set LBWEB_BACKUP_PASSPHRASE or run at a terminal") from None


def refusal(exc: ValidationError) -> CommandError:
    lines = [f"{field}: {' '.join(messages)}" for field, messages in exc.message_dict.items()]
    return CommandError("\n".join(lines))


class Command(BaseCommand):
    help = "Write an encrypted backup of the whole appliance to FILE (passphrase: $LBWEB_BACKUP_PASSPHRASE)."

    def add_arguments(self, parser):
        parser.add_argument("file", type=Path)

    def handle(self, *args, file: Path, **options):
        try:
            data, _name = backup.backup_create(passphrase=passphrase())
        except ValidationError as exc:
            raise refusal(exc) from None
        fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        self.stdout.write(f"{file}: {len(data):,} bytes")
