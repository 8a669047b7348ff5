"""Where lbweb's state lives, without importing Django.

Settings, the gunicorn configuration files (read by gunicorn's master before any Django is loaded) and
the TLS code all need the same paths; this module is their one definition.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
APPLIANCE_VAR_DIR = Path("/var/lib/lbweb")  # deploy/systemd: its runtime paths keep their plain names
# deploy/run.sh may run everything in a mount namespace where the checkout is seen at /run/lbweb-app; it gives the
# state directory's real path, as the host sees it, in this variable.
HOST_VAR_DIR_ENV = "LBWEB_VAR_DIR_HOST"


def var_dir() -> Path:
    """``LBWEB_VAR_DIR`` (default ``<checkout>/var``), absolute."""
    return Path(os.environ.get("LBWEB_VAR_DIR", BASE_DIR / "var")).resolve()


def runtime_suffix() -> str:
    """What tells this state directory's runtime paths (under /run, shared by the whole host) from another's: ""
    for the appliance's state directory, "-" and 8 hex digits of the state directory's real path otherwise.

    Of the state directory's path as the host sees it, not the checkout's: every clone run by deploy/run.sh from a
    private directory is seen at /run/lbweb-app, so a hash of that path gave two appliances started from two
    clones at once one HAProxy directory and one prober socket (issue 39)."""
    real = os.environ.get(HOST_VAR_DIR_ENV) or str(var_dir())
    if Path(real) == APPLIANCE_VAR_DIR:
        return ""
    return "-" + hashlib.sha256(real.encode()).hexdigest()[:8]


def haproxy_dir() -> Path:
    """HAProxy's conf/ and sock/ (deploy/PROCESSES.md): ``LBWEB_HAPROXY_DIR``, else one per state directory."""
    return Path(os.environ.get("LBWEB_HAPROXY_DIR") or f"/run/lbweb-haproxy{runtime_suffix()}")


def prober_socket() -> str:
    """Where healthd reaches the command prober: ``LBWEB_PROBER_SOCKET``, else one per state directory (the
    prober and healthd are given it: healthd/prober.py's own default is the appliance's)."""
    return os.environ.get("LBWEB_PROBER_SOCKET") or f"/run/lbweb-prober/prober{runtime_suffix()}.sock"


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


if __name__ == "__main__":  # deploy/run.sh: "python lbweb/paths.py haproxy_dir" prints one (stdlib only: quick)
    print({"haproxy_dir": haproxy_dir, "prober_socket": prober_socket}[sys.argv[1]]())
