"""What the cluster's two plug-ins (``keepalived.py``, ``conntrackd.py``) share: whether the engine can be asked
here, and an example's verdicts in the words (its ``Outcome``) of the engines' fuzz runner, ``fuzz_engines``.

The cluster's fields are tried one at a time on a valid base configuration (``examples`` in
tests/support/cluster_engines.py): they only make sense together (one address family per link), so a value for every
field at once would be refused for its neighbours' sake nearly every time. Django must be set up before a
plug-in is imported (the runners do it); the plug-ins validate without a database and ask the engines in one
throwaway network namespace.
"""

from __future__ import annotations

import os
import shutil

from tests.support.cluster_engines import Verdict, examples, shared_lab, validation_errors


def verdict(engine: str, values: dict) -> Verdict:
    """``engine`` ("keepalived", "conntrackd") on the file lbweb writes from ``values`` (accepted by validation)."""
    return shared_lab().run(lambda lab: getattr(lab, f"{engine}_verdict")(values))


def available(engine: str) -> str | None:
    if os.geteuid() != 0:
        return "needs root (the engines are asked in a throwaway network namespace)"
    binary = f"/usr/sbin/{engine}"
    if shutil.which(binary) is None:
        return f"{binary} is not installed"
    return None


def outcome(engine: str, values: dict):
    """``values`` (one field) through validation, and if accepted through the engine."""
    from bench.fuzz import Outcome  # the package of the engines' fuzz runner (fuzz_engines)

    errors = validation_errors(values)
    if errors:
        return Outcome(refused={name: "; ".join(f"{k}: {v}" for k, v in errors.items()) for name in values})
    result = verdict(engine, values)
    return Outcome(
        accepted=dict(values),
        engine_refusal=result.refusal,
        meaning_lost={name: "; ".join(result.lost) for name in values} if result.lost else {},
    )


def functions(engine: str, fields: dict):
    """A plug-in's functions for ``engine``: ``available``, ``values``, ``check`` (``bench/fuzz/__init__.py``)."""

    def available_() -> str | None:
        return available(engine)

    def values_():
        return examples(fields)

    def check_(values: dict):
        return outcome(engine, values)

    return available_, values_, check_
