"""ACME certificates with Debian's certbot: issuance and renewal, run by the worker.

certbot answers the HTTP-01 challenge with its own small server on 127.0.0.1:``acme_port``; every HTTP farm sends
``/.well-known/acme-challenge/`` there (``compiler/haproxy/config.py``), so HAProxy keeps ports 80 and 443 throughout.
The certificate and key certbot writes are read back, checked like an upload and stored through the services (so
the farms that offer it are applied again, and the audit trail says so). certbot keeps its account and state under
``$LBWEB_VAR_DIR/acme``.
"""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from django.conf import settings

from compiler.haproxy.spec import EngineSpec
from l7 import services
from l7.choices import CertificateSourceChoices
from l7.models import Certificate

log = logging.getLogger("lbweb.l7.acme")
RENEW_DAYS = 30


class AcmeError(Exception):
    pass


def certbot_command(name: str, domains: Sequence[str], workdir: Path) -> list[str]:
    command = [
        "certbot", "certonly", "--non-interactive", "--agree-tos", "--standalone",
        "--preferred-challenges", "http", "--http-01-address", "127.0.0.1",
        "--http-01-port", str(EngineSpec.acme_port), "--cert-name", name, "--key-type", "ecdsa",
        "--config-dir", str(workdir / "config"), "--work-dir", str(workdir / "work"),
        "--logs-dir", str(workdir / "logs"), "--server", settings.LBWEB_ACME_SERVER, "--force-renewal",
    ]  # fmt: skip
    command += ["-m", settings.LBWEB_ACME_EMAIL] if settings.LBWEB_ACME_EMAIL else ["--register-unsafely-without-email"]
    for domain in domains:
        command += ["-d", domain]
    return command


def issue(name: str, domains: Sequence[str], prefix: Sequence[str] = (), env: dict | None = None) -> Certificate:
    """Ask the ACME server for a certificate for ``domains`` and store it as certificate ``name`` (created, or
    replaced when it exists: a renewal). ``prefix`` runs certbot inside another namespace (tests)."""
    workdir = Path(settings.LBWEB_ACME_DIR)
    workdir.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        result = subprocess.run(
            [*prefix, *certbot_command(name, domains, workdir)],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, **(env or {})},
        )
    except FileNotFoundError as exc:  # deploy/lib.sh installs Debian's certbot; a machine without it says so
        raise AcmeError(f"certbot is not installed ({exc.filename}): install Debian's certbot package") from exc
    if result.returncode != 0:
        raise AcmeError(f"certbot failed: {(result.stderr or result.stdout).strip()[-2000:]}")
    live = workdir / "config" / "live" / name
    cert_pem = (live / "cert.pem").read_text()
    chain_pem = (live / "chain.pem").read_text()
    key_pem = (live / "privkey.pem").read_text()
    values = {"certificate": cert_pem, "chain": chain_pem, "private_key": key_pem, "acme_domains": " ".join(domains)}
    existing = Certificate.objects.filter(name=name).first()
    if existing:
        return services.certificate_update(target=existing, **values)
    return services.certificate_create(source=CertificateSourceChoices.ACME, name=name, **values)


def renew_due(prefix: Sequence[str] = (), env: dict | None = None) -> list[str]:
    """Renew every ACME certificate within ``RENEW_DAYS`` of its end; returns the names renewed."""
    renewed = []
    for cert in Certificate.objects.filter(source=CertificateSourceChoices.ACME):
        if cert.days_left is not None and cert.days_left > RENEW_DAYS:
            continue
        try:
            issue(cert.name, cert.acme_domains.split(), prefix, env)
            renewed.append(cert.name)
        except AcmeError as exc:
            log.warning("renewal of %s failed: %s", cert.name, exc)
    return renewed
