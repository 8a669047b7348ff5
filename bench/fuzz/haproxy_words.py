"""HAProxy's configuration read back into words, as its manual (section 2.2, "Quoting and escaping") says HAProxy
reads it: written from the manual, independently of the generator's escaping, so a round trip through both is a
test of the generator (``compiler/haproxy/config.py``), not of itself.

Strict: what the generator must never write (an unterminated quote, a ``$`` that HAProxy would expand, an escape the
manual does not list) raises ``Unreadable`` instead of being guessed at.
"""

from __future__ import annotations

ESCAPES = {" ": " ", "#": "#", "\\": "\\", "'": "'", '"': '"', "n": "\n", "r": "\r", "t": "\t"}


class Unreadable(ValueError):
    """HAProxy would read this differently from any literal word (a variable, a bad escape, an open quote)."""


def words(line: str) -> list[str]:
    """The words of one configuration line, quotes and escapes resolved; a ``#`` outside quotes ends the line."""
    return _split(line, top_level=True)


def _split(text: str, top_level: bool) -> list[str]:
    """Words of ``text`` (a line: split at spaces and tabs; a keyword's arguments: split at commas), as HAProxy's
    parser reads them at that level."""
    separators = " \t" if top_level else ","
    out: list[str] = []
    current: list[str] | None = None
    i, quote = 0, ""
    while i < len(text):
        c = text[i]
        if quote == "'":
            if c == "'":
                quote = ""
            else:
                current.append(c)
            i += 1
            continue
        if c == "\\":
            current = [] if current is None else current
            piece, i = _escape(text, i, top_level)
            current.append(piece)
            continue
        if quote == '"':
            if c == '"':
                quote = ""
            elif c == "$" and top_level:
                raise Unreadable(f"an unescaped $ in double quotes names a variable: {text!r}")
            else:
                current.append(c)
        elif c in separators:
            if current is not None:
                out.append("".join(current))
                current = None
        elif c == "#" and top_level:
            break
        elif c == ")" and not top_level:
            raise Unreadable(f"')' ends the arguments early: {text!r}")
        else:
            current = [] if current is None else current
            if c in "'\"":
                quote = c
            else:
                current.append(c)
        i += 1
    if quote:
        raise Unreadable(f"an open quote: {text!r}")
    if current is not None:
        out.append("".join(current))
    return out


def _escape(line: str, i: int, top_level: bool) -> tuple[str, int]:
    """The character a backslash at ``line[i]`` stands for, and where reading goes on."""
    if i + 1 >= len(line):
        raise Unreadable(f"a backslash ends the line: {line!r}")
    c = line[i + 1]
    if c == "x" and top_level:
        digits = line[i + 2 : i + 4]
        if len(digits) != 2 or any(d not in "0123456789abcdefABCDEF" for d in digits):
            raise Unreadable(f"\\x without two hex digits: {line!r}")
        return chr(int(digits, 16)), i + 4
    if c in ESCAPES and (top_level or c not in "#$"):
        return ESCAPES[c], i + 2
    if c == "$" and top_level:
        return "$", i + 2
    raise Unreadable(f"an escape HAProxy does not list, \\{c}: {line!r}")


def fetch_argument(word: str, name: str) -> str:
    """The one argument of sample fetch ``name`` in ``word`` (``req.hdr("X-A")`` -> ``X-A``), read by the second
    level of HAProxy's parser: quotes and backslashes again, without ``\\#``, ``\\$`` and ``\\xNN``."""
    prefix = f"{name}("
    if not word.startswith(prefix) or not word.endswith(")"):
        raise Unreadable(f"not a call of {name}: {word!r}")
    arguments = _split(word[len(prefix) : -1], top_level=False)
    if len(arguments) != 1:
        raise Unreadable(f"{len(arguments)} arguments, not one: {word!r}")
    return arguments[0]


def log_format_text(word: str) -> str:
    """The literal text of a log-format word: ``%%`` is ``%``; any other ``%`` starts a sample expression."""
    out, i = [], 0
    while i < len(word):
        if word[i] == "%":
            if word[i + 1 : i + 2] != "%":
                raise Unreadable(f"a % that starts an expression: {word!r}")
            out.append("%")
            i += 2
        else:
            out.append(word[i])
            i += 1
    return "".join(out)
