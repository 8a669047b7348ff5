"""Certificates for the TLS tests, made with the ``cryptography`` package: a root, an intermediate, leaves."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

NOW = datetime.datetime.now(datetime.UTC)


@dataclass
class Issued:
    cert: x509.Certificate
    key: object

    @property
    def pem(self) -> str:
        return self.cert.public_bytes(serialization.Encoding.PEM).decode()

    @property
    def key_pem(self) -> str:
        return self.key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ).decode()

    @property
    def serial(self) -> str:
        return format(self.cert.serial_number, "x")


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _san(name: str) -> x509.GeneralName:
    """An address as an IP SAN (a client that connects to 127.0.0.1 checks that), anything else as a DNS name."""
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def issue(
    cn: str,
    issuer: Issued | None = None,
    *,
    ca: bool = False,
    names: tuple[str, ...] = ("localhost",),
    not_before: datetime.datetime | None = None,
    not_after: datetime.datetime | None = None,
    key=None,
) -> Issued:
    """A certificate for ``cn`` signed by ``issuer`` (itself when None), valid from an hour ago for a year."""
    key = key or ec.generate_private_key(ec.SECP256R1())
    not_after = not_after or NOW + datetime.timedelta(days=365)
    not_before = not_before or min(NOW - datetime.timedelta(hours=1), not_after - datetime.timedelta(days=30))
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(issuer.cert.subject if issuer else _name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if not ca:
        builder = builder.add_extension(x509.SubjectAlternativeName([_san(n) for n in names]), critical=False)
    cert = builder.sign(issuer.key if issuer else key, hashes.SHA256())
    return Issued(cert, key)


def chain() -> tuple[Issued, Issued, Issued]:
    """(root, intermediate, leaf for localhost)."""
    root = issue("lbweb test root", ca=True)
    intermediate = issue("lbweb test intermediate", root, ca=True)
    return root, intermediate, issue("localhost", intermediate)


def rsa_key(bits: int = 2048):
    return rsa.generate_private_key(public_exponent=65537, key_size=bits)
