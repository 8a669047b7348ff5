"""Hostile text for the engines' fields: mostly what looks valid, with the characters that end a quote, start a
comment, a variable or a sample expression, break a line or are not text at all mixed in, and sometimes any
unicode (lone surrogates included, which a JSON body can carry and UTF-8 cannot)."""

from __future__ import annotations

from hypothesis import strategies as st

SPECIALS = (
    "\n", "\r", "\t", " ", "\x00", "\x0b", "\x1f", "\x7f", "\x85", "\u2028", "\u00a0", "\ud800", "\u202e", "é", "€",
    '"', "'", "#", "%", "%%", "%[", "%{", "\\", "\\n", "\\x41", "$", "${HOME}", "$HOME", "{", "}", "(", ")", ",",
    ";", "=", "-", "--", "!", "*", "|", "`", "^", "~", "/", "?", "&", ":", "@", "[", "]", "<", ">",
    " if TRUE", " #", "\nlisten evil", "\n}\nx", "'\"", "env(HOME)", "-i", "-m",
)  # fmt: skip
ANY_CHARACTER = st.one_of(st.characters(), st.characters(categories=["Cs"]))
PRINTABLE_ASCII = "".join(chr(c) for c in range(0x20, 0x7F))


def hostile(valid: str, max_size: int = 40, min_size: int = 0, samples: tuple[str, ...] = ()) -> st.SearchStrategy[str]:
    """Text over ``valid`` (a field's own alphabet), the same with ``SPECIALS`` mixed in, printable ASCII, any
    unicode, or one of ``samples`` (the field's known traps: names the engine treats apart, inputs that once got
    through); each about as often."""
    pieces = st.one_of(st.text(valid, min_size=1, max_size=8), st.sampled_from(SPECIALS))
    return st.one_of(
        st.text(valid, min_size=max(min_size, 1), max_size=max_size),
        st.lists(pieces, min_size=1, max_size=6).map("".join),
        st.text(PRINTABLE_ASCII, min_size=min_size, max_size=max_size),
        st.text(ANY_CHARACTER, min_size=min_size, max_size=max_size),
        *([st.sampled_from(samples)] if samples else []),
    )


def prefixed(prefix: str, strategy: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """``strategy``'s text, most of the time after ``prefix`` (a path's ``/``), so more of it gets past the first
    check."""
    return st.one_of(strategy.map(lambda text: prefix + text), strategy)
