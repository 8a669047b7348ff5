"""Certificate checks and self-signed generation, with the ``cryptography`` package. Pure (no Django).

An upload is refused with errors keyed by the field to fix (``certificate``, ``chain``, ``private_key``): a PEM
that does not parse, a key that is not the certificate's, a chain out of order (each certificate must be issued
by the next), dates not yet or no longer valid, a certificate that names no host.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from system.tls import issued_by, public_key_bytes


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


def _load_certs(text: str) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(text.encode()) if text.strip() else []


def names_of(cert: x509.Certificate) -> list[str]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = san.get_values_for_type(x509.DNSName)
    except x509.ExtensionNotFound:
        names = []
    if not names:
        names = [a.value for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    return sorted(set(names))


def inspect(certificate: str, chain: str, private_key: str, now: datetime.datetime | None = None) -> Info:
    """Check the three PEM texts together; raise ``CertificateErrors`` with every field's problem."""
    now = now or datetime.datetime.now(datetime.UTC)
    errors: dict[str, str] = {}
    try:
        leaf_list = _load_certs(certificate)
    except ValueError:
        leaf_list = None
    if not leaf_list:
        errors["certificate"] = "Not a PEM certificate (-----BEGIN CERTIFICATE-----)."
    elif len(leaf_list) > 1:
        errors["certificate"] = "One certificate here; put the intermediates in the chain."
    try:
        chain_list = _load_certs(chain)
    except ValueError:
        chain_list = None
        errors["chain"] = "Not PEM certificates."
    key = None
    try:
        key = serialization.load_pem_private_key(private_key.encode(), password=None)
    except (ValueError, TypeError):
        errors["private_key"] = "Not an unencrypted PEM private key."
    if errors.get("certificate"):
        raise CertificateErrors(errors)
    leaf = leaf_list[0]
    if key is not None and public_key_bytes(key.public_key()) != public_key_bytes(leaf.public_key()):
        errors["private_key"] = "This key is not the certificate's key."
    if key is not None and not isinstance(key, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey):
        errors.setdefault("private_key", "Only RSA and ECDSA keys are supported.")
    if chain_list:
        sequence = [leaf, *chain_list]
        for i in range(len(sequence) - 1):
            if not issued_by(sequence[i], sequence[i + 1]):
                what = "the certificate" if i == 0 else f"chain certificate {i}"
                errors["chain"] = (
                    f"Out of order: {what} ({sequence[i].subject.rfc4514_string()}) is not issued by chain "
                    f"certificate {i + 1} ({sequence[i + 1].subject.rfc4514_string()}); list each issuer after "
                    "the certificate it signed."
                )
                break
        for i, cert in enumerate(chain_list, 1):
            if cert.not_valid_after_utc < now:
                errors.setdefault("chain", f"Chain certificate {i} expired on {cert.not_valid_after_utc:%Y-%m-%d}.")
    if leaf.not_valid_after_utc < now:
        errors["certificate"] = f"Expired on {leaf.not_valid_after_utc:%Y-%m-%d %H:%M} UTC."
    elif leaf.not_valid_before_utc > now:
        errors["certificate"] = f"Not valid before {leaf.not_valid_before_utc:%Y-%m-%d %H:%M} UTC."
    names = names_of(leaf)
    if not names:
        errors.setdefault("certificate", "The certificate names no host (no DNS name, no common name).")
    if errors:
        raise CertificateErrors(errors)
    return Info(
        names=names,
        issuer=leaf.issuer.rfc4514_string(),
        not_before=leaf.not_valid_before_utc,
        not_after=leaf.not_valid_after_utc,
        self_signed=leaf.issuer == leaf.subject,
    )


def self_signed(names: list[str], days: int = 365) -> tuple[str, str]:
    """(certificate PEM, key PEM): an ECDSA P-256 certificate for ``names``."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0][:64])])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    return cert.public_bytes(serialization.Encoding.PEM).decode(), key_pem
