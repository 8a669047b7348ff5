"""Maglev consistent hashing (Eisenbud et al., NSDI 2016): the lookup table a `maglev` farm's DNAT uses.

Why Maglev rather than the hash scheduler: nft scales ``jhash`` onto [0, total weight), each backend
owning an interval as wide as its weight, so when one backend leaves every interval after it shifts
and a sixth (3 backends) to a third (40) of the other backends' flows move with it; Maglev's table
moves only the slots the leaving backend held, plus a few that rebalance (``tests/compiler/test_maglev.py``
measures both with real packets). And the table depends on nothing but the
backends' addresses, ports and weights, never on database ids or the order rows were created in, so
two lbweb nodes with the same farm build the same table and, with the same ``jhash`` seed, send a
flow to the same backend: a flow that an ECMP router moves from one node to another mid-connection
meets the same backend there.

Pure: no Django, no kernel. The compiler installs the table as a map from slot to backend, indexed by
``jhash`` of the flow modulo the table size.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

# Primes: a prime size makes every backend's (offset, skip) walk a full permutation of the slots.
# The table has at least SLOTS_PER_BACKEND slots per backend, so weights are honoured to within 1 %.
TABLE_SIZES = (4093, 16381, 65537, 262139)
SLOTS_PER_BACKEND = 100
MAX_BACKENDS = TABLE_SIZES[-1] // SLOTS_PER_BACKEND


def table_size(backends: int) -> int:
    """The smallest table of ``TABLE_SIZES`` with at least 100 slots per backend.

    The compiler sizes a farm's table by all its backends, whatever their state, so the size changes
    only when backends are added past 40, 163 or 655: then nearly every flow moves, as with any
    consistent hash whose ring is resized."""
    for size in TABLE_SIZES:
        if size >= SLOTS_PER_BACKEND * backends:
            return size
    raise ValueError(f"Maglev takes at most {MAX_BACKENDS} backends in one farm")


def _hash(key: str, salt: bytes) -> int:
    # A stable hash (Python's hash() is salted per process): every node computes the same walk.
    return int.from_bytes(hashlib.sha256(salt + key.encode()).digest()[:8], "big")


def _walk(key: str, size: int) -> tuple[int, int]:
    """The backend's preference walk: its first slot and its stride (never 0, below a prime size)."""
    return _hash(key, b"offset:") % size, _hash(key, b"skip:") % (size - 1) + 1


def lookup_table(backends: Sequence[tuple[str, int]], size: int | None = None) -> list[int]:
    """Maglev's table for ``backends`` given as (key, weight) pairs: slot -> index in ``backends``.

    Each backend walks the slots in its own pseudo-random order and takes the first free one, in
    turns; a backend of weight w takes w turns for every ``max weight`` turns of the heaviest one
    (the weighted variant), so its share of the slots is its share of the total weight. The keys
    (an address and port) decide everything: the backends' order does not matter.
    """
    if not backends:
        return []
    size = size or table_size(len(backends))
    order = sorted(range(len(backends)), key=lambda i: backends[i][0])
    walks = {i: _walk(backends[i][0], size) for i in order}
    position = dict.fromkeys(order, 0)
    credit = dict.fromkeys(order, 0)
    heaviest = max(weight for _key, weight in backends)
    table = [-1] * size
    filled = 0
    while filled < size:
        for i in order:
            credit[i] += backends[i][1]
            while credit[i] >= heaviest and filled < size:
                credit[i] -= heaviest
                offset, skip = walks[i]
                slot = (offset + position[i] * skip) % size
                while table[slot] >= 0:
                    position[i] += 1
                    slot = (offset + position[i] * skip) % size
                table[slot] = i
                position[i] += 1
                filled += 1
    return table


def moved_fraction(before: Sequence[str], after: Sequence[str]) -> float:
    """The share of slots whose backend (by key) differs between two tables of the same size."""
    if len(before) != len(after):
        return 1.0
    return sum(a != b for a, b in zip(before, after, strict=True)) / len(before) if before else 0.0
