"""A fault run under traffic (issue 12, item 7): does anything break while the control plane is hurt?

    sudo .venv/bin/python bench/faults.py [--changes 1000] [--keepalive 4] [--churn-farms 20]

As root, from the repository root. The stack runs as in production on throw-away state (a private
Redis, a fresh SQLite database, the real Celery worker in the LB namespace of tests/support/lab.py, beat
reconciling every 5 s, the REST API under gunicorn in the host namespace), as in
bench/control_plane.py. Only 198.18.0.0/15, only in namespaces this script creates; everything is
torn down at the end, also on failure.

Traffic, from the client namespace, the whole time: three farms over the three backends, ``dnat``
(round robin), ``snat`` (round robin) and ``sticky`` (DNAT, persistence by source address, 1 hour).
``--keepalive`` HTTP keep-alive connections per farm send a request every 0.25 s; one opener per
farm opens a new connection after another (the sticky farm's from 8 client addresses in turn).

Meanwhile ``--changes`` configuration changes go in through the API (backend weights of
``--churn-farms`` farms and of the sticky farm), and at fixed points of them: the worker is killed
(kill -9 of its process group) and started again, twice; Redis is restarted once; the ruleset is
tampered with once (a churn farm's chain emptied by hand); one farm the kernel refuses is submitted
(a backend port of 70000 written behind validation's back, then the farm touched through the API).

At the end: established connections broken, new connections that failed, persistence entries lost
(an entry of the start missing, or a client sent to another backend), full rebuilds during the run,
whether every valid change is applied (each churn backend's last weight, every farm but the refused
one applied) and whether the kernel equals the database (``manage.py kernel --check``). Printed and
written to bench/results/faults-<time>.json. No pass/fail.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.control_plane import kernel_check, start_gunicorn, stop_process, tail  # noqa: E402
from bench.cp_util import PYTHON, ROOT, Api, progress, wait_until  # noqa: E402
from tests.support.lab import enter_netns  # noqa: E402

RESULTS = ROOT / "bench" / "results"
STICKY_CLIENTS = [f"198.18.0.{20 + i}" for i in range(8)]


def request(sock: socket.socket, close: bool) -> dict:
    import http.client

    conn = http.client.HTTPConnection("lab")
    conn.sock = sock
    conn.request("GET", "/", headers={"Connection": "close" if close else "keep-alive"})
    response = conn.getresponse()
    return json.loads(response.read())


class Traffic:
    """Clients in the client namespace: keep-alive holders and openers, each on a thread of its own."""

    def __init__(self, netns: str, farms: dict[str, str], keepalive: int):
        self.netns, self.farms, self.keepalive = netns, farms, keepalive
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.requests = Counter()  # farm -> keep-alive requests answered
        self.broken: list[dict] = []  # keep-alive connections that failed, or moved to another backend
        self.opened = Counter()
        self.failed: list[dict] = []
        self.sticky_backends: dict[str, set[str]] = {c: set() for c in STICKY_CLIENTS}
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        for farm, vip in self.farms.items():
            for i in range(self.keepalive):
                self._spawn(self._hold, farm, vip, i)
            self._spawn(self._open, farm, vip)

    def _spawn(self, target, *args) -> None:
        def run():
            enter_netns(self.netns)
            target(*args)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        self.threads.append(thread)

    def _hold(self, farm: str, vip: str, index: int) -> None:
        sock, backend = None, None
        while not self.stop.is_set():
            try:
                if sock is None:
                    sock = socket.create_connection((vip, 80), timeout=3)
                    backend = request(sock, close=False)["backend"]
                answer = request(sock, close=False)
                with self.lock:
                    self.requests[farm] += 1
                if answer["backend"] != backend:
                    raise RuntimeError(f"moved from {backend} to {answer['backend']}")
            except Exception as exc:
                with self.lock:
                    self.broken.append({"farm": farm, "conn": index, "t": time.monotonic(), "error": repr(exc)})
                if sock is not None:
                    sock.close()
                sock = None
            self.stop.wait(0.25)
        if sock is not None:
            sock.close()

    def _open(self, farm: str, vip: str) -> None:
        sources = itertools.cycle(STICKY_CLIENTS if farm == "sticky" else [None])
        while not self.stop.is_set():
            source = next(sources)
            try:
                sock = socket.create_connection((vip, 80), timeout=3, source_address=(source, 0) if source else None)
                answer = request(sock, close=True)
                sock.close()
                with self.lock:
                    self.opened[farm] += 1
                    if source:
                        self.sticky_backends[source].add(answer["backend"])
            except Exception as exc:
                with self.lock:
                    self.failed.append({"farm": farm, "t": time.monotonic(), "error": repr(exc)})
            self.stop.wait(0.02)

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=10)


def persistence_entries(lab, prefix: str) -> dict[str, str]:
    """The sticky farm's learnt entries in the kernel: client -> the set (so the backend) it is in."""
    out = lab.ns(lab.lb, "nft", "-j", "list", "table", "inet", "lbweb", check=False).stdout
    entries = {}
    for item in json.loads(out or '{"nftables": []}')["nftables"]:
        body = item.get("set", {})
        if body.get("name", "").startswith(prefix):
            for element in body.get("elem", []):
                value = element["elem"]["val"] if isinstance(element, dict) else element
                entries[str(value)] = body["name"]
    return entries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--changes", type=int, default=1000, help="configuration changes through the API (1000)")
    parser.add_argument("--keepalive", type=int, default=4, help="keep-alive connections per farm (4)")
    parser.add_argument("--churn-farms", type=int, default=20, help="farms whose weights change (20)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="directory of the JSON result (bench/results)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root (sudo): the benchmark builds network namespaces")

    def terminated(signum, _frame):
        raise SystemExit(f"terminated by signal {signum}")

    signal.signal(signal.SIGTERM, terminated)
    started_at = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="lbweb-bench-faults-"))
    from tests.support.stack import RedisServer

    redis_server = RedisServer(tmp / "redis")
    env = dict(
        os.environ,
        LBWEB_VAR_DIR=str(tmp / "var"),
        DATABASE_URL=f"sqlite:///{tmp / 'bench.sqlite3'}",
        REDIS_URL=redis_server.url,
        DJANGO_SETTINGS_MODULE="lbweb.settings",
        LBWEB_RECONCILE_SECONDS="5",
    )
    os.environ.update({k: env[k] for k in ("LBWEB_VAR_DIR", "DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE")})
    lab = worker = gunicorn = beat = traffic = None
    logs = {"worker": tmp / "worker.log", "gunicorn": tmp / "gunicorn.log", "beat": tmp / "beat.log"}
    events: list[dict] = []
    try:
        from tests.support.lab import Lab, backend4, vip4
        from tests.support.stack import Worker

        redis_server.start()
        progress("migrating a fresh SQLite database")
        subprocess.run([str(PYTHON), "manage.py", "migrate", "--noinput"], cwd=ROOT, env=env, check=True,
                       stdout=subprocess.DEVNULL)  # fmt: skip
        import django

        django.setup()
        from django.contrib.auth import get_user_model
        from rest_framework.authtoken.models import Token

        from farms.models import ApplyRun, Backend, Farm

        user = get_user_model().objects.create_superuser("bench", "", "bench-password")
        token = Token.objects.create(user=user).key
        progress("building the namespace lab")
        lab = Lab(f"lbft{os.getpid() % 10000}").build()
        for address in STICKY_CLIENTS:
            lab.ns(lab.client, "ip", "addr", "add", f"{address}/24", "dev", "eth0")
        progress("starting the worker, beat and gunicorn")
        worker = Worker(lab.lb, env, logs["worker"]).start(timeout=60)
        gunicorn, port = start_gunicorn(env, logs["gunicorn"])
        with open(logs["beat"], "ab") as log:
            beat = subprocess.Popen(
                [str(ROOT / ".venv/bin/celery"), "-A", "lbweb", "beat", "-s", str(tmp / "beat-schedule")],
                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        api = Api(f"http://127.0.0.1:{port}", token)

        def api_up() -> bool:
            try:
                api.call("GET", "farms/", 200)
                return True
            except Exception:
                return False

        wait_until(api_up, 60, "gunicorn", interval=0.1)

        def farm(name: str, vip: str, port_: int, **fields) -> dict:
            body = {"name": name, "vip": vip, "protocol": "tcp", "ports": "80", "mode": "dnat", "scheduler": "rr"}
            made = api.call("POST", "farms/", 201, json={**body, **fields})
            made["backends"] = [
                api.call("POST", "backends/", 201, json={"farm": made["id"], "address": backend4(b), "port": port_})
                for b in ("b1", "b2", "b3")
            ]
            return made

        progress("the traffic farms and the churn farms")
        traffic_farms = {
            "dnat": farm("dnat", vip4(1), 80),
            "snat": farm("snat", vip4(2), 80, mode="snat"),
            "sticky": farm("sticky", vip4(3), 80, scheduler="weight", persistence="srcip", persist_ttl=3600),
        }
        churn = [farm(f"churn{i}", vip4(10 + i), 8080, scheduler="weight") for i in range(args.churn_farms)]
        quiet = farm("quiet", vip4(8), 8080)  # no change touches it: only a reconcile repairs its tampering
        for made in [*traffic_farms.values(), *churn, quiet]:
            api.wait_applied(made["id"], timeout=120)

        traffic = Traffic(lab.client, {name: vip4(i + 1) for i, name in enumerate(traffic_farms)}, args.keepalive)
        traffic.start()
        time.sleep(3)
        sticky_prefix = "persist-sticky-"
        entries_before = persistence_entries(lab, sticky_prefix)
        progress(f"traffic running; {len(entries_before)} persistence entries; {args.changes} changes begin")

        first_run = ApplyRun.objects.order_by("-id").values_list("id", flat=True).first() or 0
        targets = [b for f in churn for b in f["backends"]] + traffic_farms["sticky"]["backends"]
        last_weight: dict[int, int] = {}
        refused_farm: dict | None = None
        restarts: list[threading.Thread] = []

        def note(what: str) -> None:
            events.append({"t": round(time.monotonic() - started_at, 1), "event": what})
            progress(what)

        def restart_worker() -> None:
            worker.kill()
            time.sleep(1)  # a supervisor restarts it a moment later
            worker.start(timeout=60)
            note("worker started again")

        faults = {
            args.changes * 15 // 100: "kill worker",
            args.changes * 30 // 100: "restart redis",
            args.changes * 45 // 100: "tamper",
            args.changes * 60 // 100: "refused farm",
            args.changes * 75 // 100: "kill worker",
        }
        changes_started = time.monotonic()
        for k in range(args.changes):
            fault = faults.get(k)
            if fault == "kill worker":
                for thread in restarts:  # the previous restart has finished
                    thread.join()
                note("kill -9 of the worker")
                restarts.append(threading.Thread(target=restart_worker))
                restarts[-1].start()
            elif fault == "restart redis":
                note("Redis restarted")
                redis_server.stop()
                redis_server.socket.unlink(missing_ok=True)
                redis_server.start()
            elif fault == "tamper":
                note("ruleset tampered with: chain farm-quiet emptied by hand")
                lab.ns(lab.lb, "nft", "flush", "chain", "inet", "lbweb", "farm-quiet", check=False)
            elif fault == "refused farm":
                note("a farm the kernel refuses submitted")
                refused_farm = farm("refused", vip4(9), 80)
                Backend.objects.filter(farm_id=refused_farm["id"]).update(port=70000)
                api.call("PATCH", f"farms/{refused_farm['id']}/", 200, json={"description": "refused by the kernel"})
            target = targets[k % len(targets)]
            weight = 1 + (k * 37) % 100
            api.call("PATCH", f"backends/{target['id']}/", 200, json={"weight": weight})
            last_weight[target["id"]] = weight
        changes_s = time.monotonic() - changes_started
        for thread in restarts:
            thread.join()
        progress(f"{args.changes} changes sent in {changes_s:.1f} s; waiting for every valid one to be applied")
        valid = [f["id"] for f in [*traffic_farms.values(), *churn, quiet]]

        def all_applied() -> bool:
            return all(api.call("GET", f"farms/{fid}/", 200)["apply_status"]["status"] == "applied" for fid in valid)

        settled_started = time.monotonic()
        try:
            wait_until(all_applied, 120, "every valid farm applied", interval=0.5)
            applied_after_s = time.monotonic() - settled_started
        except TimeoutError:
            applied_after_s = None
        time.sleep(6)  # one more reconcile period of traffic after the last fault
        traffic.finish()
        entries_after = persistence_entries(lab, sticky_prefix)
        weights_ok = all(Backend.objects.get(id=b).weight == w for b, w in last_weight.items())
        statuses = Counter(str(Farm.objects.get(id=f).apply_status) for f in valid)
        refused_status = str(Farm.objects.get(id=refused_farm["id"]).apply_status) if refused_farm else None
        runs = ApplyRun.objects.filter(id__gt=first_run)
        quiet_chain = lab.ns(lab.lb, "nft", "list", "chain", "inet", "lbweb", "farm-quiet", check=False).stdout
        lost = [c for c, where in entries_before.items() if entries_after.get(c) != where]
        moved = {c: sorted(b) for c, b in traffic.sticky_backends.items() if len(b) > 1}
        result = {
            "config": vars(args) | {"out": str(args.out)},
            "events": events,
            "changes_sent_s": round(changes_s, 1),
            "every_valid_farm_applied_after_s": None if applied_after_s is None else round(applied_after_s, 1),
            "keepalive_requests": dict(traffic.requests),
            "established_broken": len(traffic.broken),
            "broken": traffic.broken[:20],
            "new_connections": dict(traffic.opened),
            "new_connections_failed": len(traffic.failed),
            "failed": traffic.failed[:20],
            "persistence_entries_before": len(entries_before),
            "persistence_entries_lost": len(lost),
            "sticky_clients_moved": moved,
            "full_rebuilds": runs.filter(kind="full").count(),
            "full_rebuild_reasons": list(runs.filter(kind="full").values_list("reason", flat=True)),
            "runs_by_kind": dict(Counter(runs.values_list("kind", flat=True))),
            "tampered_chain_repaired": "lbweb:" in quiet_chain,
            "apply_runs": runs.count(),
            "failed_runs": runs.filter(ok=False).count(),
            "valid_farm_status": dict(statuses),
            "last_weights_applied": weights_ok,
            "refused_farm_status": refused_status,
            "kernel_matches": kernel_check(lab.lb, env),
            "run_seconds": round(time.monotonic() - started_at),
        }
        args.out.mkdir(parents=True, exist_ok=True)
        path = args.out / f"faults-{datetime.now():%Y%m%d-%H%M%S}.json"
        path.write_text(json.dumps(result, indent=2))
        print_report(result)
        print(f"results: {path}")
    except BaseException:
        for name, path in logs.items():
            print(f"--- {name} log (tail) ---\n{tail(path)}", file=sys.stderr)
        raise
    finally:
        progress("tearing down")
        if traffic is not None:
            traffic.finish()
        for proc in (beat, gunicorn):
            stop_process(proc)
        if worker is not None:
            worker.stop()
        if lab is not None:
            lab.destroy()
        redis_server.stop()


def print_report(r: dict) -> None:
    print()
    print(f"Fault run: {r['config']['changes']} changes in {r['changes_sent_s']} s under traffic; faults:")
    for event in r["events"]:
        print(f"  {event['t']:7.1f} s  {event['event']}")
    requests = sum(r["keepalive_requests"].values())
    opened = sum(r["new_connections"].values())
    print(f"established connections broken     {r['established_broken']} (of {requests:,} keep-alive requests)")
    print(
        f"new connections failed             {r['new_connections_failed']} of {opened + r['new_connections_failed']:,}"
    )
    print(f"persistence entries lost           {r['persistence_entries_lost']} of {r['persistence_entries_before']}"
          f"; clients sent to another backend: {len(r['sticky_clients_moved'])}")  # fmt: skip
    print(f"full rebuilds during the run       {r['full_rebuilds']} {r['full_rebuild_reasons']}")
    print(f"apply runs by kind                 {r['runs_by_kind']}")
    print(f"tampered chain repaired            {r['tampered_chain_repaired']}")
    every = r["last_weights_applied"] and set(r["valid_farm_status"]) == {"applied"}
    print(f"every valid change applied         {every}"
          f" (farms: {r['valid_farm_status']}, after {r['every_valid_farm_applied_after_s']} s)")  # fmt: skip
    print(f"the refused farm                   {r['refused_farm_status']}")
    print(f"kernel equals database             {r['kernel_matches']}")
    print(f"apply runs                         {r['apply_runs']} ({r['failed_runs']} failed)")


if __name__ == "__main__":
    main()
