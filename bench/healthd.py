"""healthd benchmark, as root: checks per second, healthd's CPU, and detection-to-rule time.

    .venv/bin/python bench/healthd.py [--backends 1000] [--seconds 8]

Builds the namespace lab (tests/support/lab.py), gives backend b1 one address per
checked backend (198.18.16.0/22) served by one accept-and-close sink, and
runs a private Redis, SQLite database, the real worker and the real healthd
in the LB namespace. It prints figures, side by side with a baseline measured
in the same run; it never passes or fails.

1. Checks/s and CPU at N backends x 1 s, and at shorter intervals until one
   core is the limit. Baseline: the same TCP probes fired by a bare asyncio
   loop (healthd.probes.tcp, no database, no state, no heartbeat).
2. Detection-to-rule at probe timeouts of 0.1 s and 0.5 s: a backend starts
   refusing (TCP reset) or stops answering (blackhole) -> its chain is gone
   from the kernel. Baseline: the operator disables a backend through the
   service -> its chain is gone.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.lab import Lab  # noqa: E402
from tests.support.stack import VENV_BIN, Healthd, RedisServer, Worker, wait_until  # noqa: E402

SINK_PORT = 7000
BACKEND_NET = ipaddress.ip_network("198.18.16.0/22")
PER_FARM = 10
SINK = f"""
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", {SINK_PORT})); s.listen(4096)
while True:
    c, _ = s.accept(); c.close()
"""


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def addresses(count: int) -> list[str]:
    return [str(a) for a in list(BACKEND_NET.hosts())[:count]]


# -- the baseline prober (runs in the LB namespace as its own process) --------------------


async def bare_probes(addrs: list[str], interval: float, seconds: float) -> int:
    from healthd.probes import CheckSpec, Target, tcp

    spec = CheckSpec(type="tcp", interval=interval, timeout=0.5)
    count = 0
    deadline = time.monotonic() + seconds

    async def one(address: str, phase: float) -> None:
        nonlocal count
        await asyncio.sleep(phase)
        while time.monotonic() < deadline:
            started = time.monotonic()
            await tcp(Target(0, 0, address, SINK_PORT, spec))
            count += 1
            await asyncio.sleep(max(0.0, started + interval - time.monotonic()))

    await asyncio.gather(*(one(a, interval * i / len(addrs)) for i, a in enumerate(addrs)))
    return count


def baseline(lab: Lab, addrs: list[str], interval: float, seconds: float) -> tuple[float, float]:
    """Checks per second and CPU share of the bare prober."""
    cmd = ["ip", "netns", "exec", lab.lb, sys.executable, __file__, "--bare", str(len(addrs)), str(interval)]
    proc = subprocess.Popen([*cmd, str(seconds)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    time.sleep(0.3)
    cpu0, t0 = cpu_seconds(proc.pid), time.monotonic()
    time.sleep(seconds - 0.6)
    cpu1, t1 = cpu_seconds(proc.pid), time.monotonic()
    total = int(proc.communicate()[0].strip())
    return total / seconds, (cpu1 - cpu0) / (t1 - t0)


# -- set-up --------------------------------------------------------------------------------


def django_env(tmp: Path, redis: RedisServer) -> dict[str, str]:
    return dict(
        os.environ,
        DJANGO_SETTINGS_MODULE="lbweb.settings",
        LBWEB_VAR_DIR=str(tmp),
        DATABASE_URL=f"sqlite:///{tmp / 'bench.sqlite3'}",
        REDIS_URL=redis.url,
        LBWEB_LOG_LEVEL="WARNING",
    )


def build_backends(lab: Lab, addrs: list[str]) -> subprocess.Popen:
    batch = "".join(f"address add {a}/32 dev eth0\n" for a in addrs)
    subprocess.run(["ip", "-n", lab.backends["b1"], "-batch", "-"], input=batch, text=True, check=True)
    lab.ns(lab.lb, "ip", "route", "add", str(BACKEND_NET), "via", "198.18.1.11")
    cmd = ["ip", "netns", "exec", lab.backends["b1"], sys.executable, "-c", SINK]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def create_farms(addrs: list[str], interval: float) -> None:
    from django.db import transaction

    from farms.models import Backend, Farm, HealthCheck
    from farms.services import mark_farms_changed

    with transaction.atomic():
        farms = Farm.objects.bulk_create(
            Farm(name=f"f{i}", vip=f"198.18.100.{i + 1}", protocol="tcp", ports=str(SINK_PORT), mode="dnat")
            for i in range(len(addrs) // PER_FARM)
        )
        Backend.objects.bulk_create(Backend(farm=farms[i // PER_FARM], address=a) for i, a in enumerate(addrs))
        HealthCheck.objects.bulk_create(HealthCheck(farm=f, type="tcp", interval=interval, timeout=0.5) for f in farms)
        mark_farms_changed([f.id for f in farms])


def set_check(interval: float, timeout: float) -> None:
    from django.db import transaction

    from farms.models import Farm, HealthCheck
    from farms.services import mark_farms_changed

    with transaction.atomic():
        HealthCheck.objects.update(interval=interval, timeout=min(timeout, interval))
        mark_farms_changed(Farm.objects.values_list("id", flat=True))
    time.sleep(2)  # healthd reloads its loops, which spread over the interval again


def all_applied() -> bool:
    from django.db.models import F

    from farms.models import Farm

    return not Farm.objects.filter(applied_generation__lt=F("config_generation")).exists()


def health_counts() -> dict[str, int]:
    from django.db.models import Count

    from farms.models import Backend

    return dict(Backend.objects.values_list("health").annotate(n=Count("id")))


# -- measurements --------------------------------------------------------------------------


def heartbeat_checks(redis_client) -> int:
    from lbweb import heartbeat

    return json.loads(redis_client.get(heartbeat.KEY))["checks"]


def measure_healthd(daemon: Healthd, redis_client, seconds: float) -> tuple[float, float]:
    time.sleep(1.5)  # one heartbeat and the reloaded loops' spread
    checks0, cpu0, t0 = heartbeat_checks(redis_client), cpu_seconds(daemon.proc.pid), time.monotonic()
    time.sleep(seconds)
    checks1, cpu1, t1 = heartbeat_checks(redis_client), cpu_seconds(daemon.proc.pid), time.monotonic()
    return (checks1 - checks0) / (t1 - t0), (cpu1 - cpu0) / (t1 - t0)


class ChainWatcher:
    """``nft monitor`` in the LB namespace: when did the kernel delete each chain (no polling load)."""

    def __init__(self, lab: Lab):
        cmd = ["ip", "netns", "exec", lab.lb, "nft", "-j", "monitor", "destroy", "chains"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, bufsize=1)
        self.deleted: dict[str, float] = {}
        threading.Thread(target=self._read, daemon=True).start()
        time.sleep(0.3)  # the monitor subscribes

    def _read(self) -> None:
        for line in self.proc.stdout:
            chain = json.loads(line).get("delete", {}).get("chain", {})
            if chain.get("table") == "lbweb":
                self.deleted[chain["name"]] = time.monotonic()

    def gone_after(self, chain: str, started: float, timeout: float = 10) -> float:
        """Seconds from ``started`` until the kernel deleted ``chain``."""
        deadline = time.monotonic() + timeout
        while self.deleted.get(chain, 0) < started:
            if time.monotonic() > deadline:
                return float("nan")
            time.sleep(0.005)
        return self.deleted[chain] - started

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def detection_trials(lab: Lab, watcher: ChainWatcher, trials: int, verdict: str) -> list[float]:
    """Make one backend refuse (``reject with tcp reset``) or vanish (``drop``); time until its rule is gone."""
    from farms.models import Backend

    b1 = lab.backends["b1"]
    lab.ns(b1, "nft", "add table inet bench; add chain inet bench input { type filter hook input priority 0; }")
    times = []
    try:
        for n in range(trials):
            backend = Backend.objects.select_related("farm").filter(farm__name=f"f{n * 7 % 100}").order_by("id")[3]
            chain = f"be-{backend.farm.name}-{backend.id}"
            lab.ns(b1, "nft", f"add rule inet bench input ip daddr {backend.address} tcp dport {SINK_PORT} {verdict}")
            times.append(watcher.gone_after(chain, time.monotonic()))
            lab.ns(b1, "nft", "flush chain inet bench input")
            wait_until(lambda b=backend: Backend.objects.get(id=b.id).health == "up" and all_applied(), 15, "return")
    finally:
        lab.ns(b1, "nft", "delete table inet bench", check=False)
    return times


def write_to_rule_trials(watcher: ChainWatcher, trials: int) -> list[float]:
    """Baseline: the operator disables a backend; time until its rule is gone (the apply pipeline alone)."""
    from farms import services
    from farms.models import Backend

    times = []
    for n in range(trials):
        backend = Backend.objects.select_related("farm").filter(farm__name=f"f{n * 7 % 100 + 1}").order_by("id")[4]
        chain = f"be-{backend.farm.name}-{backend.id}"
        started = time.monotonic()
        services.backend_update(backend=backend, state="disabled")
        times.append(watcher.gone_after(chain, started))
        services.backend_update(backend=backend, state="enabled")
        wait_until(all_applied, 15, "re-enable applied")
        time.sleep(0.3)
    return times


def summary(values: list[float], bound: float | None = None) -> str:
    ms = sorted(v * 1000 for v in values)
    p90 = ms[min(len(ms) - 1, int(len(ms) * 0.9))]
    line = f"median {statistics.median(ms):6.0f} ms   p90 {p90:6.0f} ms   max {ms[-1]:6.0f} ms   (n={len(ms)})"
    if bound is not None:
        line += f"   within {bound * 1000:.0f} ms: {sum(v <= bound * 1000 for v in ms)}/{len(ms)}"
    return line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backends", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=8)
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--bare", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare:
        count, interval, seconds = int(args.bare[0]), float(args.bare[1]), float(args.bare[2])
        print(asyncio.run(bare_probes(addresses(count), interval, seconds)))
        return
    if os.geteuid() != 0:
        sys.exit("run as root: the benchmark builds network namespaces")
    addrs = addresses(args.backends - args.backends % PER_FARM)
    with tempfile.TemporaryDirectory(prefix="lbweb-bench-") as tmpdir:
        run(Path(tmpdir), addrs, args)


def run(tmp: Path, addrs: list[str], args: argparse.Namespace) -> None:
    redis = RedisServer(tmp / "redis").start()
    env = django_env(tmp, redis)
    os.environ.update(env)
    subprocess.run([str(VENV_BIN / "python"), "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    import django

    django.setup()
    import redis as redis_lib

    redis_client = redis_lib.Redis.from_url(redis.url)
    lab = Lab(tag=f"lbhb{os.getpid() % 10000}")
    processes: list = []
    try:
        lab.build()
        processes.append(build_backends(lab, addrs))
        create_farms(addrs, interval=1.0)
        worker = Worker(lab.lb, env, tmp / "worker.log").start()
        processes.append(worker)
        wait_until(all_applied, 60, "the first apply")
        daemon = Healthd(lab.lb, env, tmp / "healthd.log").start()
        processes.append(daemon)
        wait_until(lambda: health_counts().get("up") == len(addrs), 30, "every backend up")
        print(f"{len(addrs)} backends in {len(addrs) // PER_FARM} farms, TCP checks, timeout 0.5 s; 2 shared cores\n")
        print("checks per second and CPU (1.0 = one core)     healthd                  bare asyncio probes")
        for interval in (1.0, 0.25):
            if interval != 1.0:
                set_check(interval, timeout=0.5)
            rate, cpu = measure_healthd(daemon, redis_client, args.seconds)
            os.kill(daemon.proc.pid, signal.SIGSTOP)  # the baseline gets the machine and the sink to itself
            try:
                base_rate, base_cpu = baseline(lab, addrs, interval, args.seconds)
            finally:
                os.kill(daemon.proc.pid, signal.SIGCONT)
            print(
                f"  {len(addrs)} x {interval:4.2f} s (target {len(addrs) / interval:6.0f}/s)   "
                f"{rate:6.0f}/s cpu {cpu:4.2f} -> {rate / max(cpu, 1e-9):6.0f}/core-s    "
                f"{base_rate:6.0f}/s cpu {base_cpu:4.2f} -> {base_rate / max(base_cpu, 1e-9):6.0f}/core-s"
            )
        print(f"\ndetection-to-rule at {len(addrs)} backends x 1 s, fall 3 (bound: interval + 200 ms = 1200 ms)")
        watcher = ChainWatcher(lab)
        processes.append(watcher)
        bound = 1.2
        for timeout in (0.1, 0.5):
            set_check(1.0, timeout)
            refused = detection_trials(lab, watcher, args.trials, "reject with tcp reset")
            print(f"  timeout {timeout:.1f} s: backend refuses (TCP reset)   {summary(refused, bound)}")
            silent = detection_trials(lab, watcher, args.trials, "drop")
            silent_bound = 1.0 + timeout + 0.1  # interval + timeout + 100 ms: 1200 ms at 0.1 s
            print(f"  timeout {timeout:.1f} s: backend silent (blackhole)    {summary(silent, silent_bound)}")
        write_to_rule = write_to_rule_trials(watcher, args.trials)
        print(f"  baseline: the operator disables it            {summary(write_to_rule)}")
        print("  (a silent backend is out one timeout after its first unanswered probe: its bound is")
        print("   interval + timeout + 100 ms; a LAN backend answers a connect in well under 1 ms)")
        print(f"\nhealth at the end: {health_counts()}")
    finally:
        for proc in reversed(processes):
            if isinstance(proc, subprocess.Popen):
                proc.kill()
                proc.wait()
            else:
                proc.stop()
        lab.destroy()
        redis.stop()


if __name__ == "__main__":
    main()
