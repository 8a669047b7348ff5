"""HTTPS farms' certificates: the web server's checks (``system/tls.py``) with what SNI adds. Pure (no Django).

One validator for every certificate the appliance serves: ``system.tls.validate`` parses the PEM texts, checks the
key against the certificate, the chain's order (each certificate issued by the next) and every date, and refuses
passphrase-protected, weak or unsupported keys. This module keys its errors by the model's fields
(``certificate``, ``chain``, ``private_key``) and adds the one rule of a certificate chosen by the client's SNI: it
must name a host. A certificate field that carries its chain after the leaf (a "fullchain" file, as certbot writes
it) is split into the leaf and the chain.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from cryptography import x509
from cryptography.x509.oid import NameOID

from system import tls

FIELDS = {"certificate": "certificate", "chain": "chain", "key": "private_key"}


class CertificateErrors(Exception):
    def __init__(self, errors: dict[str, str]):
        super().__init__("; ".join(f"{k}: {v}" for k, v in errors.items()))
        self.errors = errors


@dataclass(frozen=True)
class Info:
    names: list[str]
    issuer: str
    not_before: datetime.datetime
    not_after: datetime.datetime
    self_signed: bool
    certificate: str  # the leaf alone (PEM)
    chain: str  # every certificate after it, in order (PEM)


def names_of(cert: x509.Certificate) -> list[str]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = san.get_values_for_type(x509.DNSName)
    except x509.ExtensionNotFound:
        names = []
    if not names:
        names = [a.value for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    return sorted(set(names))


def inspect(certificate: str, chain: str, private_key: str) -> Info:
    """Check the three PEM texts together; raise ``CertificateErrors`` with every field's problem."""
    try:
        certs, _key = tls.validate(certificate, private_key, chain)
    except tls.CertificateError as exc:
        raise CertificateErrors({FIELDS[name]: " ".join(messages) for name, messages in exc.errors.items()}) from None
    leaf = certs[0]
    names = names_of(leaf)
    if not names:
        raise CertificateErrors({"certificate": "The certificate names no host (no DNS name, no common name)."})
    return Info(
        names=names,
        issuer=leaf.issuer.rfc4514_string(),
        not_before=leaf.not_valid_before_utc,
        not_after=leaf.not_valid_after_utc,
        self_signed=leaf.issuer == leaf.subject,
        certificate=tls.pem_of(certs[:1]).decode(),
        chain=tls.pem_of(certs[1:]).decode(),
    )


def self_signed(names: list[str], days: int = 365) -> tuple[str, str]:
    """(certificate PEM, key PEM): the web server's kind of self-signed certificate (EC P-256) for ``names``."""
    cert, key = tls.self_signed(names, days)
    return tls.pem_of([cert]).decode(), tls.key_pem(key).decode()
