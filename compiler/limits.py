"""What the kernel and libnftables accept, measured, so that validation refuses the rest before it is saved.

Every bound here was found by applying documents with libnftables 1.0.6 (Debian 12) in a throwaway
network namespace (``unshare -n``) and reading the ruleset back. ``tests/farms/test_kernel_bounds_validation.py``
checks that validation refuses what lies beyond them, and ``tests/dataplane/test_fuzz_apply.py`` that the kernel applies
what validation accepts.

- Log prefix: the kernel keeps 127 bytes plus a NUL (NF_LOG_PREFIXLEN). 128 bytes are refused
  ("Numerical result out of range"); from about 140 bytes libnftables 1.0.6 overflows a 128-byte
  stack buffer and the process dies (``*** stack smashing detected ***``, signal 6). Bytes, not
  characters: 32 emoji are 128 bytes. A NUL cannot travel in libnftables' JSON at all.
- Names of chains, sets, maps and counters: 255 bytes (256 is refused). lbweb derives them from
  farm and policy names (at most 48 and 40 ASCII characters) and ids; the longest,
  ``persist-<farm>-<backend id>-<6 hex>``, stays far below.
- Rule comments: 253 bytes; at 254 libnftables 1.0.6 aborts ("Memory allocation failure"). lbweb's
  only comments are its fixed-length digests.
- ``ct count`` (connection limits): the kernel stores 32 bits but libnftables reads it back as a
  signed int: 2^31 lists as -2147483648 and 2^32 becomes 0 (no limit at all, silently).
- ``limit`` bursts: 32 bits; 2^32 and above silently become nft's default burst of 5. Rates are
  64-bit in the kernel, but a rate above 2^31 - 1 per second is no limit on any link, and
  PostgreSQL's integer column holds no more: one bound for every rate, burst and count.
- ``numgen``/``jhash`` modulus (the sum of the active backends' weights): 32 bits; with weights of
  at most 10,000 that is 429,496 backends.
- Set timeouts (persistence TTL): accepted up to about 2^31 seconds; lbweb allows 7 days.
"""

from __future__ import annotations

LOG_PREFIX_BYTES = 127
KERNEL_NAME_BYTES = 255
RULE_COMMENT_BYTES = 253
KERNEL_INT_MAX = 2**31 - 1  # rates, bursts, connection counts (see the module's docstring)
PORT_MIN, PORT_MAX = 1, 65535


def utf8_length(text: str) -> int:
    return len(text.encode("utf-8", errors="surrogatepass"))


def truncate_utf8(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` bytes of UTF-8, never inside a character."""
    data = text.encode("utf-8", errors="surrogatepass")
    if len(data) <= limit:
        return text
    return data[:limit].decode("utf-8", errors="ignore")
