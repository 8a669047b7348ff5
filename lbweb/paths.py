"""Where lbweb's state lives, without importing Django.

Settings, the gunicorn configuration files (read by gunicorn's master before any Django is loaded) and
the TLS code all need the same paths; this module is their one definition.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent


def var_dir() -> Path:
    """``LBWEB_VAR_DIR`` (default ``<checkout>/var``), absolute."""
    return Path(os.environ.get("LBWEB_VAR_DIR", BASE_DIR / "var")).resolve()


def ensure_private_dir(path: Path) -> Path:
    """Create ``path`` if needed and make it 0700: it holds secrets (database, keys) of one user."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.stat().st_uid == os.geteuid() and path.stat().st_mode & 0o077:
        path.chmod(0o700)  # only its owner may tighten it (another user reading settings must not fail)
    return path


def stage_private(path: Path, data: bytes) -> Path:
    """Write ``data`` to a new temporary file beside ``path``, mode 0600 from the start, flushed to disk.

    ``os.replace(staged, path)`` then swaps it in atomically. The secret is never readable by others, not
    even between its creation and a chmod.
    """
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")  # mode 0600
    staged = Path(name)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
    except BaseException:
        staged.unlink(missing_ok=True)
        raise
    return staged


def write_private(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically (a reader sees the old content or the new), mode 0600."""
    os.replace(stage_private(path, data), path)


def tls_dir() -> Path:
    return var_dir() / "tls"


def tls_cert_path() -> Path:
    """The certificate the web server presents: the leaf first, then its chain (PEM)."""
    return tls_dir() / "lbweb.crt"


def tls_key_path() -> Path:
    return tls_dir() / "lbweb.key"
