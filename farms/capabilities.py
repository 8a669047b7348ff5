"""What the kernel under the worker can do, as the worker probed it, read by the web side for validation.

The worker probes its kernel with dry runs when it starts (``dataplane.boot.publish_capabilities``) and
publishes the answer in Redis; the web process, which never touches the kernel, reads it here so that
``Farm.clean()`` refuses at save time what the apply would fail on (flow offload without flowtables, a
helper the kernel lacks, reject in the NAT hook). A missing answer (the worker never ran, Redis is
down, an older worker that did not probe that feature) refuses nothing: see
``validation._capability_errors``.
"""

from __future__ import annotations

import json
import logging
import time

from lbweb import redis_keys as keys

from .choices import FarmAllDownChoices, FarmModeChoices, LimitVerdictChoices

log = logging.getLogger("lbweb.farms")

REDIS_KEY = keys.CAPABILITIES
CACHE_SECONDS = 5  # an import of 1,000 farms reads Redis once, not 1,000 times
_cache: tuple[float, dict[str, bool] | None] | None = None


def forget() -> None:
    """Drop this process's copy (tests, and the worker right after it published)."""
    global _cache
    _cache = None


def published() -> dict[str, bool] | None:
    """The capabilities the worker last published, or None when there are none (or Redis is down)."""
    global _cache
    now = time.monotonic()
    if _cache is not None and now - _cache[0] < CACHE_SECONDS:
        return _cache[1]
    from lbweb.redis_client import get_redis

    try:
        raw = get_redis().get(REDIS_KEY)
    except Exception as exc:  # Redis down: nothing known, nothing refused (asked again in CACHE_SECONDS)
        log.info("kernel capabilities unknown (%s)", exc)
        _cache = (now, None)
        return None
    value = json.loads(raw) if raw else None
    if not isinstance(value, dict):
        return None  # not published yet: asked again next time, so the first publication counts at once
    _cache = (now, value)
    return value


def missing(farm, known: dict[str, bool]) -> dict[str, str]:
    """Per field, what ``farm`` asks for that the probed kernel cannot do (``known[name] is False``)."""
    errors: dict[str, str] = {}
    nat = farm.mode in (FarmModeChoices.SNAT, FarmModeChoices.DNAT)
    dispatched = nat or farm.mode == FarmModeChoices.LOCAL  # its limits, too, act in the NAT prerouting hook
    if farm.flow_offload and known.get("flowtable") is False:
        errors["flow_offload"] = (
            "This kernel has no flowtables (CONFIG_NF_FLOW_TABLE), as the worker found when it probed it "
            "(GET /api/v1/capabilities/): turn flow offload off."
        )
    if farm.helper and known.get(f"helper-{farm.helper}") is False:
        errors["helper"] = (
            f"The conntrack helper '{farm.helper}' is not available in this kernel, as the worker found when "
            "it probed it (GET /api/v1/capabilities/): choose another or none."
        )
    if dispatched and known.get("reject-nat") is False:
        if farm.limit_verdict == LimitVerdictChoices.REJECT:
            errors["limit_verdict"] = (
                "This kernel cannot reject in the NAT prerouting hook (Linux 5.2 and later can): use 'drop'."
            )
        if nat and farm.when_all_down == FarmAllDownChoices.REJECT:
            errors["when_all_down"] = (
                "This kernel cannot reject in the NAT prerouting hook (Linux 5.2 and later can): give the farm a "
                "fallback address for when no backend is active."
            )
    return errors
