"""What the metrics collector costs at 1,000 farms and 100,000 conntrack entries, and how fast the dashboard loads.

    .venv/bin/python bench/collector.py [--farms 1000] [--entries 100000] [--seconds 30]

As root. Everything runs inside namespaces this script creates (tests/support/lab.py) and
removes at the end, also on failure; its database and Redis live in a temporary
directory. In the same run, side by side:

* baseline: the same sampler in a namespace with one farm and an empty conntrack
  table, and an idle loop that only keeps time;
* loaded: 1,000 UDP farms (3 backends each) and 100,000 real conntrack entries
  (UDP flows sent by the client through the farms: DNAT, SNAT, marks);
* busy: the same, with a packet through every farm between two samples, so every
  farm has non-zero rates and a series entry to write.

CPU is thread CPU time (user + system: the kernel's work for our netlink dumps
counts). "% of one core" = (sample + write cost) / interval + census cost /
census interval, the census interval being what the sampler picks for its budget.
A real loop at the production interval then checks that figure with the clock.

The dashboard: server time of the overview page and the summary API (Django test
client, in process) and the browser's load time (Debian chromium via Playwright,
against ``manage.py runserver``), with 1,000 farms in the database.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

INTERVAL = 2.0
VIP_BASE = (198, 18, 64)  # 198.18.64.0/22: 1,000 VIPs, routed to the LB by the client's default route
UDP_PORT = 5000


def vip(i: int) -> str:
    return f"198.18.{VIP_BASE[2] + i // 250}.{1 + i % 250}"


def setup_django(var_dir: Path, redis_url: str) -> None:
    os.environ["LBWEB_VAR_DIR"] = str(var_dir)
    os.environ["REDIS_URL"] = redis_url
    os.environ["DJANGO_SETTINGS_MODULE"] = "lbweb.settings"
    os.environ["LBWEB_MANAGE_SYSCTL"] = "0"
    os.environ["LBWEB_APPLY_COALESCE_SECONDS"] = "0"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def create_farms(count: int) -> None:
    """Rows written in bulk (a benchmark fixture, not the service path)."""
    from farms.models import Backend, ConfigGeneration, Farm
    from tests.support.lab import backend4

    Farm.objects.bulk_create(
        [
            Farm(name=f"f{i:04d}", vip=vip(i), protocol="udp", ports=str(UDP_PORT), mode="snat", config_generation=1)
            for i in range(count)
        ],
        batch_size=500,
    )
    backends = [Backend(farm=f, address=backend4(b)) for f in Farm.objects.all() for b in ("b1", "b2", "b3")]
    Backend.objects.bulk_create(backends, batch_size=500)
    ConfigGeneration.bump()


def fill_conntrack(lab, farms: int, entries: int) -> int:
    """Real UDP flows from the client: one per (source port, farm) until ``entries`` flows."""
    from tests.support.lab import CLIENT4, run_in_netns

    ports = -(-entries // farms)

    def send() -> int:
        sent = 0
        sockets = []
        try:
            for p in range(ports):
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                s.bind((CLIENT4, 20000 + p))
                sockets.append(s)
            for i in range(farms):
                for s in sockets:
                    if sent >= entries:
                        return sent
                    s.sendto(b"x", (vip(i), UDP_PORT))
                    sent += 1
        finally:
            for s in sockets:
                s.close()
        return sent

    return run_in_netns(lab.client, send)


def trickle(lab, farms: int) -> None:
    """One packet through every farm (from one socket: new flows only the first time)."""
    from tests.support.lab import CLIENT4, run_in_netns

    def send() -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind((CLIENT4, 19999))
            for i in range(farms):
                s.sendto(b"x", (vip(i), UDP_PORT))

    run_in_netns(lab.client, send)


def measure_sampler(lab_ns: str, store, samples: int, between=None) -> dict:
    """CPU of ``samples`` samples (after one warm-up) in namespace ``lab_ns``, census and writes apart."""
    from collector.sampler import Sampler
    from monitoring.farm_index import load_index
    from tests.support.lab import run_in_netns

    def run() -> dict:
        sampler = Sampler(census_budget=0.015, min_census_interval=INTERVAL)
        index = load_index()
        sampler.sample(index)  # warm-up: first reading, first census
        fast, writes, censuses, census_interval = [], [], [], None
        for _ in range(samples):
            if between:
                between()
            sampler.next_census = float("inf")  # time the sample without a census ...
            started = time.thread_time()
            sample = sampler.sample(index)
            fast.append(time.thread_time() - started)
            started = time.thread_time()
            store.write(sample)
            writes.append(time.thread_time() - started)
        for _ in range(3):  # ... and censuses on their own
            sampler.next_census = 0.0
            sample = sampler.sample(index)
            censuses.append(sample.system["census"]["cost_ms"] / 1000)
            census_interval = sampler.census_interval
        sampler.close()
        return {
            "sample": statistics.median(fast),
            "write": statistics.median(writes),
            "census": statistics.median(censuses),
            "census_interval": census_interval,
            "census_entries": sample.system["census"]["entries"],
            "farms": len(index.farms),
        }

    return run_in_netns(lab_ns, run)


def core_share(m: dict) -> float:
    return (m["sample"] + m["write"]) / INTERVAL + m["census"] / m["census_interval"]


def real_loop(lab_ns: str, store, seconds: float) -> tuple[float, int, int]:
    """The collector's own loop at the production interval: thread CPU / wall time."""
    from collector.sampler import Sampler
    from monitoring.farm_index import load_index
    from tests.support.lab import run_in_netns

    def run() -> tuple[float, int, int]:
        sampler = Sampler(census_budget=0.015, min_census_interval=INTERVAL)
        index = load_index()
        sampler.sample(index)
        samples = censuses = 0
        cpu, wall, tick = time.thread_time(), time.monotonic(), time.monotonic()
        while time.monotonic() - wall < seconds:
            sample = sampler.sample(index)
            store.write(sample)
            samples, censuses = samples + 1, censuses + sample.census
            tick += INTERVAL
            time.sleep(max(tick - time.monotonic(), 0))
        share = (time.thread_time() - cpu) / (time.monotonic() - wall)
        sampler.close()
        return share, samples, censuses

    return run_in_netns(lab_ns, run)


def idle_loop(seconds: float) -> float:
    cpu, wall, tick = time.thread_time(), time.monotonic(), time.monotonic()
    while time.monotonic() - wall < seconds:
        tick += INTERVAL
        time.sleep(max(tick - time.monotonic(), 0))
    return (time.thread_time() - cpu) / (time.monotonic() - wall)


def apply_in(ns: str) -> None:
    from dataplane import applier as dataplane
    from tests.support.lab import run_in_netns

    run = run_in_netns(ns, lambda: dataplane.Applier().reconcile(reason="bench"))
    assert run is None or run.ok, run.error


def measure_pages(var_dir: Path, redis_url: str, farm_id: int) -> dict:
    from django.contrib.auth import get_user_model
    from django.test import Client
    from django.test.utils import setup_test_environment

    from farms.models import Farm

    setup_test_environment()
    user = get_user_model().objects.create_superuser("bench", "", "bench-password")
    client = Client()
    client.force_login(user)

    def server_ms(path: str) -> float:
        times = []
        for _ in range(7):
            started = time.perf_counter()
            response = client.get(path)
            times.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200, (path, response.status_code)
        return statistics.median(times)

    result = {
        "server_overview_ms": server_ms("/monitoring/"),
        "server_summary_ms": server_ms("/api/v1/metrics/summary/"),
        "server_system_series_ms": server_ms("/api/v1/metrics/system/?window=1h"),
        "server_farm_series_ms": server_ms(f"/api/v1/metrics/farms/{farm_id}/?window=1h"),
        "server_farm_list_ms": server_ms("/"),
    }
    result.update(browser_load(var_dir, redis_url, farm_id, Farm.objects.count()))
    return result


def browser_load(var_dir: Path, redis_url: str, farm_id: int, farms: int) -> dict:
    """Load times in chromium against gunicorn + whitenoise, as deploy/run.sh serves the pages."""
    from django.core.management import call_command
    from playwright.sync_api import sync_playwright

    call_command("collectstatic", interactive=False, verbosity=0)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, LBWEB_VAR_DIR=str(var_dir), REDIS_URL=redis_url)
    server = subprocess.Popen(
        [str(ROOT / ".venv" / "bin" / "gunicorn"), "lbweb.wsgi", "--bind", f"127.0.0.1:{port}", "--workers", "2"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        args = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]
        args += ["--disable-sync", "--no-first-run"]
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=args)
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.goto(f"{base}/admin/login/?next=/")
            page.fill("#id_username", "bench")
            page.fill("#id_password", "bench-password")
            page.click("input[type=submit]")
            page.wait_for_url(f"{base}/")

            def load(path: str, ready: str) -> tuple[float, float]:
                loads, readies = [], []
                for _ in range(5):
                    started = time.perf_counter()
                    page.goto(base + path, wait_until="load")
                    loads.append((time.perf_counter() - started) * 1000)
                    page.wait_for_function(ready, timeout=30_000)
                    readies.append((time.perf_counter() - started) * 1000)
                return statistics.median(loads), statistics.median(readies)

            drawn = "() => { const c = Chart.getChart('chart-throughput'); return c && c.data.datasets.length > 0; }"
            shown = min(50, farms)  # the busiest 50 are shown
            rows = f"() => document.querySelectorAll('#farm-rows tr a').length >= {shown}"
            result = {}
            result["browser_overview_load_ms"], result["browser_overview_table_ms"] = load("/monitoring/", rows)
            result["browser_farm_load_ms"], result["browser_farm_charts_ms"] = load(
                f"/monitoring/farms/{farm_id}/", drawn
            )
            result["browser_login_page_load_ms"] = load("/admin/login/", "() => true")[0]  # baseline: a plain page
            browser.close()
        return result
    finally:
        server.terminate()
        server.wait(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--farms", type=int, default=1000)
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=120, help="length of the real-time loop check")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root: the benchmark builds network namespaces")

    from tests.support.lab import Lab
    from tests.support.stack import RedisServer

    tmp = Path(tempfile.mkdtemp(prefix="lbweb-bench-"))
    redis_server = RedisServer(tmp / "redis").start()
    lab = small = None
    try:
        setup_django(tmp / "var", redis_server.url)
        from farms.models import Farm
        from monitoring.store import MetricStore, client

        store = MetricStore(client(redis_server.url), INTERVAL)
        lab = Lab("lbbench").build()
        small = Lab("lbbsm")
        subprocess.run(["ip", "netns", "add", small.lb], check=True)
        subprocess.run(["ip", "netns", "exec", small.lb, "ip", "link", "set", "lo", "up"], check=True)

        # Baseline: one farm, empty conntrack table.
        create_farms(1)
        apply_in(small.lb)
        baseline = measure_sampler(small.lb, store, args.samples)

        # Loaded: 1,000 farms, 100,000 real flows.
        Farm.objects.all().delete()
        create_farms(args.farms)
        started = time.monotonic()
        apply_in(lab.lb)
        apply_seconds = time.monotonic() - started
        for key in ("udp_timeout=600", "udp_timeout_stream=600"):
            lab.ns(lab.lb, "sysctl", "-qw", f"net.netfilter.nf_conntrack_{key}")
        sent = fill_conntrack(lab, args.farms, args.entries)
        time.sleep(1)
        count = int(lab.ns(lab.lb, "cat", "/proc/sys/net/netfilter/nf_conntrack_count").stdout)
        loaded = measure_sampler(lab.lb, store, args.samples)
        busy = measure_sampler(lab.lb, store, args.samples, between=lambda: trickle(lab, args.farms))
        idle_share = idle_loop(min(args.seconds, 10))
        real_share, real_samples, real_censuses = real_loop(lab.lb, store, args.seconds) if args.seconds else (0, 0, 0)
        farm_id = Farm.objects.order_by("id").values_list("id", flat=True).first()
        pages = measure_pages(tmp / "var", redis_server.url, farm_id)
        memory = redis_server_memory(store)
    finally:
        if lab:
            lab.destroy()
        if small:
            subprocess.run(["ip", "netns", "del", small.lb], check=False)
        redis_server.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"# collector cost, {args.farms} farms, {count:,} conntrack entries ({sent:,} flows sent)")
    print(f"full apply of {args.farms} farms: {apply_seconds:.1f} s")
    rows = [("baseline (1 farm, empty table)", baseline), ("loaded", loaded), ("loaded, every farm busy", busy)]
    print(f"{'case':34} {'sample ms':>9} {'write ms':>9} {'census ms':>9} {'census every':>12} {'% of a core':>11}")
    for name, m in rows:
        print(
            f"{name:34} {m['sample'] * 1000:9.1f} {m['write'] * 1000:9.1f} {m['census'] * 1000:9.1f}"
            f" {m['census_interval']:10.1f} s {100 * core_share(m):10.2f}%"
        )
    ratio = (loaded["sample"] + loaded["write"]) / (baseline["sample"] + baseline["write"])
    print(f"ratio loaded/baseline per sample (sample+write): {ratio:.1f}x")

    print(
        f"real {args.seconds:.0f} s loop at {INTERVAL:.0f} s, loaded: {100 * real_share:.2f}% of a core"
        f" ({real_samples} samples, {real_censuses} censuses);"
        f" idle timing loop: {100 * idle_share:.3f}%"
    )
    print(f"redis memory after the run: {memory}")
    print("# dashboard with", args.farms, "farms (median of 5-7)")
    for key, value in pages.items():
        print(f"{key:32} {value:8.1f} ms")


def redis_server_memory(store) -> str:
    return store.redis.info("memory").get("used_memory_human", "?")


if __name__ == "__main__":
    main()
