"""What a reconcile costs at 1,000 and 10,000 farms: quiet (nothing moved) and with one drifted farm.

Runs the worker's own pieces (``dataplane/kernel/drift/``, the applier's netlink batch) on the real kernel,
in a network namespace made for the run and removed after it, on farms compiled by the pure compiler
(two backends each, SNAT, weights: the shape of bench/control_plane.py's scale farms). The database
is left out: a quiet reconcile adds two small queries (the configuration generation, pending farms).

    ip netns exec is not needed: ``python -m bench.drift --farms 1000,10000`` makes its namespace.

Wall times on a shared machine follow its load (printed with them); CPU times (this process, user and
system) do not. Printed per farm count: the full write (libnftables, as a boot), fingerprinting all units after it,
a quiet reconcile (the ruleset generation read: nothing else is read when it did not move), and a
reconcile that finds one farm's deny rule deleted by hand: the generation read, the whole read and
comparison, the repair batch, and reading the repaired unit back.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def measure(count: int) -> dict:
    """Inside the namespace: build ``count`` farms, then time the reconcile's steps."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "lbweb.settings")
    import django

    django.setup()
    import compiler
    import compiler.names
    from compiler.spec import BackendSpec, FarmSpec, PolicySpec
    from dataplane.kernel import drift, nfmsg
    from dataplane.kernel.applier import Kernel

    policy = PolicySpec(id=1, name="deny", type="deny", elements=("198.18.0.99",))
    specs = [
        FarmSpec(
            id=i + 1,
            name=f"s{i:05d}",
            vip=f"198.18.{128 + i // 250}.{1 + i % 250}",
            ports=((80, 80),),
            mode="snat",
            scheduler="weight",
            backends=(
                BackendSpec(id=2 * i + 1, address=f"198.19.{i // 125}.{1 + 2 * (i % 125)}", weight=1),
                BackendSpec(id=2 * i + 2, address=f"198.19.{i // 125}.{2 + 2 * (i % 125)}", weight=2),
            ),
            policies=(policy,),
        )
        for i in range(count)
    ]
    kernel = Kernel()
    started = time.monotonic()
    kernel.apply(compiler.full_document(specs, [policy]))
    figures = {"farms": count, "full_write_s": time.monotonic() - started}
    units = compiler.compile_units(specs, [policy])
    applied = {k: u.objects for k, u in units.items()}

    started, cpu = time.monotonic(), time.process_time()
    expected = drift.read_kernel(applied).records
    figures["fingerprint_all_s"] = time.monotonic() - started
    figures["fingerprint_all_cpu_s"] = time.process_time() - cpu

    quiet = []
    for _ in range(200):
        t = time.monotonic()
        kernel.generation_id()
        quiet.append(time.monotonic() - t)
    figures["quiet_reconcile_ms"] = statistics.median(quiet) * 1000

    victim = specs[count // 2]
    chain = compiler.names.guard_chain_name(victim)  # where a farm's access policies are checked, on every packet
    listing = subprocess.run(["nft", "-a", "list", "chain", "inet", "lbweb", chain], capture_output=True, text=True)
    handle = next(line.split("# handle ")[1] for line in listing.stdout.splitlines() if "@policy-deny-v4" in line)
    subprocess.run(["nft", "delete", "rule", "inet", "lbweb", chain, "handle", handle.strip()], check=True)

    c0 = time.process_time()
    t0 = time.monotonic()
    kernel.generation_id()
    t1 = time.monotonic()
    reading = drift.read_kernel(applied)
    t2 = time.monotonic()
    found = {}
    for key in applied.keys() | {drift.SKELETON}:
        differences = drift.differences(expected.get(key, {}), reading.records.get(key, {}))
        if differences:
            found[key] = differences
    t3 = time.monotonic()
    rewrite = set(found)
    wanted = {k: units[k].objects for k in rewrite}
    removals, kept = drift.removal_messages(reading, reading.owners, rewrite, wanted, expected)
    commands = []
    for unit in compiler.ordered({k: units[k] for k in rewrite}):
        commands += drift.without_kept(unit.creates, kept)
    kernel.repair(removals, compiler.document(commands), compiler.incremental_context(units, sorted(rewrite)))
    t4 = time.monotonic()
    touched = {c["add"]["element"]["name"] for c in commands if "element" in c.get("add", {})}
    records = drift.probe_records(reading.owners, wanted, touched, expected)
    t5 = time.monotonic()
    c5 = time.process_time()
    again = drift.read_kernel(applied).records
    assert all(not drift.differences({**expected, **records}.get(k, {}), again.get(k, {})) for k in again), (
        "not repaired"
    )
    figures.update(
        drifted=sorted(found.items()),
        generation_ms=(t1 - t0) * 1000,
        read_and_compare_s=t3 - t1,
        read_s=t2 - t1,
        compare_s=t3 - t2,
        repair_batch_ms=(t4 - t3) * 1000,
        fingerprint_unit_ms=(t5 - t4) * 1000,
        drift_reconcile_s=t5 - t0,
        drift_reconcile_cpu_s=c5 - c0,
        batch_messages=len(removals),
    )
    nfmsg.commit([])
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--farms", default="1000,10000", help="farm counts, comma-separated")
    parser.add_argument("--inside", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inside:
        print(json.dumps(measure(args.inside)))
        return
    if os.geteuid() != 0:
        sys.exit("run as root: the bench makes a network namespace")
    results = []
    for count in (int(c) for c in args.farms.split(",")):
        netns = f"lbweb-drift-bench-{os.getpid()}"
        subprocess.run(["ip", "netns", "add", netns], check=True)
        try:
            command = ["ip", "netns", "exec", netns, sys.executable, "-m", "bench.drift", "--inside", str(count)]
            out = subprocess.run(command, cwd=ROOT, check=True, capture_output=True, text=True).stdout
            results.append(json.loads(out.strip().splitlines()[-1]))
        finally:
            subprocess.run(["ip", "netns", "delete", netns], check=False)
        r = results[-1]
        print(
            f"{r['farms']:>6} farms: full write {r['full_write_s']:.1f} s, fingerprints of all units "
            f"{r['fingerprint_all_s']:.2f} s; quiet reconcile {r['quiet_reconcile_ms']:.3f} ms; one drifted farm: "
            f"{r['drift_reconcile_s']:.2f} s in all, {r['drift_reconcile_cpu_s']:.2f} s of CPU "
            f"(read {r['read_s']:.2f} s, compare {r['compare_s']:.2f} s, "
            f"repair batch {r['repair_batch_ms']:.0f} ms, unit read back {r['fingerprint_unit_ms']:.0f} ms)",
            flush=True,
        )
        print("        found:", r["drifted"], flush=True)
        print("        load average:", Path("/proc/loadavg").read_text().split()[:3], flush=True)


if __name__ == "__main__":
    main()
