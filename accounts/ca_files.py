"""CA certificates from the settings, as files: libldap and requests read a CA only from a file.

Each is written once into lbweb's private state directory (0600 in a 0700 directory), named by its digest, so a
changed CA is a new file and nothing has to notice that an old one changed.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from lbweb.paths import ensure_private_dir, var_dir, write_private


def ca_file(pem: str) -> Path:
    """The file holding ``pem``."""
    pem = pem.strip() + "\n"
    directory = ensure_private_dir(var_dir() / "auth")
    path = directory / f"ca-{hashlib.sha256(pem.encode()).hexdigest()[:16]}.pem"
    if not path.exists():
        write_private(path, pem.encode())
    return path
