"""Control-plane figures: API write to rule in the kernel, and applying 1,000 farms.

    sudo .venv/bin/python bench/control_plane.py [--changes 200] [--farms 1000] [--backends 10]

As root, from the repository root. The whole stack runs as in production, on
throw-away state: a private Redis and a fresh SQLite database in a temporary
directory, the real Celery worker inside the LB namespace of the namespace lab
(tests/lab.py: only 198.18.0.0/15, only in namespaces this script creates) and
the REST API under gunicorn in the host namespace. Everything is torn down at
the end, also on failure or Ctrl-C.

Measured:

1. latency: a farm (scheduler ``weight``, 3 backends); each change is a PATCH of
   one backend's weight through the REST API, timed from sending the request
   until the kernel of the LB namespace holds the rule with the new weights.
   ``isolated`` changes wait out the worker's coalescing window first (a user
   clicking); ``back-to-back`` changes follow one another at once (a script),
   so each waits for the window. The same again with 1,000 farms present.
2. scale: 1,000 farms x 10 backends created through farms.services in one
   transaction; how long the worker takes from the commit to all farms applied,
   how long it then takes to drain the burst of apply requests (one per write,
   all but the first no-ops), one backend's change with 1,000 farms present
   (the worker's ApplyRun.duration_ms and end to end), and a direct full apply
   in the LB namespace, compile / document / kernel timed apart.

No pass/fail: the figures are printed as a table and written to
bench/results/control_plane-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PYTHON = ROOT / ".venv" / "bin" / "python"
GUNICORN = ROOT / ".venv" / "bin" / "gunicorn"
RESULTS = ROOT / "bench" / "results"
STARTED = time.monotonic()

LATENCY_FARM = "lat"
SCALE_BACKEND_NET = "198.19"  # backends of the scale farms: 198.19.0.0/16, inside 198.18.0.0/15, never routed


def progress(message: str) -> None:
    print(f"[{time.monotonic() - STARTED:6.1f}s] {message}", file=sys.stderr, flush=True)


def scale_vip(i: int) -> str:
    """1,000 VIPs in 198.18.64.0/22 (the lab's client routes them to the LB)."""
    return f"198.18.{64 + i // 250}.{1 + i % 250}"


def scale_backend(i: int, j: int, per_farm: int) -> str:
    """A distinct address for every backend: validation looks for a backend's address in other farms."""
    n = i * per_farm + j
    return f"{SCALE_BACKEND_NET}.{n // 250}.{1 + n % 250}"


def ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def summary(values_ms: list[float]) -> dict:
    """p50, p99 and max of a list of milliseconds (p99 interpolated between the closest ranks)."""
    ordered = sorted(values_ms)
    p99 = statistics.quantiles(ordered, n=100, method="inclusive")[98] if len(ordered) > 1 else ordered[0]
    return {
        "n": len(ordered),
        "p50": round(statistics.median(ordered), 2),
        "p99": round(p99, 2),
        "max": round(ordered[-1], 2),
        "min": round(ordered[0], 2),
        "mean": round(statistics.fmean(ordered), 2),
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate, timeout: float, what: str, interval: float = 0.02):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


# -- the kernel watcher ------------------------------------------------------------------
#
# "Visible in the kernel" is decided by the LB namespace's kernel itself, never by the
# database or apply_status (they say what the worker believes, not what the kernel holds).
#
# A long-lived watcher process in the LB namespace subscribes to the nf_tables netlink
# multicast group, where the kernel announces every object of every ruleset transaction
# it commits. When the watcher is armed with the expected weights, it waits (blocked in
# select, costing no CPU) for the announcement of a new rule in the farm's chain whose
# ``numgen random mod N`` is the new total weight; the time that announcement arrived is
# the time the rule entered the kernel. (Every change moves the total, so the modulus
# alone tells the new rule from the old.) It then reads the chain back with libnftables
# (python-nftables, as the worker's applier does) and checks that the verdict map's
# intervals have the new weights as widths; that read is off the clock.
#
# Why not poll with libnftables? A ``list chain`` builds libnftables' cache of the whole
# table: ~1 ms with one farm, ~150 ms with 1,000 farms, so polling would both blur the
# figure by a read's length and take a core of a 2-core VM from gunicorn and the worker.
# Should announcements be lost (socket overflow), a libnftables read every 0.5 s is the
# safety net; the figures count how many changes it had to catch ("read" detections).
# Times are CLOCK_MONOTONIC, which the watcher shares with this process.
WATCHER = r"""
import errno, json, select, socket, struct, sys, time
import nftables

NETLINK_NETFILTER, SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, NFNLGRP_NFTABLES, SO_RCVBUFFORCE = 12, 270, 1, 7, 33
NEWRULE = (10 << 8) | 6  # NFNL_SUBSYS_NFTABLES << 8 | NFT_MSG_NEWRULE
RULE_TABLE, RULE_CHAIN, RULE_EXPRESSIONS = 1, 2, 4  # NFTA_RULE_*
EXPR_NAME, EXPR_DATA, NG_MODULUS = 1, 2, 2  # NFTA_EXPR_NAME, NFTA_EXPR_DATA, NFTA_NG_MODULUS
SAFETY_READ, TIMEOUT = 0.5, 60.0
CHAIN = sys.argv[1]
nft = nftables.Nftables()
nft.set_json_output(True)
sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 32 << 20)
sock.bind((0, 0))
sock.setsockopt(SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, NFNLGRP_NFTABLES)
sock.setblocking(False)


def attrs(data, start, end):
    while start + 4 <= end:
        length, kind = struct.unpack_from("=HH", data, start)
        if length < 4:
            return
        yield kind & 0x3FFF, start + 4, start + length
        start += (length + 3) & ~3


def text(data, span):
    return data[span[0] : span[1]].rstrip(b"\0").decode()


def announced_moduli(data):
    # numgen moduli in the new rules of our chain, in one buffer of announcements
    offset = 0
    while offset + 20 <= len(data):
        length, kind = struct.unpack_from("=IH", data, offset)
        if length < 20:
            return
        if kind == NEWRULE:
            rule = {k: (a, b) for k, a, b in attrs(data, offset + 20, offset + length)}
            if RULE_EXPRESSIONS in rule and text(data, rule.get(RULE_TABLE, (0, 0))) == "lbweb" \
                    and text(data, rule.get(RULE_CHAIN, (0, 0))) == CHAIN:
                for _k, a, b in attrs(data, *rule[RULE_EXPRESSIONS]):
                    expr = {k: (c, d) for k, c, d in attrs(data, a, b)}
                    if text(data, expr.get(EXPR_NAME, (0, 0))) == "numgen" and EXPR_DATA in expr:
                        for k, c, _d in attrs(data, *expr[EXPR_DATA]):
                            if k == NG_MODULUS:
                                yield struct.unpack_from(">I", data, c)[0]
        offset += (length + 3) & ~3


def drain():
    while True:
        try:
            sock.recv(1 << 20)
        except BlockingIOError:
            return
        except OSError as exc:
            if exc.errno != errno.ENOBUFS:
                raise


def read():
    # [total weight, sorted interval widths] of the chain's numgen verdict map, from the kernel
    rc, out, _err = nft.cmd(f"list chain inet lbweb {CHAIN}")
    if rc != 0 or not out:
        return None
    for item in json.loads(out)["nftables"]:
        for expr in item.get("rule", {}).get("expr", []):
            vmap = expr.get("vmap")
            if vmap and isinstance(vmap.get("key"), dict) and "numgen" in vmap["key"]:
                widths = []
                for key, _verdict in vmap["data"]["set"]:
                    low, high = key["range"] if isinstance(key, dict) else (key, key)
                    widths.append(high - low + 1)
                return [vmap["key"]["numgen"]["mod"], sorted(widths)]
    return None


print(json.dumps({"ready": True, "seen": read()}), flush=True)
for line in sys.stdin:
    want = json.loads(line)
    drain()  # what was announced before now is not the change to come
    print(json.dumps({"armed": True}), flush=True)
    found, deadline, last_read = None, time.monotonic() + TIMEOUT, time.monotonic()
    while found is None:
        ready = select.select([sock], [], [], SAFETY_READ)[0]
        now = time.monotonic()
        lost = False
        while ready:
            try:
                data = sock.recv(1 << 20)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno != errno.ENOBUFS:
                    raise
                lost = True
                continue
            if found is None and want[0] in announced_moduli(data):
                found = ("event", now)
        if found is None and (lost or now - last_read >= SAFETY_READ):
            last_read = time.monotonic()
            if read() == want:
                found = ("read", last_read)
        if found is None and now > deadline:
            break
    seen = read()
    if found is None:
        print(json.dumps({"timeout": True, "seen": seen, "want": want}), flush=True)
    else:
        print(json.dumps({"t": found[1], "via": found[0], "seen": seen, "confirmed": seen == want}), flush=True)
"""


class Watcher:
    """The long-lived kernel watcher in the LB namespace (see WATCHER)."""

    def __init__(self, netns: str, chain: str):
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", netns, str(PYTHON), "-c", WATCHER, chain],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        first = json.loads(self.proc.stdout.readline() or "{}")
        if not first.get("ready"):
            raise RuntimeError("the kernel watcher did not start")
        self.initial = first["seen"]

    def arm(self, weights: list[int]) -> None:
        """Wait for these weights; returns once the watcher listens (the change may then be sent)."""
        self.proc.stdin.write(json.dumps([sum(weights), sorted(weights)]) + "\n")
        if not json.loads(self.proc.stdout.readline() or "{}").get("armed"):
            raise RuntimeError("the kernel watcher died")

    def seen_at(self) -> dict:
        answer = json.loads(self.proc.stdout.readline() or '{"timeout": true}')
        if answer.get("timeout"):
            raise RuntimeError(f"the new weights never reached the kernel: {answer}")
        if not answer["confirmed"]:
            raise RuntimeError(f"the kernel announced the new total weight but holds other weights: {answer}")
        return answer

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


# -- the stack -----------------------------------------------------------------------------


class Api:
    """The REST API under gunicorn, token authenticated."""

    def __init__(self, base: str, token: str):
        import requests

        self.base = base.rstrip("/") + "/api/v1/"
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Token {token}"

    def call(self, method: str, path: str, expect: int, **kwargs) -> dict:
        response = self.session.request(method, self.base + path, timeout=30, **kwargs)
        if response.status_code != expect:
            raise RuntimeError(f"{method} {path}: {response.status_code} {response.text[:500]}")
        return response.json() if response.content else {}

    def wait_applied(self, farm_id: int, timeout: float = 60) -> dict:
        return wait_until(
            lambda: (f := self.call("GET", f"farms/{farm_id}/", 200))["apply_status"]["status"] == "applied" and f,
            timeout,
            f"farm {farm_id} applied",
        )


def start_gunicorn(env: dict, log_path: Path) -> tuple[subprocess.Popen, int]:
    port = free_port()
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [str(GUNICORN), "lbweb.wsgi", "--bind", f"127.0.0.1:{port}", "--workers", "2"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return proc, port


def stop_process(proc: subprocess.Popen | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


def tail(path: Path, size: int = 2500) -> str:
    try:
        return path.read_bytes()[-size:].decode(errors="replace")
    except OSError:
        return "(no log)"


# -- measurements --------------------------------------------------------------------------


def next_weight(k: int, current: int) -> int:
    """A new weight for change ``k`` that differs from the current one (so the total moves)."""
    weight = 1 + (k * 37) % 100
    return weight if weight != current else weight % 100 + 1


def weight_changes(api: Api, watcher: Watcher, backends: list[int], weights: list[int], count: int, gap: float):
    """``count`` PATCHes of one backend's weight each; (API ms, kernel ms) per change.

    ``gap``: seconds to wait after a change reached the kernel before sending the next.
    """
    api_ms, kernel_ms, via_read = [], [], 0
    for k in range(count):
        if gap:
            time.sleep(gap)
        i = k % len(backends)
        weights[i] = next_weight(k, weights[i])
        watcher.arm(weights)
        sent = time.monotonic()
        api.call("PATCH", f"backends/{backends[i]}/", 200, json={"weight": weights[i]})
        answered = time.monotonic()
        seen = watcher.seen_at()
        api_ms.append(ms(answered - sent))
        kernel_ms.append(ms(seen["t"] - sent))
        via_read += seen["via"] == "read"
    return {
        "api_ms": summary(api_ms),
        "kernel_ms": summary(kernel_ms),
        "detected_by_safety_read": via_read,
        "api_ms_values": api_ms,
        "kernel_ms_values": kernel_ms,
    }


def create_scale_farms(count: int, per_farm: int, marks: dict, committed: threading.Event) -> None:
    """``count`` farms of ``per_farm`` backends through farms.services, in one outer transaction.

    Every service call still validates, bumps the generation and asks for an apply on commit:
    the commit releases one apply request per write, sent from here one after the other.
    """
    from django.db import transaction

    from farms import services

    def on_commit() -> None:  # registered first, so it runs first after the COMMIT
        marks["committed"] = time.monotonic()
        committed.set()

    marks["started"] = time.monotonic()
    with transaction.atomic():
        transaction.on_commit(on_commit)
        for i in range(count):
            farm = services.farm_create(
                name=f"s{i:04d}", vip=scale_vip(i), protocol="tcp", ports="80", mode="dnat", scheduler="weight"
            )
            for j in range(per_farm):
                services.backend_create(farm=farm, address=scale_backend(i, j, per_farm), weight=1 + j)
        marks["written"] = time.monotonic()
    marks["enqueued"] = time.monotonic()  # every on_commit callback (one apply request per write) has run


def watch_applied(marks: dict, committed: threading.Event, stop: threading.Event) -> None:
    """In a thread of its own (the main thread is busy sending apply requests after the commit):
    the time when no farm is pending any more, polled from the database."""
    from django.db import connection

    try:
        while not committed.wait(0.05):
            if stop.is_set():
                return
        while pending_farms():
            if stop.is_set():
                return
            time.sleep(0.01)
        marks["applied"] = time.monotonic()
    except Exception as exc:  # handed to the main thread
        marks["error"] = exc
    finally:
        connection.close()


def queue_length(redis_client) -> int:
    """Apply requests in Celery's Redis queue, plus one taken but not yet acknowledged."""
    return redis_client.llen("dataplane") + redis_client.hlen("unacked")


def drain_queue(redis_client, committed: float, cap: float) -> dict:
    """Wait until the worker has worked through the apply requests the commit released.

    All but the first are no-ops (their generation is already applied) but each is a task. If
    they are not gone within ``cap`` seconds, the rate seen so far gives an estimate and the
    rest are purged (Celery's own purge), so that later measurements do not queue behind them.
    """
    started = time.monotonic()
    initial = left = queue_length(redis_client)
    while left and time.monotonic() - started < cap:
        time.sleep(0.05)
        left = queue_length(redis_client)
    now = time.monotonic()
    if not left:
        return {"queue_drained_s": round(now - committed, 2), "queue_estimated": False, "queue_purged": 0}
    from lbweb.celery import app

    rate = (initial - left) / (now - started)  # no-op requests per second
    purged = app.control.purge()
    wait_until(lambda: queue_length(redis_client) == 0, 30, "the request in progress")
    return {
        "queue_drained_s": round(now - committed + left / rate, 1) if rate else None,
        "queue_estimated": True,
        "queue_rate_per_s": round(rate, 1),
        "queue_purged": purged,
    }


def pending_farms() -> bool:
    from django.db.models import F

    from farms.models import Farm

    failed = Farm.objects.exclude(apply_error="").values_list("name", "apply_error").first()
    if failed:
        raise RuntimeError(f"farm {failed[0]} failed to apply: {failed[1][:500]}")
    return Farm.objects.filter(applied_generation__lt=F("config_generation")).exists()


def single_backend_changes(farm_name: str, count: int, gap: float) -> dict:
    """One backend of one farm changed through farms.services, ``count`` times, with all farms present."""
    from farms import services
    from farms.models import ApplyRun, Backend, Farm

    backend = Backend.objects.filter(farm__name=farm_name).order_by("id").first()
    durations, end_to_end, commands, kinds = [], [], [], set()
    for k in range(count):
        time.sleep(gap)
        before = ApplyRun.objects.order_by("-id").values_list("id", flat=True).first() or 0
        started = time.monotonic()
        services.backend_update(backend=backend, weight=next_weight(k, backend.weight))
        farm = backend.farm
        wait_until(
            lambda f=farm: Farm.objects.filter(id=f.id, applied_generation__gte=f.config_generation).exists(),
            60,
            "the single change applied",
            interval=0.005,
        )
        end_to_end.append(ms(time.monotonic() - started))
        run = ApplyRun.objects.filter(id__gt=before).exclude(kind="noop").order_by("id").first()
        if run is None:
            raise RuntimeError("no apply run recorded for the single change")
        if not run.ok:
            raise RuntimeError(f"single change apply failed: {run.error}")
        durations.append(round(run.duration_ms, 2))
        commands.append(run.commands)
        kinds.add(run.kind)
    return {
        "apply_run_duration_ms": summary(durations),
        "end_to_end_ms": summary(end_to_end),
        "commands": max(commands),
        "kinds": sorted(kinds),
    }


# A direct full apply in the LB namespace, in a process of its own (so the figures are not the
# worker's): read the database, compile every farm, build the full document, commit it. The
# document replaces lbweb's table in one transaction (add, delete, add: as the worker's resync
# does), so the kernel also tears the old table down; to see the two halves, the table is then
# deleted alone and the same document applied to a namespace without it. Between the two the
# LB has no lbweb table for a few seconds (nothing else runs then; the content comes back the same).
FULL_APPLY = r"""
import json, sys, time
import django

django.setup()
from farms.dataplane import Applier, localise, snapshot
from farms.nft import compiler

kernel = Applier().kernel
runs = []
for _ in range(int(sys.argv[1])):
    t0 = time.perf_counter()
    snap = localise(snapshot())
    t1 = time.perf_counter()
    units = compiler.compile_units(snap.specs, snap.policies)
    t2 = time.perf_counter()
    document = compiler.full_document(snap.specs, snap.policies, stale_tables=kernel.dsr_tables())
    t3 = time.perf_counter()
    kernel.apply(document)
    t4 = time.perf_counter()
    runs.append({
        "farms": len(snap.specs), "units": len(units), "commands": len(document["nftables"]),
        "json_bytes": len(json.dumps(document)),
        "snapshot_ms": (t1 - t0) * 1000, "compile_ms": (t2 - t1) * 1000,
        "full_document_ms": (t3 - t2) * 1000, "apply_ms": (t4 - t3) * 1000,
    })
t0 = time.perf_counter()
kernel.apply({"nftables": [{"delete": {"table": {"family": "inet", "name": "lbweb"}}}]})
t1 = time.perf_counter()
kernel.apply(document)
t2 = time.perf_counter()
split = {"delete_table_ms": (t1 - t0) * 1000, "apply_from_empty_ms": (t2 - t1) * 1000}
print(json.dumps({"runs": runs, "split": split}))
"""


def direct_full_apply(netns: str, env: dict, repetitions: int) -> dict:
    cmd = ["ip", "netns", "exec", netns, str(PYTHON), "-c", FULL_APPLY, str(repetitions)]
    result = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise RuntimeError(f"direct full apply failed:\n{result.stderr[-3000:]}")
    answer = json.loads(result.stdout.strip().splitlines()[-1])
    runs = answer["runs"]
    out = {k: runs[0][k] for k in ("farms", "units", "commands", "json_bytes")}
    for key in ("snapshot_ms", "compile_ms", "full_document_ms", "apply_ms"):
        out[key] = round(statistics.median(r[key] for r in runs), 1)
        out[key + "_runs"] = [round(r[key], 1) for r in runs]
    out.update({k: round(v, 1) for k, v in answer["split"].items()})
    out["repetitions"] = repetitions
    return out


def kernel_check(netns: str, env: dict) -> bool:
    cmd = ["ip", "netns", "exec", netns, str(PYTHON), "manage.py", "kernel", "--check"]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True).returncode == 0


# -- report --------------------------------------------------------------------------------


def print_report(r: dict) -> None:
    cfg = r["config"]
    print()
    print(f"# lbweb control plane, {cfg['cpus']} CPUs, kernel {cfg['kernel']}, coalescing window {cfg['coalesce_s']} s")
    print()
    print("API write to rule in the kernel (PATCH of a backend's weight, farm 'weight' with 3 backends)")
    print(f"{'series':44} {'n':>4} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'API p50':>8} {'API p99':>8}")
    for key, label in (
        ("isolated", "isolated changes, 1 farm"),
        ("back_to_back", "back-to-back changes, 1 farm"),
        ("isolated_loaded", f"isolated changes, {cfg['farms']} more farms present"),
    ):
        s = r["latency"].get(key)
        if not s:
            continue
        k, a = s["kernel_ms"], s["api_ms"]
        print(f"{label:44} {k['n']:4} {k['p50']:8.1f} {k['p99']:8.1f} {k['max']:8.1f} {a['p50']:8.1f} {a['p99']:8.1f}")
    print("(API: the PATCH request alone, sent to answered; the others: sent to the new rule read from the kernel)")
    print()
    s = r["scale"]
    print(f"{cfg['farms']:,} farms x {cfg['backends']} backends ({s['backend_rows']:,} backends)")
    rows = [
        ("create through farms.services (one transaction)", s["create_s"], "s"),
        ("  of which the COMMIT", s["commit_ms"], "ms"),
        (f"enqueue {s['apply_requests']:,} apply requests after the commit", s["enqueue_s"], "s"),
        ("worker: commit -> every farm applied", s["worker_apply_s"], "s"),
        (f"  its ApplyRun ({s['worker_run']['kind']}, {s['worker_run']['commands']:,} commands)",
         s["worker_run"]["duration_ms"], "ms"),
        ("worker: commit -> apply-request queue drained" + (" (estimated*)" if s["queue_estimated"] else ""),
         s["queue_drained_s"], "s"),
    ]  # fmt: skip
    f = s["direct_full_apply"]
    rows += [
        (f"direct full apply in the LB namespace (median of {f['repetitions']}):", None, ""),
        ("  read the database (snapshot)", f["snapshot_ms"], "ms"),
        (f"  compile every farm ({f['units']:,} units)", f["compile_ms"], "ms"),
        ("  compiler.full_document (compiles again, assembles)", f["full_document_ms"], "ms"),
        (f"  Kernel().apply ({f['commands']:,} commands, {f['json_bytes'] / 1e6:.1f} MB JSON)", f["apply_ms"], "ms"),
        ("    the same document with no table: delete the table alone", f["delete_table_ms"], "ms"),
        ("    then apply it to the empty namespace", f["apply_from_empty_ms"], "ms"),
    ]
    one = s["single_change"]
    rows += [
        (f"one backend's weight, {cfg['farms']:,} farms present (median of {one['end_to_end_ms']['n']}):", None, ""),
        (f"  ApplyRun.duration_ms ({'/'.join(one['kinds'])}, {one['commands']} commands)",
         one["apply_run_duration_ms"]["p50"], "ms"),
        ("  services write -> farm applied (database)", one["end_to_end_ms"]["p50"], "ms"),
    ]  # fmt: skip
    for label, value, unit in rows:
        if value is None:
            print(label)
        else:
            print(f"{label:70} {value:10.1f} {unit}")
    if s["queue_estimated"]:
        print(
            f"* the worker took {s['queue_rate_per_s']:.0f} no-op apply requests per second; the other"
            f" {s['queue_purged']:,} were purged after {cfg['drain_cap_s']:.0f} s and their time extrapolated"
        )
    print()
    print(f"kernel matches the database at the end: {'yes' if r['kernel_matches'] else 'NO'}")
    print(f"total run time: {r['run_seconds']:.0f} s")


# -- main ----------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--changes", type=int, default=200, help="isolated weight changes through the API")
    parser.add_argument("--back-to-back", type=int, default=30, help="weight changes sent without a pause")
    parser.add_argument("--loaded-changes", type=int, default=20, help="isolated changes with the scale farms")
    parser.add_argument("--farms", type=int, default=1000)
    parser.add_argument("--backends", type=int, default=10, help="backends per scale farm")
    parser.add_argument("--single", type=int, default=5, help="single-backend changes with the scale farms")
    parser.add_argument("--full-reps", type=int, default=1, help="direct full applies")
    parser.add_argument(
        "--drain-seconds", type=float, default=15, help="wait this long for the queue of no-op apply requests"
    )
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root (sudo): the benchmark builds network namespaces")
    if args.farms * args.backends > 250 * 256 or args.farms > 1000:
        sys.exit("at most 1,000 farms and 64,000 backends (the address plan)")

    def terminated(signum, _frame):
        raise SystemExit(f"terminated by signal {signum}")

    signal.signal(signal.SIGTERM, terminated)

    tmp = Path(tempfile.mkdtemp(prefix="lbweb-bench-cp-"))
    from tests.stack import RedisServer

    redis_server = RedisServer(tmp / "redis")
    # Before Django is imported: settings read these once.
    env = dict(
        os.environ,
        LBWEB_VAR_DIR=str(tmp / "var"),
        DATABASE_URL=f"sqlite:///{tmp / 'bench.sqlite3'}",
        REDIS_URL=redis_server.url,
        DJANGO_SETTINGS_MODULE="lbweb.settings",
    )
    os.environ.update({k: env[k] for k in ("LBWEB_VAR_DIR", "DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE")})

    lab = worker = gunicorn = watcher = None
    logs = {"worker": tmp / "worker.log", "gunicorn": tmp / "gunicorn.log"}
    try:
        from tests.lab import Lab, backend4, vip4
        from tests.stack import Worker

        redis_server.start()
        progress("migrating a fresh SQLite database")
        subprocess.run([str(PYTHON), "manage.py", "migrate", "--noinput"], cwd=ROOT, env=env, check=True,
                       stdout=subprocess.DEVNULL)  # fmt: skip
        import django

        django.setup()
        import redis
        from django.conf import settings
        from django.contrib.auth import get_user_model
        from rest_framework.authtoken.models import Token

        from farms.models import ApplyRun, Backend

        coalesce = settings.LBWEB_APPLY_COALESCE_SECONDS
        env["LBWEB_APPLY_COALESCE_SECONDS"] = str(coalesce)
        gap = coalesce + 0.05  # an isolated change finds the worker idle and outside its coalescing window
        user = get_user_model().objects.create_superuser("bench", "", "bench-password")
        token = Token.objects.create(user=user).key
        redis_client = redis.Redis.from_url(redis_server.url)

        progress("building the namespace lab")
        lab = Lab(f"lbcp{os.getpid() % 10000}").build()
        progress("starting the worker in the LB namespace and gunicorn")
        worker = Worker(lab.lb, env, logs["worker"]).start(timeout=60)
        gunicorn, port = start_gunicorn(env, logs["gunicorn"])
        api = Api(f"http://127.0.0.1:{port}", token)
        wait_until(lambda: ApplyRun.objects.filter(reason__startswith="worker start").exists(), 60, "start reconcile")

        def api_up() -> bool:
            try:
                api.call("GET", "farms/", 200)
                return True
            except Exception:
                return False

        wait_until(api_up, 60, "gunicorn", interval=0.1)

        # -- 1. latency --------------------------------------------------------------------
        weights = [10, 20, 30]
        farm = api.call("POST", "farms/", 201, json={"name": LATENCY_FARM, "vip": vip4(1), "protocol": "tcp",
                                                     "ports": "80", "mode": "dnat", "scheduler": "weight"})  # fmt: skip
        backends = [
            api.call("POST", "backends/", 201, json={"farm": farm["id"], "address": backend4(name), "weight": w})["id"]
            for name, w in zip(("b1", "b2", "b3"), weights, strict=True)
        ]
        api.wait_applied(farm["id"])
        answers = {a["backend"] for a in lab.http_get(vip4(1), 80, count=30)}
        watcher = Watcher(lab.lb, f"farm-{LATENCY_FARM}")
        if watcher.initial != [sum(weights), sorted(weights)]:
            raise RuntimeError(f"the watcher reads {watcher.initial}, expected {weights}")
        weight_changes(api, watcher, backends, weights, 5, gap)  # warm-up: connections, caches, imports
        latency = {}
        progress(f"latency: {args.changes} isolated changes (each after a {gap:.2f} s pause)")
        latency["isolated"] = weight_changes(api, watcher, backends, weights, args.changes, gap)
        if args.back_to_back:
            progress(f"latency: {args.back_to_back} back-to-back changes")
            time.sleep(gap)
            latency["back_to_back"] = weight_changes(api, watcher, backends, weights, args.back_to_back, 0)

        # -- 2. 1,000 farms ----------------------------------------------------------------
        time.sleep(gap)
        first_scale_run = ApplyRun.objects.order_by("-id").values_list("id", flat=True).first()
        progress(f"creating {args.farms} farms x {args.backends} backends through farms.services")
        marks: dict = {}
        committed, stop = threading.Event(), threading.Event()
        poller = threading.Thread(target=watch_applied, args=(marks, committed, stop), daemon=True)
        poller.start()
        try:
            create_scale_farms(args.farms, args.backends, marks, committed)
            progress("waiting for the worker to apply them")
            poller.join(600)
        finally:
            stop.set()
        if "error" in marks:
            raise marks["error"]
        if "applied" not in marks:
            raise RuntimeError("the scale farms were not applied within 600 s")
        scale = {"apply_requests": args.farms * (1 + args.backends)}
        scale.update(drain_queue(redis_client, marks["committed"], args.drain_seconds))
        big = list(ApplyRun.objects.filter(id__gt=first_scale_run).exclude(kind="noop").order_by("id"))
        if not big or not all(run.ok for run in big):
            raise RuntimeError(f"scale apply failed: {[(r.kind, r.error[:300]) for r in big]}")
        main_run = max(big, key=lambda run: run.farms_changed)
        scale.update(
            {
                "backend_rows": Backend.objects.exclude(farm__name=LATENCY_FARM).count(),
                "create_s": round(marks["committed"] - marks["started"], 2),
                "commit_ms": ms(marks["committed"] - marks["written"]),
                "enqueue_s": round(marks["enqueued"] - marks["committed"], 2),
                "worker_apply_s": round(marks["applied"] - marks["committed"], 2),
                "worker_runs": [
                    {
                        "kind": x.kind,
                        "farms_changed": x.farms_changed,
                        "commands": x.commands,
                        "duration_ms": x.duration_ms,
                    }
                    for x in big
                ],
                "worker_run": {
                    "kind": main_run.kind,
                    "farms_changed": main_run.farms_changed,
                    "commands": main_run.commands,
                    "duration_ms": round(main_run.duration_ms, 1),
                },
            }
        )
        progress(f"latency: {args.loaded_changes} isolated changes with {args.farms} more farms")
        if args.loaded_changes:
            latency["isolated_loaded"] = weight_changes(api, watcher, backends, weights, args.loaded_changes, gap)
        progress(f"{args.single} single-backend changes with {args.farms} farms")
        scale["single_change"] = single_backend_changes(f"s{args.farms // 2:04d}", args.single, gap)
        time.sleep(gap)
        progress(f"direct full apply in the LB namespace, {args.full_reps} times")
        scale["direct_full_apply"] = direct_full_apply(lab.lb, env, args.full_reps)
        matches = kernel_check(lab.lb, env)
        answers |= {a["backend"] for a in lab.http_get(vip4(1), 80, count=30)}
        if answers != {"b1", "b2", "b3"}:
            raise RuntimeError(f"the latency farm does not balance over its three backends: {answers}")

        result = {
            "when": datetime.now().astimezone().isoformat(timespec="seconds"),
            "config": {
                "cpus": os.cpu_count(),
                "kernel": platform.release(),
                "coalesce_s": coalesce,
                "isolated_gap_s": gap,
                "farms": args.farms,
                "backends": args.backends,
                "drain_cap_s": args.drain_seconds,
            },
            "latency": latency,
            "scale": scale,
            "kernel_matches": matches,
            "run_seconds": round(time.monotonic() - STARTED, 1),
        }
    except BaseException:
        for name, path in logs.items():
            print(f"--- {name} log (tail) ---\n{tail(path)}", file=sys.stderr)
        raise
    finally:
        progress("tearing down")
        if watcher:
            watcher.stop()
        stop_process(gunicorn)
        if worker:
            worker.stop()
        if lab:
            lab.destroy()
        redis_server.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    print_report(result)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"control_plane-{datetime.now().strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"results: {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
