"""One farm's change at N farms: lbweb's own netlink batch beside libnftables, and the kernel's floor.

    .venv/bin/python bench/change_writer.py [--farms 100,1000,3000] [--backends 2] [--changes 10]

As root. For each count a throw-away network namespace gets the compiler's full document of N
scale farms (bench/compile.py's, ``--backends`` each; nothing is sent to their addresses), then
``--changes`` weight changes of one farm, each applied three ways side by side, alternating:

* lbweb: ``Kernel.apply_incremental``: transcription in the scratch namespace, then one
  netlink batch; both parts timed;
* in writer: the same through ``sandbox.IsolatedKernel`` (the worker's path: the kernel writer
  child process does it; the difference to lbweb is the cost of crash containment);
* libnftables: the same incremental document through libnftables (python-nftables, as the
  worker did before; it reads the whole ruleset first);
* the kernel's floor: one batch of a single rule with a jump, and of a single rule without
  (any jump makes the kernel validate the table's whole chain graph at commit).

Medians in ms, and each count's ratio to the smallest count. No pass/fail. The namespace is
removed at the end, also on failure.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNNER = r"""
import dataclasses, json, statistics, sys, time
sys.path.insert(0, ".")
sys.path.insert(0, "bench")
from compile import scale_farms
from dataplane.kernel import nfmsg
import compiler
from dataplane.kernel.applier import Kernel
from dataplane.kernel.sandbox import IsolatedKernel
from dataplane.kernel.scratch import scratch
from dataplane.kernel.transcribe import transcribe

count, backends, changes, path = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
farms = scale_farms(count, backends)
kernel = Kernel()
started = time.monotonic()
kernel.apply(compiler.full_document(farms))
loaded = time.monotonic() - started
units = compiler.compile_units(farms, [])
target = farms[count // 2]
key = compiler.farm_key(target.id)
chain = f"farm-{target.name}"
other = next(c for c in units[key].objects.chains if c != chain)
times = {name: [] for name in ("lbweb", "transcribe", "commit", "writer", "libnftables", "floor_jump", "floor_plain")}
isolated = IsolatedKernel()
isolated.check({"nftables": []})  # the kernel writer starts before the first timed change


def changed(weight):
    # one backend's weight: the same weight on every backend would leave a weighted pick's shares, and
    # so the compiled farm, as they were (nothing to send)
    first, *rest = target.backends
    farm = dataclasses.replace(target, backends=(dataclasses.replace(first, weight=weight), *rest))
    new = dict(units)
    new[key] = compiler.compile_farm(farm)
    document, keys = compiler.incremental_document({k: u.objects for k, u in units.items()}, new)
    return new, document, keys


def one_rule(expr):
    document = {"nftables": [{"add": {"rule": {"family": "inet", "table": "lbweb", "chain": chain, "expr": expr}}}]}
    messages = transcribe(document, compiler.incremental_context(units, [key]), scratch())
    begin = time.monotonic()
    nfmsg.commit(messages)
    return (time.monotonic() - begin) * 1000


def direct(i):
    global units, messages
    new, document, keys = changed(2 + 2 * i)
    begin = time.monotonic()
    messages = transcribe(document, compiler.incremental_context(new, keys), scratch())
    middle = time.monotonic()
    nfmsg.commit(messages)
    end = time.monotonic()
    times["transcribe"].append((middle - begin) * 1000)
    times["commit"].append((end - middle) * 1000)
    times["lbweb"].append((end - begin) * 1000)
    units = new


def in_writer(i):
    global units
    new, document, keys = changed(1000 + i)
    begin = time.monotonic()
    isolated.apply_incremental(document, compiler.incremental_context(new, keys))
    times["writer"].append((time.monotonic() - begin) * 1000)
    units = new


for i in range(changes):
    # in turn first: a commit right after another pays part of the kernel's clean-up of the previous one
    for run in (direct, in_writer) if i % 2 == 0 else (in_writer, direct):
        run(i)
    new, document, _keys = changed(3 + 2 * i)
    begin = time.monotonic()
    kernel.apply(document)
    times["libnftables"].append((time.monotonic() - begin) * 1000)
    units = new
    times["floor_jump"].append(one_rule([{"match": {"left": {"meta": {"key": "mark"}}, "op": "==", "right": 4242}},
                                         {"jump": {"target": other}}]))
    times["floor_plain"].append(one_rule([{"counter": None}]))
result = {name: round(statistics.median(v), 2) for name, v in times.items()}
result.update(farms=count, backends=backends, changes=changes, load_s=round(loaded, 1), messages=len(messages))
json.dump(result, open(path, "w"))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--farms", default="100,1000,3000")
    parser.add_argument("--backends", type=int, default=2)
    parser.add_argument("--changes", type=int, default=10)
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root: the bench builds a network namespace")
    rows = []
    for count in (int(n) for n in args.farms.split(",")):
        netns = f"lbb-cw-{uuid.uuid4().hex[:8]}"
        subprocess.run(["ip", "netns", "add", netns], check=True)
        try:
            with tempfile.NamedTemporaryFile(suffix=".json") as out:
                cmd = ["ip", "netns", "exec", netns, str(ROOT / ".venv/bin/python"), "-c", RUNNER]
                cmd += [str(count), str(args.backends), str(args.changes), out.name]
                subprocess.run(cmd, cwd=ROOT, check=True)
                rows.append(json.loads(Path(out.name).read_text()))
        finally:
            subprocess.run(["ip", "netns", "del", netns], check=False)
        print(f"[{time.strftime('%H:%M:%S')}] {count:,} farms done (loaded in {rows[-1]['load_s']} s)", flush=True)
    base = rows[0]
    print()
    print(f"One farm's weight change, N farms x {args.backends} backends present (medians of {args.changes}, ms)")
    header = ("farms", "lbweb", "transcribe", "commit", "in writer", "libnftables", "kernel: jump", "no jump",
              "x lbweb", "x libnft")  # fmt: skip
    print(f"{header[0]:>7} {header[1]:>8} {header[2]:>11} {header[3]:>8} {header[4]:>10} {header[5]:>12}"
          f" {header[6]:>13} {header[7]:>8} {header[8]:>8} {header[9]:>9}")  # fmt: skip
    for row in rows:
        growth = row["lbweb"] / base["lbweb"]
        growth_libnft = row["libnftables"] / base["libnftables"]
        print(f"{row['farms']:7,} {row['lbweb']:8.1f} {row['transcribe']:11.1f} {row['commit']:8.1f}"
              f" {row['writer']:10.1f} {row['libnftables']:12.1f} {row['floor_jump']:13.2f} {row['floor_plain']:8.2f}"
              f" {growth:8.2f} {growth_libnft:9.2f}")  # fmt: skip
    print("(x: each count's median over the smallest count's, per writer; kernel: one batch of a single rule)")
    print(json.dumps({"rows": rows, "args": vars(args)}))


if __name__ == "__main__":
    main()
