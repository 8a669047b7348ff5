"""Brings rsyslog to the syslog servers of the database: render (``compiler/syslog/``), check with ``rsyslogd
-N1``, then swap the file in; ``dataplane/syslog/run.py`` restarts rsyslog when the file changes.

No enabled server: the file is removed and rsyslog stopped (lbweb's events are then dropped at the socket; the
database keeps them). A file rsyslog refuses is never used: the one in place keeps running, and the apply says why.
"""

from __future__ import annotations

import logging
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from compiler.syslog.render import CONFIG_NAME, rsyslog_conf
from lbweb import paths

log = logging.getLogger("lbweb.syslog")
RSYSLOGD = "/usr/sbin/rsyslogd"


@dataclass(frozen=True)
class Outcome:
    ok: bool
    servers: int
    error: str = ""


class ConfigRefused(RuntimeError):
    """rsyslogd -N1 refused the generated file (its words are the message)."""


def syslog_dir() -> Path:
    """rsyslog's files in the state directory: the configuration, the CA files, lbweb's events socket."""
    return paths.ensure_private_dir(paths.var_dir() / "syslog")


def check(text: str, directory: Path) -> None:
    """``rsyslogd -N1`` on ``text`` (written beside the real file); raises :class:`ConfigRefused`."""
    fd, name = tempfile.mkstemp(dir=directory, prefix=".check-", suffix=".conf")
    try:
        with os.fdopen(fd, "w") as file:
            file.write(text)
        result = subprocess.run([RSYSLOGD, "-N1", "-f", name], capture_output=True, text=True, timeout=60)
    finally:
        Path(name).unlink(missing_ok=True)
    if result.returncode:
        lines = [line for line in (result.stdout + result.stderr).splitlines() if "error" in line.lower()]
        raise ConfigRefused("\n".join(lines) or result.stderr.strip() or f"rsyslogd -N1 exited {result.returncode}")


def normalised_pem(text: str) -> bytes:
    """The certificates of ``text`` written again by cryptography: nothing but PEM blocks reaches GnuTLS."""
    return b"".join(cert.public_bytes(Encoding.PEM) for cert in x509.load_pem_x509_certificates(text.encode()))


def write(spec, files: dict[Path, str], directory: Path) -> int:
    """Write the CA files and the checked configuration; returns how many servers rsyslog sends to."""
    conf = directory / CONFIG_NAME
    if not spec.servers:
        conf.unlink(missing_ok=True)
        return 0
    (directory / "work").mkdir(mode=0o700, exist_ok=True)
    for path, pem in files.items():
        data = normalised_pem(pem)
        if not path.exists() or path.read_bytes() != data:
            paths.write_private(path, data)
    text = rsyslog_conf(spec)
    check(text, directory)
    if not conf.exists() or conf.read_text() != text:
        paths.write_private(conf, text.encode())
    for stale in directory.glob("ca-*.pem"):
        if stale not in files:
            stale.unlink(missing_ok=True)
    return len(spec.servers)


def apply() -> Outcome:
    """The database's servers into rsyslog's file; an outcome that says why when rsyslog refused it."""
    from remotelog.specs import syslog_spec

    directory = syslog_dir()
    spec, files = syslog_spec(directory, access_socket())
    try:
        count = write(spec, files, directory)
    except (ConfigRefused, ValueError, OSError) as exc:
        log.error("remote syslog: configuration not applied: %s", exc)
        return Outcome(ok=False, servers=len(spec.servers), error=str(exc))
    log.info("remote syslog: %d server(s)", count)
    return Outcome(ok=True, servers=count)


def access_socket() -> Path:
    """Where HAProxy sends its access log: ``log/`` in HAProxy's directory (deploy/PROCESSES.md)."""
    from django.conf import settings

    return Path(settings.LBWEB_HAPROXY_DIR) / "log" / "access.sock"
