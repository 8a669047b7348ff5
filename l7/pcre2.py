"""Regular expressions compiled as HAProxy compiles them: by the PCRE2 library HAProxy itself links (Debian's
``libpcre2-8``), through ctypes.

Python's ``re`` is another dialect: it takes ``(?a)x`` and ``\\N{DIGIT ONE}``, which PCRE2 refuses, and refuses some
patterns PCRE2 takes. A binding from PyPI would bring its own build of PCRE2 (another version, other build
options); loading the very library HAProxy loads gives its verdict and its words. The options are those of
HAProxy 2.6's ``regex_comp()`` for an ACL's ``-m reg`` pattern: no automatic captures (so ``(a)\\1`` refers to a
group that does not exist), caseless with ``-i``, then the JIT compilation HAProxy's build (``USE_PCRE2_JIT``) runs
and refuses the pattern on.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

LIBRARY = "libpcre2-8.so.0"
CASELESS = 0x00000008
NO_AUTO_CAPTURE = 0x00002000
JIT_COMPLETE = 0x00000001
ERROR_JIT_BADOPTION = -45  # PCRE2 built without JIT: HAProxy then matches without it, and so accepts


@functools.cache
def _library() -> ctypes.CDLL:
    try:
        lib = ctypes.CDLL(ctypes.util.find_library("pcre2-8") or LIBRARY)
    except OSError as exc:
        raise RuntimeError(
            f"{LIBRARY} (HAProxy's regex library) is not installed: apt-get install libpcre2-8-0"
        ) from exc
    lib.pcre2_compile_8.restype = ctypes.c_void_p
    lib.pcre2_compile_8.argtypes = [
        ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint32, ctypes.POINTER(ctypes.c_int),
        ctypes.POINTER(ctypes.c_size_t), ctypes.c_void_p,
    ]  # fmt: skip
    lib.pcre2_jit_compile_8.restype = ctypes.c_int
    lib.pcre2_jit_compile_8.argtypes = [ctypes.c_void_p, ctypes.c_uint32]
    lib.pcre2_code_free_8.restype = None
    lib.pcre2_code_free_8.argtypes = [ctypes.c_void_p]
    lib.pcre2_get_error_message_8.restype = ctypes.c_int
    lib.pcre2_get_error_message_8.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
    return lib


def _message(lib: ctypes.CDLL, code: int) -> str:
    buffer = ctypes.create_string_buffer(256)
    lib.pcre2_get_error_message_8(code, buffer, len(buffer))
    return buffer.value.decode(errors="replace")


def compile_error(pattern: str, caseless: bool = True) -> str | None:
    """None when HAProxy compiles ``pattern`` (its UTF-8 bytes, as the configuration carries them), else PCRE2's
    own words with the offset, as HAProxy reports them."""
    lib = _library()
    data = pattern.encode()
    code, offset = ctypes.c_int(0), ctypes.c_size_t(0)
    options = NO_AUTO_CAPTURE | (CASELESS if caseless else 0)
    compiled = lib.pcre2_compile_8(data, len(data), options, ctypes.byref(code), ctypes.byref(offset), None)
    if not compiled:
        return f"{_message(lib, code.value)} (at offset {offset.value})"
    try:
        jit = lib.pcre2_jit_compile_8(compiled, JIT_COMPLETE)
        if jit < 0 and jit != ERROR_JIT_BADOPTION:
            return f"the JIT compilation HAProxy runs fails: {_message(lib, jit)}"
        return None
    finally:
        lib.pcre2_code_free_8(compiled)
