"""What the cluster's plug-ins need before they import the models: the repository on the path, Django's settings
(the models validate without a database) and root (each verdict runs in a throwaway network namespace)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def django_ready() -> None:
    if os.geteuid() != 0:
        sys.exit("run as root: the engines are asked in a throwaway network namespace")
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "lbweb.settings")
    import django

    django.setup()
