"""What an authenticator app computes: the TOTP code of a secret (RFC 6238, django-otp's own implementation)."""

from __future__ import annotations

import base64
import time

from django_otp.oath import TOTP


def code(secret: bytes | str, *, steps_ahead: int = 0) -> str:
    """The code for ``secret`` (raw bytes, or base32 as the enrolment page shows it) ``steps_ahead`` periods from
    now. A device accepts each time step once: a second login within 30 s uses the next step's code (accepted by
    the one step of tolerance a device allows for a phone's clock)."""
    key = base64.b32decode(secret) if isinstance(secret, str) else secret
    totp = TOTP(key, step=30, t0=0, digits=6)
    totp.time = time.time() + 30 * steps_ahead
    return f"{totp.token():06d}"
