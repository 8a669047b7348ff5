"""Control-plane figures (issue 7): API write to rule in the kernel, full applies of 100, 1,000 and
10,000 farms beside the kernel's own limit, single-backend changes at each size, and a burst of writes.

    sudo .venv/bin/python bench/control_plane.py [--farms 100,1000,10000] [--backends 10] [--changes 200]

As root, from the repository root. The whole stack runs as in production, on throw-away state: a
private Redis and a fresh SQLite database in a temporary directory, the real Celery worker inside the
LB namespace of the namespace lab (tests/support/lab.py: only 198.18.0.0/15, only in namespaces this script
creates) and the REST API under gunicorn in the host namespace, which gets no rule. Everything is torn
down at the end, also on failure or Ctrl-C.

Measured (the kernel's own word on what it holds: bench/cp_kernel.py):

1. latency: a farm (scheduler ``weight``, 3 backends); each change is a PATCH of one backend's
   weight through the REST API, timed from sending the request until the kernel of the LB namespace
   holds the rule with the new weights. ``isolated`` changes wait out the worker's coalescing window
   first (a user clicking); ``back-to-back`` changes follow one another at once (a script).
2. at each farm count of ``--farms`` (the scale farms of the previous count deleted first):
   a. full apply: the farms (``--backends`` each) created through farms.services in one commit; the
      worker's time from the commit to every farm applied, beside the kernel limit measured right
      after in the same run: the full document of the same configuration loaded straight into the
      LB namespace with ``nft -j -f`` (bench/cp_kernel.py). Their ratio, and both per farm.
   b. single-backend change: ``--single`` isolated PATCHes of one backend's weight of one farm,
      write to rule in the kernel, and the worker's ApplyRun (duration, commands) of each. The
      ratio of the largest count's medians to the smallest's must stay near 1.
   c. burst: ``--burst`` PATCHes of backend weights over the farms from ``--burst-clients`` API
      clients at once: writes accepted per second, kernel transactions (ApplyRun rows that changed
      the kernel) per second, and the time from the last answer to every farm applied.

No pass/fail: the figures are printed as tables and written to
bench/results/control_plane-<timestamp>.json (``--out`` for another directory).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import cp_scale  # noqa: E402
from bench.cp_kernel import Watcher, shares_match  # noqa: E402
from bench.cp_util import PYTHON, ROOT, STARTED, Api, progress, ratio, wait_until  # noqa: E402

GUNICORN = ROOT / ".venv" / "bin" / "gunicorn"
RESULTS = ROOT / "bench" / "results"
LATENCY_FARM = "lat"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_gunicorn(env: dict, log_path: Path) -> tuple[subprocess.Popen, int]:
    port = free_port()
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            # --timeout: a request held up by a busy shared machine is measured, not killed at 30 s
            [str(GUNICORN), "lbweb.wsgi", "--bind", f"127.0.0.1:{port}", "--workers", "2", "--timeout", "300"],
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


def kernel_check(netns: str, env: dict) -> bool:
    """``manage.py kernel --check`` in the LB namespace (libnftables reads the whole table: slow with many farms)."""
    cmd = ["ip", "netns", "exec", netns, str(PYTHON), "manage.py", "kernel", "--check"]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True).returncode == 0


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def nft_version() -> str:
    result = subprocess.run(["nft", "--version"], capture_output=True, text=True)
    return result.stdout.strip()


# -- report --------------------------------------------------------------------------------


def print_report(r: dict) -> None:
    cfg = r["config"]
    print()
    print(f"# lbweb control plane: {cfg['cpus']} CPUs ({cfg['cpu_model']}), kernel {cfg['kernel']}, {cfg['nft']},")
    print(f"# coalescing window {cfg['coalesce_s']} s, load average at the start {cfg['loadavg_start']}")
    print()
    print("API write to rule in the kernel (PATCH of one backend's weight; medians and p99 in ms)")
    print(f"{'series':52} {'n':>4} {'p50':>8} {'p99':>8} {'max':>8} {'API p50':>8} {'API p99':>8}")
    rows = [(r["latency"].get("isolated"), "isolated changes, 1 farm (3 backends)"),
            (r["latency"].get("back_to_back"), "back-to-back changes, 1 farm")]  # fmt: skip
    rows += [(s["single"], f"isolated changes, one of {s['farms']:,} farms") for s in r["scale"]]
    for series, label in rows:
        if not series:
            continue
        k, a = series["kernel_ms"], series["api_ms"]
        print(f"{label:52} {k['n']:4} {k['p50']:8.1f} {k['p99']:8.1f} {k['max']:8.1f} {a['p50']:8.1f} {a['p99']:8.1f}")
    print("(API: the PATCH alone, sent to answered; the others: sent to the new rule announced by the kernel)")
    print()
    print(f"Full apply: N farms x {cfg['backends']} backends written in one commit")
    print(f"{'farms':>7} {'worker s':>9} {'kernel s':>9} {'x kernel':>9} {'worker ms/farm':>15} {'kernel ms/farm':>15}"
          f" {'commands':>9} {'write s':>8} {'drain s':>8} {'worker MB':>10} {'max proc MB':>12}"
          f" {'CPU s':>7}")  # fmt: skip
    for s in r["scale"]:
        f, k = s["full_apply"], s["full_apply"]["kernel_limit"]
        drained = f"{f['queue_drained_s']:.0f}{'*' if f['queue_estimated'] else ''}" if f["queue_drained_s"] else "-"
        memory = f.get("worker_memory") or {}
        print(f"{s['farms']:7,} {f['worker_apply_s']:9.2f} {k['nft_load_s']:9.2f} {f['ratio_worker_to_kernel']:9.2f}"
              f" {f['worker_ms_per_farm']:15.2f} {k['ms_per_farm']:15.2f} {f['worker_run']['commands']:9,}"
              f" {f['create_s']:8.1f} {drained:>8} {memory.get('peak_tree_rss_mb', 0):10,.0f}"
              f" {memory.get('max_process_hwm_mb') or 0:12,.0f} {memory.get('cpu_s', 0):7.1f}")  # fmt: skip
    print("(worker: from the COMMIT to every farm recorded applied; kernel: `nft -j -f` of the full document of the")
    print(" same configuration into the LB namespace without lbweb's table, median of --full-reps; write: farm 0")
    print(" through the services and the rest as bulk rows, one transaction; drain: commit to the apply queue")
    print(" empty (* = estimated from the rate, the rest purged); worker MB: peak of the summed RSS of the worker's")
    print(" processes (worker, kernel writer, scratch) sampled every 50 ms; max proc MB: the largest VmHWM;")
    print(" CPU s: user + system time of those processes meanwhile, the figure the machine's other load leaves alone)")
    print()
    print("Single-backend change (one backend's weight through the API), N farms present")
    print(
        f"{'farms':>7} {'n':>4} {'write->kernel p50':>18} {'p99':>8} {'ApplyRun p50 ms':>16} {'p99':>8} {'commands':>9}"
        "  written by"
    )
    for s in r["scale"]:
        one = s["single"]
        k, run = one["kernel_ms"], one["apply_run_ms"]
        commands = "/".join(str(c) for c in one["commands"])
        print(f"{s['farms']:7,} {k['n']:4} {k['p50']:18.1f} {k['p99']:8.1f} {run['p50']:16.1f} {run['p99']:8.1f}"
              f" {commands:>9}  {'/'.join(one.get('writers', []))}")  # fmt: skip
    growth = r.get("single_growth")
    if growth:
        print(f"ratio {growth['to']:,} farms / {growth['from']:,} farms: write->kernel p50 x{growth['kernel_p50']},"
              f" ApplyRun p50 x{growth['apply_run_p50']}")  # fmt: skip
    print()
    if any(s.get("burst") for s in r["scale"]):
        b0 = next(s["burst"] for s in r["scale"] if s.get("burst"))
        print(f"Burst: {b0['writes']} PATCHes of backend weights from {b0['clients']} API clients at once,"
              " N farms present")  # fmt: skip
        print(f"{'farms':>7} {'writes/s':>9} {'API p50':>8} {'p99':>8} {'transactions':>13} {'tx/s':>6}"
              f" {'writes/tx':>10} {'ApplyRun p50':>13} {'last write->applied ms':>23}")  # fmt: skip
        for s in r["scale"]:
            b = s.get("burst")
            if not b:
                continue
            run = b["apply_run_ms"]["p50"] if b["apply_run_ms"] else 0.0
            api_ms = b["write_api_ms"]
            print(f"{s['farms']:7,} {b['writes_per_s']:9.1f} {api_ms['p50']:8.1f} {api_ms['p99']:8.1f}"
                  f" {b['transactions']:13} {b['transactions_per_s']:6.2f} {b['writes_per_transaction']:10}"
                  f" {run:13.1f} {b['last_write_to_applied_ms']:23.1f}")  # fmt: skip
        print("(tx = ApplyRun rows that changed the kernel, counted from the first write to every farm applied)")
        print()
    checks = [
        f"{s['farms']:,}: {'yes' if s['kernel_matches'] else 'NO'}"
        for s in r["scale"]
        if s["kernel_matches"] is not None
    ]
    print(f"kernel matches the database (manage.py kernel --check): {', '.join(checks) or 'not checked'}")
    print(f"total run time: {r['run_seconds']:.0f} s; load average at the end {r['loadavg_end']}")


RECORD = ROOT / "bench" / "runs" / "RESULTS-control_plane.json"


def record_figures(r: dict) -> dict[str, float | None]:
    """The figures a run is judged by, by name (the goals of bench/RESULTS.md's "Control plane")."""
    figures: dict[str, float | None] = {}
    for s in r.get("scale", []):
        n, f = s["farms"], s["full_apply"]
        figures[f"full apply {n:,} farms, worker s"] = f.get("worker_apply_s")
        figures[f"full apply {n:,} farms, nft -j -f s"] = f.get("kernel_limit", {}).get("nft_load_s")
        figures[f"full apply {n:,} farms, tasks queued"] = f.get("queued_tasks", f.get("apply_requests"))
        figures[f"full apply {n:,} farms, worker peak MB"] = (f.get("worker_memory") or {}).get("peak_tree_rss_mb")
        figures[f"full apply {n:,} farms, worker CPU s"] = (f.get("worker_memory") or {}).get("cpu_s")
        figures[f"single change at {n:,} farms, p50 ms"] = s.get("single", {}).get("kernel_ms", {}).get("p50")
    growth = r.get("single_growth") or {}
    figures["single change, largest / smallest count"] = growth.get("kernel_p50")
    return figures


def print_against_record(r: dict, record_path: Path = RECORD) -> None:
    """Each figure beside the recorded run's (bench/runs/RESULTS-control_plane.json), when there is one."""
    if not record_path.exists():
        return
    record = json.loads(record_path.read_text())
    now, before = record_figures(r), record_figures(record)
    print(f"Against the record ({record_path.name}, {record.get('when', '?')}):")
    print(f"{'figure':48} {'now':>10} {'record':>10} {'now/record':>11}")
    for name, value in now.items():
        old = before.get(name)
        shown = [f"{v:10,.2f}" if isinstance(v, (int, float)) else f"{'-':>10}" for v in (value, old)]
        rate = f"{value / old:11.2f}" if isinstance(value, (int, float)) and old else f"{'-':>11}"
        print(f"{name:48} {shown[0]} {shown[1]} {rate}")
    print("(tasks queued: apply tasks in the broker's queue right after the commit; the record predates the")
    print(" one-waiting-apply queue and counts one request per write)")
    print()


# -- main ----------------------------------------------------------------------------------


def parse_counts(text: str) -> list[int]:
    counts = sorted({int(x.replace("_", "")) for x in text.split(",") if x.strip()})
    if not counts or counts[0] < 1:
        raise argparse.ArgumentTypeError("farm counts: positive integers separated by commas")
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--changes", type=int, default=200, help="isolated weight changes, 1 farm (default 200)")
    parser.add_argument("--back-to-back", type=int, default=30, help="weight changes sent without a pause (30)")
    parser.add_argument("--farms", type=parse_counts, default=[100, 1000, 10000],
                        help="farm counts, comma separated (default 100,1000,10000)")  # fmt: skip
    parser.add_argument("--backends", type=int, default=10, help="backends per scale farm (default 10)")
    parser.add_argument("--single", type=int, default=20, help="single-backend changes at each farm count (20)")
    parser.add_argument("--full-reps", type=int, default=1, help="kernel-limit loads at each farm count (1)")
    parser.add_argument("--burst", type=int, default=200, help="writes in the burst at each farm count (200; 0: none)")
    parser.add_argument("--burst-clients", type=int, default=4, help="API clients sending the burst (4)")
    parser.add_argument("--drain-seconds", type=float, default=15,
                        help="wait for the no-op apply requests of a big commit (15 s)")  # fmt: skip
    parser.add_argument("--check-max", type=int, default=1000,
                        help="kernel --check up to this many farms (1000: slow)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=RESULTS, help="directory of the JSON result (bench/results)")
    args = parser.parse_args()
    if args.full_reps < 1:  # the worker's full apply is reported beside it: a run without it has no ratio
        parser.error("--full-reps must be at least 1 (the kernel-limit load is the full apply's yardstick)")
    if os.geteuid() != 0:
        sys.exit("run as root (sudo): the benchmark builds network namespaces")
    if args.farms[-1] > cp_scale.max_farms(args.backends):
        sys.exit(f"at most {cp_scale.max_farms(args.backends):,} farms of {args.backends} backends (the address plan)")

    def terminated(signum, _frame):
        raise SystemExit(f"terminated by signal {signum}")

    signal.signal(signal.SIGTERM, terminated)
    loadavg_start = " ".join(Path("/proc/loadavg").read_text().split()[:3])

    tmp = Path(tempfile.mkdtemp(prefix="lbweb-bench-cp-"))
    from tests.support.stack import RedisServer

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
        from tests.support.lab import Lab, backend4, vip4
        from tests.support.stack import Worker

        redis_server.start()
        progress("migrating a fresh SQLite database")
        subprocess.run([str(PYTHON), "manage.py", "migrate", "--noinput"], cwd=ROOT, env=env, check=True,
                       stdout=subprocess.DEVNULL)  # fmt: skip
        import django

        django.setup()
        import redis
        from django.conf import settings
        from django.contrib.auth import get_user_model
        from knox.models import AuthToken

        from farms.models import ApplyRun

        coalesce = settings.LBWEB_APPLY_COALESCE_SECONDS
        env["LBWEB_APPLY_COALESCE_SECONDS"] = str(coalesce)
        gap = coalesce + 0.05  # an isolated change finds the worker idle and outside its coalescing window
        user = get_user_model().objects.create_superuser("bench", "", "bench-password")
        token = AuthToken.objects.create(user=user)[1]
        redis_client = redis.Redis.from_url(redis_server.url)

        progress("building the namespace lab")
        lab = Lab(f"lbcp{os.getpid() % 10000}").build()
        progress("starting the worker in the LB namespace and gunicorn")
        worker = Worker(lab.lb, env, logs["worker"]).start(timeout=60)
        gunicorn, port = start_gunicorn(env, logs["gunicorn"])
        api = Api(f"http://127.0.0.1:{port}", token)
        wait_until(
            lambda: ApplyRun.objects.filter(reason__startswith="worker start").exists(), 60, "start reconcile", 0.02
        )

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
        watcher = Watcher(lab.lb, LATENCY_FARM, farm["id"])
        if not shares_match(watcher.initial, weights):
            raise RuntimeError(f"the watcher reads {watcher.initial}, expected the shares of {weights}")
        cp_scale.weight_changes(api, watcher, backends, weights, 5, gap)  # warm-up: connections, caches, imports
        latency = {}
        progress(f"latency: {args.changes} isolated changes (each after a {gap:.2f} s pause)")
        latency["isolated"] = cp_scale.weight_changes(api, watcher, backends, weights, args.changes, gap)
        if args.back_to_back:
            progress(f"latency: {args.back_to_back} back-to-back changes")
            time.sleep(gap)
            latency["back_to_back"] = cp_scale.weight_changes(api, watcher, backends, weights, args.back_to_back, 0)
        watcher.stop()
        watcher = None

        # -- 2. each farm count ------------------------------------------------------------
        scale = []
        for count in args.farms:
            stage: dict = {"farms": count}
            time.sleep(gap)
            removed = cp_scale.delete_scale_farms(redis_client, args.drain_seconds)
            if removed:
                progress(f"{removed:,} farms of the previous count deleted and applied")
                stage["deleted_before"] = removed
            time.sleep(gap)
            progress(f"{count:,} farms x {args.backends} backends: creating them through farms.services")
            stage["full_apply"] = cp_scale.full_apply(
                count, args.backends, redis_client, args.drain_seconds, worker.proc.pid
            )
            memory = stage["full_apply"]["worker_memory"]
            progress(f"  worker: {memory['cpu_s']} s CPU, peak {memory['peak_tree_rss_mb']} MB summed RSS,"
                     f" VmHWM {memory['process_hwm_mb'][:4]}")  # fmt: skip
            progress(f"  the worker applied them in {stage['full_apply']['worker_apply_s']:.2f} s;"
                     f" the kernel limit (nft -j -f, {args.full_reps} time(s))")  # fmt: skip
            cp_scale.with_kernel_limit(stage["full_apply"], count, lab.lb, env, str(tmp / f"full-{count}.json"),
                                       args.full_reps)  # fmt: skip
            (tmp / f"full-{count}.json").unlink(missing_ok=True)
            progress(f"  {args.single} single-backend changes with {count:,} farms")
            time.sleep(gap)
            stage["single"] = cp_scale.single_changes(api, lab.lb, args.single, gap, count)
            if args.burst:
                progress(f"  a burst of {args.burst} writes from {args.burst_clients} clients")
                time.sleep(gap)
                stage["burst"] = cp_scale.burst(api, args.burst, args.burst_clients, count)
            stage["kernel_matches"] = kernel_check(lab.lb, env) if count <= args.check_max else None
            scale.append(stage)
            progress(f"  done: write->kernel p50 {stage['single']['kernel_ms']['p50']:.1f} ms,"
                     f" ApplyRun p50 {stage['single']['apply_run_ms']['p50']:.1f} ms")  # fmt: skip

        answers |= {a["backend"] for a in lab.http_get(vip4(1), 80, count=30)}
        if answers != {"b1", "b2", "b3"}:
            raise RuntimeError(f"the latency farm does not balance over its three backends: {answers}")
        growth = None
        if len(scale) > 1:
            small, large = scale[0]["single"], scale[-1]["single"]
            growth = {
                "from": scale[0]["farms"],
                "to": scale[-1]["farms"],
                "kernel_p50": ratio(large["kernel_ms"]["p50"], small["kernel_ms"]["p50"]),
                "apply_run_p50": ratio(large["apply_run_ms"]["p50"], small["apply_run_ms"]["p50"]),
            }
        result = {
            "when": datetime.now().astimezone().isoformat(timespec="seconds"),
            "command": " ".join([".venv/bin/python", "bench/control_plane.py", *sys.argv[1:]]),
            "config": {
                "cpus": os.cpu_count(),
                "cpu_model": cpu_model(),
                "kernel": platform.release(),
                "nft": nft_version(),
                "coalesce_s": coalesce,
                "isolated_gap_s": gap,
                "farms": args.farms,
                "backends": args.backends,
                "drain_cap_s": args.drain_seconds,
                "loadavg_start": loadavg_start,
            },
            "latency": latency,
            "scale": scale,
            "single_growth": growth,
            "loadavg_end": " ".join(Path("/proc/loadavg").read_text().split()[:3]),
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

    result["lab_namespaces"] = lab.namespaces
    print_report(result)
    print_against_record(result)
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / f"control_plane-{datetime.now().strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"results: {out}")


if __name__ == "__main__":
    main()
