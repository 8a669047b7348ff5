"""How many flows move when a backend leaves or joins: the maglev scheduler beside the hash scheduler.

    .venv/bin/python bench/maglev.py [--backends 3,10,40,100] [--flows 200000] [--json PATH]

No root, no kernel: both schedulers' choices computed for the same random flows, in the same run.
``hash`` is what nft does with ``jhash ... mod total``: the hash scaled onto [0, total weight)
(the kernel's reciprocal_scale), each backend owning an interval; ``maglev`` is lbweb's table
(compiler/maglev.py) indexed by the same hash modulo its size. For each backend count N the
figures are the share of the *other* backends' flows that move when one backend leaves (averaged
over which one leaves), and the share of all flows that move when one joins; Maglev's promise is
about 0 and 1/(N+1). A join that crosses a table size (40 -> 41 backends) moves nearly every flow: the
table is resized. Node agreement: the table built from the backends in another order (as a
second node whose rows were created differently) is compared slot by slot. Also the time to
build one table, which the compiler pays for each maglev farm it compiles.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from compiler import maglev  # noqa: E402

HASH_RANGE = 2**32


def keys(n: int) -> list[tuple[str, int]]:
    return [(f"198.18.{i // 250}.{i % 250 + 1} 80", 1) for i in range(n)]


def by_interval(hashes: list[int], backends: list[str]) -> list[str]:
    """The hash scheduler: reciprocal_scale(hash, n) = hash * n >> 32 picks the backend."""
    n = len(backends)
    return [backends[h * n >> 32] for h in hashes]


def by_maglev(hashes: list[int], backends: list[tuple[str, int]], size: int) -> list[str]:
    table = maglev.lookup_table(backends, size)
    return [backends[table[h % len(table)]][0] for h in hashes]


def moved_share(before: list[str], after: list[str], leaving: str | None) -> float:
    pairs = [(b, a) for b, a in zip(before, after, strict=True) if b != leaving]
    return sum(b != a for b, a in pairs) / len(pairs)


def measure(n: int, hashes: list[int], leavers: int) -> dict:
    backends = keys(n)
    names = [k for k, _w in backends]
    rng = random.Random(n)
    leaving = rng.sample(names, min(leavers, n))
    result: dict = {"backends": n, "table": maglev.table_size(n)}

    def hashed(bs: list[tuple[str, int]]) -> list[str]:
        return by_interval(hashes, [k for k, _ in bs])

    def maglev_of(bs: list[tuple[str, int]]) -> list[str]:  # sized as the compiler does: by the farm's backends
        return by_maglev(hashes, bs, maglev.table_size(max(n, len(bs))))

    for scheduler, pick in (("hash", hashed), ("maglev", maglev_of)):
        before = pick(backends)
        leave = [moved_share(before, pick([b for b in backends if b[0] != gone]), gone) for gone in leaving]
        joined = pick(keys(n + 1))
        result[scheduler] = {
            "leave_moves_others": statistics.mean(leave),
            "join_moves": moved_share(before, joined, None),
        }
    shuffled = backends[:]
    rng.shuffle(shuffled)
    result["nodes_agree"] = [backends[i][0] for i in maglev.lookup_table(backends)] == [
        shuffled[i][0] for i in maglev.lookup_table(shuffled)
    ]
    started = time.perf_counter()
    maglev.lookup_table(backends)
    result["table_ms"] = round((time.perf_counter() - started) * 1000, 1)
    return result


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="3,10,40,100")
    parser.add_argument("--flows", type=int, default=200_000)
    parser.add_argument("--leavers", type=int, default=5, help="how many different backends leave, one at a time")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    rng = random.Random(1)
    hashes = [rng.randrange(HASH_RANGE) for _ in range(args.flows)]
    results = [measure(int(n), hashes, args.leavers) for n in args.backends.split(",")]
    print(
        "| backends | slots | one leaves: others' flows moved, hash / maglev | one joins: flows moved, hash / maglev "
        "| ideal 1/(N+1) | nodes agree | table build |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in results:
        h, m = r["hash"], r["maglev"]
        print(
            f"| {r['backends']} | {r['table']} | {h['leave_moves_others']:.1%} / {m['leave_moves_others']:.1%} "
            f"| {h['join_moves']:.1%} / {m['join_moves']:.1%} | {1 / (r['backends'] + 1):.1%} "
            f"| {'yes' if r['nodes_agree'] else 'NO'} | {r['table_ms']} ms |"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return results


if __name__ == "__main__":
    main()
