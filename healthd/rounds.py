"""One round of probes of one backend: a probe, and its confirmation in parallel when it fails or is slow.

A failure must be seen ``fall`` times in a row before a backend goes down, so
that one lost packet never takes it down. Confirming one probe after another
would make a backend that stops answering (no reset, every probe runs into its
timeout) leave only after ``fall`` timeouts. Instead, a probe that fails, or
still has no answer after half the timeout, is confirmed at once by ``fall - 1``
more probes sent side by side, all bound by the first probe's deadline: a
refusing backend is down a few milliseconds after its first refused probe, a
silent one at that probe's timeout, and a lost packet is forgiven because the
confirmations are packets of their own.
"""

from __future__ import annotations

import asyncio
import dataclasses

from . import prober
from .icmp import Pinger
from .probes import ProbeResult, Target, probe

# A probe whose timer fired this much later than its timeout says healthd's event loop stalled, not the backend.
STALL_GRACE = prober.STALL_GRACE


async def probe_round(target: Target, pinger: Pinger, confirmations: int) -> list[ProbeResult]:
    """Probe ``target``; confirm a failed or slow probe with ``confirmations`` parallel ones.

    Returns every result of the round in the order they came in.
    """
    loop = asyncio.get_running_loop()
    timeout = target.check.timeout
    deadline = loop.time() + timeout
    first = asyncio.ensure_future(_timed_probe(target, pinger))
    if confirmations <= 0:
        return [await first]
    await asyncio.wait({first}, timeout=timeout / 2)
    if first.done() and (first.result().ok or first.result().local):  # healthy, or healthd's own trouble
        return [first.result()]
    # failed, or silent for half the timeout: confirm now, within what is left of the same timeout
    remaining = max(deadline - loop.time(), timeout / 2)
    confirm = dataclasses.replace(target, check=dataclasses.replace(target.check, timeout=remaining))
    pending = [first, *(asyncio.ensure_future(_timed_probe(confirm, pinger)) for _ in range(confirmations))]
    return [await result for result in asyncio.as_completed(pending)]


async def _timed_probe(target: Target, pinger: Pinger) -> ProbeResult:
    """One probe; a timeout that fired far too late is healthd's own stall and says nothing about the backend."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    result = await probe(target, pinger)
    late = loop.time() - started - target.check.timeout
    # a command's verdict is the prober's, on its own clock: healthd answering late does not spoil it
    if not result.ok and not result.local and not result.prober_timed and late > STALL_GRACE:
        reason = f"healthd stalled: a probe's {target.check.timeout:g}s timeout fired {late:.2f}s late"
        return ProbeResult(False, reason, local=True, widespread=True)
    return result
