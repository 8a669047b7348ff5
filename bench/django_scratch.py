"""Django on a throwaway SQLite database in a scratch directory, migrated: what the fuzzing benchmarks write through
the services, rolled back example by example. Redis points at a socket nobody serves (nothing is enqueued)."""

from __future__ import annotations

import os
from pathlib import Path


def setup(work: Path) -> None:
    os.environ.update(
        DJANGO_SETTINGS_MODULE="lbweb.settings",
        DATABASE_URL=f"sqlite:///{work / 'fuzz.sqlite3'}",
        LBWEB_VAR_DIR=str(work),
        REDIS_URL=f"unix://{work / 'no-redis.sock'}",  # nothing is enqueued: every example is rolled back
    )
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
