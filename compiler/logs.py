"""nftlb's logging, shared by the NAT and the DSR compilers: prefixes with nftlb's placeholders, and
rates in nftlb's units (pure)."""

from __future__ import annotations

from compiler.types import Json

from .limits import LOG_PREFIX_BYTES, truncate_utf8
from .spec import FarmSpec

DEFAULT_LOG_PREFIX = "TYPE-FNAME "  # nftlb's: IN-<farm>, FWD-<farm>, OUT-<farm>


def rate(rate: int, unit: str, *, over: bool = False, burst: int = 0) -> Json:
    """A token bucket of ``rate`` per ``unit`` (second, minute, hour, day, week: nftlb's units, kept exact)."""
    body: Json = {"rate": rate, "per": unit}
    if over:
        body["inv"] = True
    if burst:
        body["burst"] = burst
    return {"limit": body}


def expand_log_prefix(template: str, farm_name: str, kind: str) -> str:
    """nftlb's log prefix placeholders, replaced as nftlb replaces them: FNAME and ANAME (lbweb has no
    address objects: the farm's name), KNAME (``log``), TYPE (``IN``, ``FWD`` or ``OUT``)."""
    text = template.replace("FNAME", farm_name).replace("ANAME", farm_name).replace("KNAME", "log")
    return text.replace("TYPE", kind)


def farm_log_prefix(farm: FarmSpec, kind: str) -> str:
    # The kernel keeps 127 bytes (not characters); libnftables 1.0.6 crashes on ~140 (see limits.py).
    return truncate_utf8(expand_log_prefix(farm.log_prefix or DEFAULT_LOG_PREFIX, farm.name, kind), LOG_PREFIX_BYTES)


def log_statements(farm: FarmSpec, kind: str) -> list[Json]:
    """A log line with nftlb's prefix, at the farm's log rate (none: every packet, nftlb's default)."""
    limit = [rate(farm.log_rtlimit, farm.log_rtlimit_unit)] if farm.log_rtlimit else []
    return [*limit, {"log": {"prefix": farm_log_prefix(farm, kind)}}]
