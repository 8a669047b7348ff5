"""Virtual port lists: ``80,443,8000-8100`` <-> sorted, merged ranges."""

from __future__ import annotations

import re
from collections.abc import Iterable

# ASCII digits only: Python's int() also reads "٨٠" (Arabic-Indic digits) and "8_0" as 80, which the
# operator did not write as 80 and no other tool would read so.
DIGITS = re.compile(r"[0-9]+", re.ASCII)


def parse_port_number(text: str) -> int:
    """A number written with ASCII digits; ValueError for anything else."""
    if not isinstance(text, str) or not DIGITS.fullmatch(text):
        raise ValueError(f"'{text}' is not a number written with the digits 0-9")
    return int(text)


class PortSyntaxError(ValueError):
    pass


def parse_ports(text: str) -> list[tuple[int, int]]:
    """Parse a port list; ranges are merged and sorted. Raises PortSyntaxError with a clear reason."""
    ranges: list[tuple[int, int]] = []
    for raw in (text or "").replace(" ", "").split(","):
        if not raw:
            continue
        low_s, sep, high_s = raw.partition("-")
        try:
            low = parse_port_number(low_s)
            high = parse_port_number(high_s) if sep else low
        except ValueError:
            raise PortSyntaxError(f"'{raw}' is not a port or a range like 8000-8100 (digits 0-9)") from None
        for port in (low, high):
            if not 1 <= port <= 65535:
                raise PortSyntaxError(f"port {port} is out of range (1-65535)")
        if high < low:
            raise PortSyntaxError(f"range '{raw}' ends before it starts")
        ranges.append((low, high))
    return merge_ranges(ranges)


def merge_ranges(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Port ranges sorted, as few as cover the same ports: overlapping or adjacent ones joined."""
    merged: list[tuple[int, int]] = []
    for low, high in sorted(ranges):
        if merged and low <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(high, merged[-1][1]))
        else:
            merged.append((low, high))
    return merged


def format_ports(ranges: list[tuple[int, int]]) -> str:
    return ",".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in ranges)


def overlaps(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The ranges the two lists have in common."""
    return [(max(x[0], y[0]), min(x[1], y[1])) for x in a for y in b if x[0] <= y[1] and y[0] <= x[1]]
