"""Value codecs between nftlb's JSON strings and lbweb's field values (pure: no Django, no kernel).

nftlb writes every value as a JSON string ("weight": "5"); a parser here also accepts the JSON number or
boolean a person may type. A parser returns the lbweb value, or :class:`Lossy` when the value is kept
only in part (the reason is reported), and raises :class:`BadValue` for a value lbweb cannot take.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..validation import parse_mac

ON_OFF = {"on": True, "off": False}


class BadValue(ValueError):
    """A value lbweb cannot take; the message says why and what would do."""


@dataclass(frozen=True)
class Lossy:
    """A value lbweb keeps only in part: ``value`` is what it keeps, ``reason`` what it leaves out."""

    value: Any
    reason: str


Parser = Callable[[Any], Any]


def text(raw: Any) -> str:
    if raw is None or isinstance(raw, dict | list | bool):
        raise BadValue("must be a string")
    return str(raw).strip()


def verbatim(raw: Any) -> str:
    """Text kept exactly, spaces included (a log prefix usually ends with one)."""
    if raw is None or isinstance(raw, dict | list | bool):
        raise BadValue("must be a string")
    return str(raw)


def tokens(raw: Any) -> list[str]:
    """nftlb's multi-word values ("srcip srcport", "input forward"), split on spaces or commas."""
    return [t for t in re.split(r"[\s,]+", text(raw).lower()) if t]


def integer(low: int = 0, high: int | None = None) -> Parser:
    def parse(raw: Any) -> int:
        value = text(raw)
        if not re.fullmatch(r"[0-9]+", value):  # int() would also read "٨٠" and "8_0"
            raise BadValue(f"'{value}' is not a whole number")
        number = int(value)
        if number < low or (high is not None and number > high):
            bounds = f"{low}-{high}" if high is not None else f"at least {low}"
            raise BadValue(f"{number} is out of range ({bounds})")
        return number

    return parse


def optional_port(raw: Any) -> int | None:
    """A backend port; empty means the port the client connected to."""
    return integer(1, 65535)(raw) if text(raw) else None


def ip_address(raw: Any) -> str:
    value = text(raw)
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise BadValue(f"'{value}' is not an IPv4 or IPv6 address") from None


def mac(raw: Any) -> str:
    value = text(raw)
    if not value:
        return ""
    try:
        return parse_mac(value)
    except ValueError as exc:
        raise BadValue(str(exc)) from None


def switch(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    value = text(raw).lower()
    if value not in ON_OFF:
        raise BadValue(f"'{value}' must be 'on' or 'off'")
    return ON_OFF[value]


def dump_switch(value: bool) -> str:
    return "on" if value else "off"


def dump_switch_if_on(value: bool) -> str | None:
    return "on" if value else None


def choice(values: dict[str, Any], unsupported: dict[str, str] | None = None) -> Parser:
    """One of ``values`` (nftlb word -> lbweb value); a word of ``unsupported`` is refused with its reason."""

    def parse(raw: Any) -> Any:
        value = text(raw).lower()
        if value in values:
            return values[value]
        if unsupported and value in unsupported:
            raise BadValue(unsupported[value])
        raise BadValue(f"'{value}' is not one of {', '.join(values)}")

    return parse


def rate(raw: Any) -> dict[str, Any]:
    """``N`` or ``N/<second|minute|hour|day|week>``: the number and its unit, both kept (the kernel limits
    per minute or per hour exactly, so nothing is rounded)."""
    value = text(raw).lower().replace(" ", "")
    match = re.fullmatch(r"([0-9]+)(?:/(second|minute|hour|day|week))?", value)
    if not match:
        raise BadValue(f"'{value}' is not a rate like 10/second or 600/minute")
    return {"number": int(match.group(1)), "unit": match.group(2) or "second"}


def dump_rate(number: int, unit: str) -> str:
    return f"{number}/{unit}"


def hex_mark(raw: Any) -> int:
    """nftlb's marks: hexadecimal (``0x200``), as nftlb reads them; a 32-bit packet mark."""
    value = text(raw).lower()
    if not value:
        return 0
    try:
        number = int(value, 16)
    except ValueError:
        raise BadValue(f"'{value}' is not a hexadecimal mark like 0x200") from None
    if not 0 <= number < 2**32:
        raise BadValue(f"'{value}' does not fit a 32-bit packet mark")
    return number


def dump_hex(value: int) -> str:
    return f"0x{value:x}"


def word_set(allowed: dict[frozenset[str], str], words: str) -> Parser:
    """A set of words (order free, 'none' for empty) mapped to lbweb's value."""

    def parse(raw: Any) -> str:
        found = frozenset(tokens(raw)) - {"none"}
        if found in allowed:
            return allowed[found]
        raise BadValue(f"'{text(raw)}' is not supported; use {words}")

    return parse


def hash_fields(allowed: list[str]) -> Parser:
    def parse(raw: Any) -> str:
        fields = [t for t in tokens(raw) if t != "none"]
        unknown = [t for t in fields if t not in allowed]
        if unknown:
            raise BadValue(f"unknown hash field(s) {', '.join(unknown)}; use {', '.join(allowed)}")
        return " ".join(dict.fromkeys(fields))

    return parse


def none_if_empty(value: str) -> str:
    return value or "none"


def omit_if_empty(value: Any) -> str | None:
    return None if value in ("", None) else str(value)


def number(value: int) -> str:
    return str(value)
