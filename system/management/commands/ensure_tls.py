"""Make the web server's self-signed certificate when there is none (a set-up step; safe to run again)."""

from __future__ import annotations

import concurrent.futures
import ipaddress
import os
import socket

from django.core.management.base import BaseCommand

from lbweb.paths import tls_cert_path
from system import tls


def interface_addresses() -> list[str]:
    """The machine's own addresses, loopback and link-local left out (read with netlink, no privilege).

    pyroute2 runs an asyncio loop of its own: in a thread of its own, so that a caller whose thread already
    runs a loop is no obstacle.
    """
    from pyroute2 import IPRoute

    def read() -> list[str]:
        with IPRoute() as ipr:
            return [m.get_attr("IFA_ADDRESS") for m in ipr.get_addr()]

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        found = pool.submit(read).result()
    usable = []
    for address in filter(None, found):
        ip = ipaddress.ip_address(address)
        if not (ip.is_loopback or ip.is_link_local or ip.is_multicast or ip.is_unspecified):
            usable.append(address)
    return usable


def bind_host() -> str | None:
    """The address of LBWEB_BIND when it names one (not 0.0.0.0 or ::)."""
    bind = os.environ.get("LBWEB_BIND", "")
    host = bind.rsplit(":", 1)[0].strip("[]") if ":" in bind else bind
    try:
        return None if ipaddress.ip_address(host).is_unspecified else host
    except ValueError:
        return host or None


def certificate_names() -> list[str]:
    """Host name first (it becomes the subject), then every name and address the UI may be reached by."""
    names = [socket.gethostname(), socket.getfqdn(), "localhost"]
    names += [n.strip() for n in os.environ.get("LBWEB_TLS_NAMES", "").split(",") if n.strip()]
    if bind_host():
        names.append(bind_host())
    names += ["127.0.0.1", "::1", *interface_addresses()]
    return list(dict.fromkeys(n for n in names if n))


class Command(BaseCommand):
    help = (
        "Create a self-signed certificate and key under $LBWEB_VAR_DIR/tls/ when there is none (or when our "
        "self-signed one ends within 30 days). Names: the host name, LBWEB_TLS_NAMES, the machine's addresses."
    )

    def add_arguments(self, parser):
        parser.add_argument("--force", action="store_true", help="replace the present certificate, whatever it is")

    def handle(self, *args, force: bool = False, **options):
        reason = "--force" if force else tls.needs_new_self_signed()
        if reason is None:
            current = tls.current()
            self.stdout.write(
                f"TLS certificate {tls_cert_path()}: {current.subject}, until {current.not_after:%Y-%m-%d}"
            )
            return
        names = certificate_names()
        cert, key = tls.self_signed(names)
        tls.install([cert], key)
        made = tls.info(cert)
        self.stdout.write(
            f"TLS certificate {tls_cert_path()} made ({reason}): self-signed for {', '.join(made.sans)}; "
            f"SHA-256 {made.fingerprint_sha256}"
        )
