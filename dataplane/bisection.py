"""Finding the units an engine refuses among many it was given at once, so that every other unit applies.

One search for both engines the worker drives: nftables (``dataplane/isolation.py``: a unit is a farm's or a
policy's rules) and HAProxy (``dataplane/l7/engine.py``: a unit is an HTTP farm). No Django, no I/O of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

from .kernel.interface import ApplyError


def kernel_words(exc: BaseException) -> str | None:
    """The kernel's words when ``exc`` is a refusal; None for anything else, an uncertain outcome included (the
    kernel may hold the change: only a read of it tells)."""
    return exc.message if isinstance(exc, ApplyError) and not exc.uncertain else None


def bisect(
    items: Sequence[Hashable],
    attempt: Callable[[list], object],
    error: BaseException,
    words: Callable[[BaseException], str | None] = kernel_words,
) -> dict[Hashable, str]:
    """Which of ``items`` the engine refuses (item -> its words), when ``attempt`` of all of them failed
    with ``error``: halves are attempted in turn, and a half that fails is split again, so one bad unit
    among n costs about 2 log2(n) attempts. ``attempt`` of a group that passes must leave it done.

    ``words(exc)`` tells a refusal from anything else: the engine's words for a refusal, None otherwise, and
    then ``exc`` is raised on (the search cannot tell what the engine holds)."""
    refused: dict[Hashable, str] = {}

    def visit(group: list, known: str | None) -> None:
        if known is None:
            try:
                attempt(group)
                return
            except Exception as exc:
                known = words(exc)
                if known is None:
                    raise
        if len(group) == 1:
            refused[group[0]] = known
            return
        middle = len(group) // 2
        visit(group[:middle], None)
        visit(group[middle:], None)

    first = words(error)
    if first is None:
        raise ValueError(f"not a refusal: {error!r}")
    if items:
        visit(list(items), first)
    return refused
