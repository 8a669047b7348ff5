"""What the cluster's two plug-ins (``keepalived.py``, ``conntrackd.py``) share: whether the engine can be asked
here, and an example's verdicts in the words (its ``Outcome``) of the engines' fuzz runner, ``fuzz_engines``.

The cluster's fields are tried one at a time on a valid base configuration (``examples`` in
tests/cluster_engines.py): they only make sense together (one address family per link), so a value for every
field at once would be refused for its neighbours' sake nearly every time. Django must be set up before a plug-in is imported (the
runners do it); the plug-ins validate without a database and ask the engines in one throwaway network namespace.
"""

from __future__ import annotations

import os
import shutil

from tests.cluster_engines import Verdict, validation_errors


def available(binary: str) -> str | None:
    if os.geteuid() != 0:
        return "needs root (the engines are asked in a throwaway network namespace)"
    if shutil.which(binary) is None and not os.path.exists(binary):
        return f"{binary} is not installed"
    return None


def outcome(values: dict, verdict_of):
    """``values`` (one field) through validation, and if accepted through the engine (``verdict_of``)."""
    from bench.fuzz import Outcome  # the package of the engines' fuzz runner (fuzz_engines)

    errors = validation_errors(values)
    if errors:
        return Outcome(refused={name: "; ".join(f"{k}: {v}" for k, v in errors.items()) for name in values})
    verdict: Verdict = verdict_of(values)
    return Outcome(
        accepted=dict(values),
        engine_refusal=verdict.refusal,
        meaning_lost={name: "; ".join(verdict.lost) for name in values} if verdict.lost else {},
    )
