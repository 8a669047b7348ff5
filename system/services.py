"""Writes of the system app, audited like every other write (:mod:`farms.audit`)."""

from __future__ import annotations

from django.db import transaction

from farms.audit import record

from . import tls


def certificate_replace(*, certificate: str, key: str, chain: str = "", actor=None) -> tls.CertificateInfo:
    """Install the operator's certificate (+ chain) and key for the web server's TLS.

    Raises :class:`tls.CertificateError` (by field) before anything is written, so a bad upload leaves
    the old certificate in use. The audit event and the files go together: the event is written first
    in the transaction and the transaction rolls back if writing the files fails.
    """
    certs, private_key = tls.validate(certificate, key, chain)
    new = tls.info(certs[0], certs[1:])
    old = tls.current()
    with transaction.atomic():
        record(
            actor=actor,
            action="replace",
            object_type="certificate",
            object_name=new.subject,
            before=old.as_dict() if old else None,
            after=new.as_dict(),
        )
        tls.install(certs, private_key)
    return new
