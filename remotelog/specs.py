"""The syslog servers as the generator's spec (``compiler.syslog.spec``): read by the worker
(``dataplane/syslog/applier.py``), which writes each TLS server's CA to the file named here."""

from __future__ import annotations

from pathlib import Path

from compiler.syslog.spec import ServerSpec, SyslogSpec

from .models import SyslogServer


def syslog_spec(directory: Path, access_socket: Path) -> tuple[SyslogSpec, dict[Path, str]]:
    """The spec of every enabled server, and the CA files it names (path -> PEM)."""
    servers, files = [], {}
    for row in SyslogServer.objects.filter(enabled=True).order_by("id"):
        ca_file = ""
        if row.transport == "tls":
            path = directory / f"ca-{row.id}.pem"
            files[path] = row.ca_certificate.strip() + "\n"
            ca_file = str(path)
        servers.append(
            ServerSpec(
                id=row.id,
                host=row.host,
                port=row.port,
                transport=row.transport,
                kinds=row.kinds,
                ca_file=ca_file,
                peer_name=row.peer_name,
            )
        )
    spec = SyslogSpec(
        servers=tuple(servers),
        events_socket=str(directory / "events.sock"),
        access_socket=str(access_socket),
        work_dir=str(directory / "work"),
    )
    return spec, files
