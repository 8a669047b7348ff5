"""What rsyslog's configuration is made from: plain frozen dataclasses, no Django.

The worker builds a :class:`SyslogSpec` from the database (``dataplane/syslog/applier.py``); ``render.py`` turns it
into rsyslog's text, golden-tested like the other generators (tests/compiler/test_syslog_render.py).
"""

from __future__ import annotations

from dataclasses import dataclass

# The kinds of event lbweb forwards, each with its RFC 5424 MSGID (stable: a syslog server's rules match on it).
AUDIT = "audit"  # an audit trail entry (who changed what), from the web, the worker, the CLI
APPLY = "apply"  # an apply run of the worker (nftables or HAProxy), its result and error
HEALTH = "health"  # a backend's health transition, from healthd
CLUSTER = "cluster"  # a transition of this node of the HA pair (MASTER, BACKUP, FAULT, STOP)
HTTP_ACCESS = "http-access"  # HAProxy's access log of HTTP farms
FARM_LOG = "farm-log"  # the kernel's log lines of farms that log (nftlb's IN-, FWD-, OUT- prefixes)
KINDS = (AUDIT, APPLY, HEALTH, CLUSTER, HTTP_ACCESS, FARM_LOG)
TRANSPORTS = ("udp", "tcp", "tls")


@dataclass(frozen=True)
class ServerSpec:
    """One remote syslog server and the kinds of event it receives.

    ``tls``: the server's certificate is checked against ``ca_file`` (a PEM file the worker wrote); with
    ``peer_name`` its name must also be that one (rsyslog's ``x509/name``), without only its chain
    (``x509/certvalid``)."""

    id: int
    host: str  # an IPv4 or IPv6 address, or a DNS name
    port: int
    transport: str  # udp | tcp | tls
    kinds: tuple[str, ...] = KINDS
    ca_file: str = ""
    peer_name: str = ""


@dataclass(frozen=True)
class SyslogSpec:
    """Every server, and where rsyslog reads lbweb's events: ``events_socket`` (lbweb's own processes),
    ``access_socket`` (HAProxy's access log), the kernel's log (``/dev/kmsg``) when a server takes farm-log."""

    servers: tuple[ServerSpec, ...]
    events_socket: str
    access_socket: str
    work_dir: str

    @property
    def reads_kernel(self) -> bool:
        return any(FARM_LOG in server.kinds for server in self.servers)
