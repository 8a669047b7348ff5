"""The backup archive's envelope: a JSON document, compressed, sealed with a passphrase. Pure (no Django).

Built only from ``cryptography``'s primitives, none of our own: scrypt derives 64 bytes from the passphrase and a
random salt; the first 32 are an AES-256-GCM key, the next 16 a check value kept in the header. AES-GCM encrypts
the compressed document and authenticates it together with the whole header (associated data), so a changed byte
anywhere is found before anything is read.

The check value tells the two failures apart without trying the key: a wrong passphrase gives another check value
(:class:`WrongPassphrase`); the right one with a changed body fails GCM's tag (:class:`DamagedArchive`).

Layout (big-endian): ``MAGIC`` (16 bytes), log2 of scrypt's N (1), r (1), p (1), salt (16), nonce (12), check (16),
then the ciphertext with its 16-byte tag.
"""

from __future__ import annotations

import hmac
import os
import struct
import zlib

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

MAGIC = b"LBWEB-BACKUP\x00\x00\x00\x01"
HEADER = struct.Struct(">16sBBB16s12s16s")
LOG2_N, R, P = 17, 8, 1  # scrypt: 128 MiB and about half a second here per derivation
MAX_LOG2_N = 20  # a hostile header cannot make the appliance derive with more than 1 GiB
MAX_DOCUMENT = 256 * 1024 * 1024  # decompressed
MIN_PASSPHRASE = 12
SUFFIX = ".lbbackup"


class ArchiveError(Exception):
    """The archive cannot be opened; ``field`` names what is wrong ("passphrase" or "archive")."""

    field = "archive"


class NotAnArchive(ArchiveError):
    pass


class WrongPassphrase(ArchiveError):
    field = "passphrase"


class DamagedArchive(ArchiveError):
    pass


def passphrase_problem(passphrase: object) -> str | None:
    if not isinstance(passphrase, str) or len(passphrase) < MIN_PASSPHRASE:
        return f"Give a passphrase of at least {MIN_PASSPHRASE} characters."
    return None


def _derive(passphrase: str, salt: bytes, log2_n: int, r: int, p: int) -> tuple[bytes, bytes]:
    derived = Scrypt(salt=salt, length=64, n=2**log2_n, r=r, p=p).derive(passphrase.encode())
    return derived[:32], derived[32:48]


def seal(document: bytes, passphrase: str) -> bytes:
    """``document`` compressed and encrypted under ``passphrase``: the archive's bytes."""
    salt, nonce = os.urandom(16), os.urandom(12)
    key, check = _derive(passphrase, salt, LOG2_N, R, P)
    header = HEADER.pack(MAGIC, LOG2_N, R, P, salt, nonce, check)
    return header + AESGCM(key).encrypt(nonce, zlib.compress(document, 6), header)


def open_(archive: bytes, passphrase: str) -> bytes:
    """The document inside ``archive``; raises :class:`ArchiveError` saying why it cannot be had."""
    if len(archive) < HEADER.size + 16 or archive[: len(MAGIC)] != MAGIC:
        raise NotAnArchive("This is not an lbweb backup archive (or its beginning is missing).")
    magic, log2_n, r, p, salt, nonce, check = HEADER.unpack_from(archive)
    if not (10 <= log2_n <= MAX_LOG2_N and 1 <= r <= 32 and 1 <= p <= 16):
        raise DamagedArchive("The archive's header is damaged (its key derivation parameters are not lbweb's).")
    key, expected = _derive(passphrase, salt, log2_n, r, p)
    if not hmac.compare_digest(check, expected):
        raise WrongPassphrase("This passphrase does not open the archive (or the archive's header is damaged).")
    header = archive[: HEADER.size]
    try:
        compressed = AESGCM(key).decrypt(nonce, archive[HEADER.size :], header)
    except InvalidTag:
        raise DamagedArchive(
            "The archive is damaged: its content does not match its authentication tag (truncated or changed)."
        ) from None
    decompressor = zlib.decompressobj()
    document = decompressor.decompress(compressed, MAX_DOCUMENT)
    if decompressor.unconsumed_tail:
        raise DamagedArchive(f"The archive's document is larger than {MAX_DOCUMENT // 2**20} MiB.")
    return document
