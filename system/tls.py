"""The web server's TLS certificate: made self-signed at first start, replaceable by the operator's own; and the
one certificate validator of the appliance (HTTPS farms' certificates are checked here too, ``l7/certificates.py``).

Pure functions over PEM text (the ``cryptography`` package does every piece of cryptography) plus the
one function that writes the files. No Django import: ``manage.py ensure_tls``, the upload service and
gunicorn's configuration share it.

The files are ``$LBWEB_VAR_DIR/tls/lbweb.crt`` (the leaf, then its chain) and ``lbweb.key``, in a 0700
directory, 0600 each, each replaced atomically. gunicorn reads them again when they change
(``lbweb/gunicorn_conf.py``), so an upload takes effect at the next TLS handshake.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass, field

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from lbweb.paths import ensure_private_dir, stage_private, tls_cert_path, tls_dir, tls_key_path

# 825 days: the longest validity Apple's platforms accept for a TLS server certificate, even one the user
# trusts by hand; the set-up makes a new one when a self-signed certificate has less than RENEW_BEFORE left.
SELF_SIGNED_DAYS = 825
RENEW_BEFORE = datetime.timedelta(days=30)
MIN_RSA_BITS = 2048


class CertificateError(ValueError):
    """An upload that cannot be used; ``errors`` maps a field (certificate, chain, key) to its messages."""

    def __init__(self, errors: dict[str, list[str]]):
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in errors.items()))
        self.errors = errors


@dataclass(frozen=True)
class CertificateInfo:
    """What an operator checks about a certificate (the API and the page show this)."""

    subject: str
    issuer: str
    sans: list[str]
    serial: str
    not_before: datetime.datetime
    not_after: datetime.datetime
    fingerprint_sha256: str
    key_type: str
    self_signed: bool
    chain: list[str] = field(default_factory=list)  # subjects of the chain certificates, in order

    def as_dict(self) -> dict:
        return {
            "subject": self.subject,
            "issuer": self.issuer,
            "sans": self.sans,
            "serial": self.serial,
            "not_before": self.not_before.isoformat(),
            "not_after": self.not_after.isoformat(),
            "fingerprint_sha256": self.fingerprint_sha256,
            "key_type": self.key_type,
            "self_signed": self.self_signed,
            "chain": self.chain,
        }


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _key_type(public_key) -> str:
    if isinstance(public_key, rsa.RSAPublicKey):
        return f"RSA {public_key.key_size}"
    if isinstance(public_key, ec.EllipticCurvePublicKey):
        return f"EC {public_key.curve.name}"
    return type(public_key).__name__


def _sans(cert: x509.Certificate) -> list[str]:
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return [str(n) for n in names.get_values_for_type(x509.DNSName)] + [
        str(a) for a in names.get_values_for_type(x509.IPAddress)
    ]


def info(cert: x509.Certificate, chain: list[x509.Certificate] = ()) -> CertificateInfo:
    return CertificateInfo(
        subject=cert.subject.rfc4514_string(),
        issuer=cert.issuer.rfc4514_string(),
        sans=_sans(cert),
        serial=format(cert.serial_number, "x"),
        not_before=cert.not_valid_before_utc,
        not_after=cert.not_valid_after_utc,
        fingerprint_sha256=cert.fingerprint(hashes.SHA256()).hex(":").upper(),
        key_type=_key_type(cert.public_key()),
        self_signed=cert.issuer == cert.subject,
        chain=[c.subject.rfc4514_string() for c in chain],
    )


def public_key_bytes(key) -> bytes:
    return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def _load_certs(text: str, name: str, errors: dict[str, list[str]]) -> list[x509.Certificate]:
    try:
        return x509.load_pem_x509_certificates(text.encode())
    except ValueError:
        errors.setdefault(name, []).append(
            "Not a PEM certificate: expected one or more '-----BEGIN CERTIFICATE-----' blocks."
        )
        return []


def _load_key(text: str, errors: dict[str, list[str]]):
    try:
        key = serialization.load_pem_private_key(text.encode(), password=None)
    except TypeError:
        errors.setdefault("key", []).append("The key is protected by a passphrase: upload it without one.")
        return None
    except (ValueError, UnsupportedAlgorithm):
        errors.setdefault("key", []).append(
            "Not a PEM private key: expected a '-----BEGIN ... PRIVATE KEY-----' block."
        )
        return None
    if isinstance(key, rsa.RSAPrivateKey) and key.key_size < MIN_RSA_BITS:
        errors.setdefault("key", []).append(f"An RSA key of {key.key_size} bits is too weak: {MIN_RSA_BITS} at least.")
        return None
    if not isinstance(key, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey):
        errors.setdefault("key", []).append("Only RSA and EC keys are supported.")
        return None
    return key


def _check_dates(cert: x509.Certificate, name: str, label: str, now, errors: dict[str, list[str]]) -> None:
    if cert.not_valid_after_utc <= now:
        errors.setdefault(name, []).append(f"{label} expired on {cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC.")
    elif cert.not_valid_before_utc > now:
        errors.setdefault(name, []).append(
            f"{label} is not valid before {cert.not_valid_before_utc:%Y-%m-%d %H:%M} UTC."
        )


def issued_by(cert: x509.Certificate, issuer: x509.Certificate) -> bool:
    if cert.issuer != issuer.subject:
        return False
    try:
        cert.verify_directly_issued_by(issuer)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def validate(certificate: str, key: str, chain: str = "") -> tuple[list[x509.Certificate], object]:
    """Check an upload; return ``([leaf, *chain], key)`` or raise :class:`CertificateError` by field.

    ``certificate`` may carry its chain after the leaf (a "fullchain" file); ``chain`` adds more. The
    chain must be in order: each certificate issued by the next. Nothing is written here.
    """
    errors: dict[str, list[str]] = {}
    certs = _load_certs(certificate, "certificate", errors) if certificate.strip() else []
    if not certificate.strip():
        errors["certificate"] = ["Required: the certificate in PEM."]
    extra = _load_certs(chain, "chain", errors) if chain.strip() else []
    private_key = _load_key(key, errors) if key.strip() else None
    if not key.strip():
        errors["key"] = ["Required: the certificate's private key in PEM."]
    if errors:
        raise CertificateError(errors)
    now = _now()
    leaf, chain_certs = certs[0], certs[1:] + extra
    if public_key_bytes(private_key.public_key()) != public_key_bytes(leaf.public_key()):
        errors.setdefault("key", []).append("This key does not match the certificate's public key.")
    _check_dates(leaf, "certificate", "The certificate", now, errors)
    for number, (lower, upper) in enumerate(zip([leaf, *chain_certs], chain_certs, strict=False), start=1):
        if not issued_by(lower, upper):
            errors.setdefault("chain", []).append(
                f"Chain certificate {number} ({upper.subject.rfc4514_string()}) did not issue "
                f"{'the certificate' if number == 1 else f'chain certificate {number - 1}'} "
                f"({lower.subject.rfc4514_string()}): give the chain in order, each certificate followed by its issuer."
            )
            break
    for number, cert in enumerate(chain_certs, start=1):
        _check_dates(cert, "chain", f"Chain certificate {number} ({cert.subject.rfc4514_string()})", now, errors)
    if errors:
        raise CertificateError(errors)
    return [leaf, *chain_certs], private_key


def pem_of(certs: list[x509.Certificate]) -> bytes:
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)


def key_pem(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def install(certs: list[x509.Certificate], key) -> None:
    """Put the key and the certificate in place: both written in full first, then each renamed over the old.

    A failure while writing (a full disk) leaves the old pair untouched. Between the two renames the
    pair does not match; the web server's loader keeps its last good pair when a load fails
    (``lbweb/gunicorn_conf.py``), so no handshake sees the mix.
    """
    ensure_private_dir(tls_dir())
    staged_key = stage_private(tls_key_path(), key_pem(key))
    try:
        staged_cert = stage_private(tls_cert_path(), pem_of(certs))
    except BaseException:
        staged_key.unlink(missing_ok=True)
        raise
    os.replace(staged_key, tls_key_path())
    os.replace(staged_cert, tls_cert_path())


def current() -> CertificateInfo | None:
    """The certificate on disk now (what the next handshake presents), or None when there is none."""
    try:
        certs = x509.load_pem_x509_certificates(tls_cert_path().read_bytes())
    except (FileNotFoundError, ValueError):
        return None
    return info(certs[0], certs[1:])


def _san_entry(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def self_signed(names: list[str], days: int = SELF_SIGNED_DAYS) -> tuple[x509.Certificate, object]:
    """A new EC P-256 key and a certificate for ``names`` (host names and addresses) that it signs itself.

    P-256: as strong as RSA 3072 for a fraction of the handshake's CPU, and every client speaks it.
    """
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0][:64])])
    now = _now()
    unique = list(dict.fromkeys(names))
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName([_san_entry(n) for n in unique]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def needs_new_self_signed(now: datetime.datetime | None = None) -> str | None:
    """Why ``ensure_tls`` must make a certificate (None when the present one is fine).

    An operator's certificate (not self-signed) is never replaced, even near its end: that is theirs to
    renew; the page and the API show its date.
    """
    if not tls_cert_path().exists() or not tls_key_path().exists():
        return "no certificate yet"
    cert = current()
    if cert is None:
        return "the certificate file is unreadable"
    if cert.self_signed and cert.not_after - (now or _now()) < RENEW_BEFORE:
        return f"the self-signed certificate ends on {cert.not_after:%Y-%m-%d}"
    return None
