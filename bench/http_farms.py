"""HTTP and HTTPS farms: lbweb's HAProxy against the backends direct and against nginx as a reverse proxy, side by
side in one run; then the seed's capacity experiment.

    .venv/bin/python bench/http_farms.py [--duration S] [--rounds N] [--connections C] [--capacity N] [--out FILE]

As root. It builds the namespace lab of tests/support/lab.py with nginx on the three backends (bench/servers.py), starts
HAProxy in the LB namespace with the configuration lbweb's generator writes (compiler/haproxy/: round robin over the
three, connections to backends reused) and, beside it on another VIP, nginx as a reverse proxy over the same
backends (upstream keep-alive), both with the same self-signed certificate for HTTPS. wrk (one process, two
threads, in the client namespace) loads each case with keep-alive and with ``Connection: close``:

| case | path |
|---|---|
| direct | the client straight to one backend (HTTP; the LB namespace only routes) |
| haproxy | lbweb's HTTP / HTTPS farm |
| nginx | nginx reverse proxy, HTTP / HTTPS |

Figures: req/s, latency p50/p99 (wrk), CPU of the LB namespace's processes per request (user + system ticks of
every process there), and the HTTPS/HTTP ratio of req/s beside SKUDONET's published 0.92 (93k / 101k req/s,
the seed "skudonet-sna7108-benchmark"). Cases rotate from round to round; medians over the rounds.

The capacity experiment (the seed "l7-proxy-deterministic-sessions"): bench/capacity_server.py on one backend, a
service that holds ``--capacity`` N requests at WORK_MS each and degrades beyond (a model, see that file), behind an
HTTP farm; wrk with 4 x N keep-alive connections, once with the backend's capacity declared (HAProxy maxconn N, the
rest queue at the LB) and once without. Figures: req/s, p99, errors, the most requests the service held at once and
the connections it accepted per request (connections reused, no connect() per request).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if sys.path[0] == str(ROOT / "bench"):
    sys.path[0] = str(ROOT)  # run as a script: this file's folder first on the path would hide the stdlib's http
else:
    sys.path.insert(0, str(ROOT))

from bench import measure, servers  # noqa: E402
from compiler.haproxy.spec import CertificateSpec, EngineSpec, FarmSpec, ServerSpec, ServiceSpec  # noqa: E402
from l7.certificates import self_signed  # noqa: E402
from tests.support.l7_lab import HAProxyLab  # noqa: E402
from tests.support.lab import Lab, backend4  # noqa: E402

HAPROXY_VIP, NGINX_VIP = "198.18.100.1", "198.18.100.2"
SKUDONET_HTTPS_HTTP = 93 / 101  # SKUDONET SNA7108 HTTP profile: 93k HTTPS / 101k HTTP req/s
WORK_MS = 20.0
CAPACITY_PORT = 9000

NGINX_PROXY = (
    servers.NGINX_HEAD.replace("{workers}", "2")
    + """\
    upstream backends {{
        server {b1}:80;
        server {b2}:80;
        server {b3}:80;
        keepalive 64;
    }}
    server {{
        listen {vip}:80 backlog=8192;
        listen {vip}:443 ssl backlog=8192;
        ssl_certificate {dir}/cert.pem;
        ssl_certificate_key {dir}/key.pem;
        location / {{
            proxy_pass http://backends;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }}
    }}
}}
"""
)


def wrk(lab: Lab, url: str, duration: float, connections: int, close: bool) -> dict:
    command = ["ip", "netns", "exec", lab.client, "wrk", "-t2", f"-c{connections}", f"-d{duration:g}s"]
    command += ["--timeout=5s", "-s", str(ROOT / "bench" / "wrk_report.lua")]
    if close:
        command += ["-H", "Connection: close"]
    pids = measure.netns_pids(lab.lb)
    before = measure.process_ticks(pids)
    out = subprocess.run([*command, url], capture_output=True, text=True, timeout=duration + 60)
    after = measure.process_ticks(pids)
    report = measure.merge([measure.wrk_report(out.stdout.splitlines())])
    ticks = sum(after[p][0] - before[p][0] + after[p][1] - before[p][1] for p in after if p in before)
    requests = max(report["requests"], 1)
    seconds = report["duration_us"] / 1e6
    return {
        "req_s": report["requests"] / seconds,
        "p50_ms": report["latency_us"]["p50"] / 1000,
        "p99_ms": report["latency_us"]["p99"] / 1000,
        "errors": sum(report["errors"].values()),
        "lb_cpu_us_per_req": ticks * 1e6 / measure.TICK / requests,
        "requests": report["requests"],
    }


def engine_spec(cert_pem: str, capacity_service: ServiceSpec | None = None) -> EngineSpec:
    servers_ = tuple(ServerSpec(i, backend4(name), 80) for i, name in enumerate(("b1", "b2", "b3"), 1))
    services = (ServiceSpec(1, "all", servers=servers_),)
    farms = [
        FarmSpec(1, "http", "http", HAPROXY_VIP, (80,), services=services),
        FarmSpec(
            2,
            "https",
            "https",
            HAPROXY_VIP,
            (443,),
            services=(ServiceSpec(2, "all", servers=servers_),),
            certificates=(CertificateSpec(1, "bench", cert_pem),),
        ),
    ]
    if capacity_service is not None:
        farms.append(FarmSpec(3, "capacity", "http", HAPROXY_VIP, (8000,), services=(capacity_service,)))
    return EngineSpec(tuple(farms))


def settings_of(args) -> dict:
    return {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}


def capacity_stats(lab: Lab, path: str = "stats") -> dict:
    out = lab.ns(lab.client, "curl", "-sf", f"http://{backend4('b1')}:{CAPACITY_PORT}/{path}").stdout
    return json.loads(out)


def capacity_run(lab: Lab, duration: float, clients: int) -> dict:
    """One run of the capacity experiment: wrk's figures, the most requests the service held and its connections.

    The high-water mark is read while wrk still runs, not after: when wrk exits it closes its connections one by
    one, HAProxy frees the slot of a request whose client has gone (the service, which cannot tell, still holds
    it) and sends a queued request of a client still open, so the service briefly holds one more than the declared
    capacity, an artefact of the load generator stopping. Before the run, the service drains the last run's requests
    and starts its high-water mark again.
    """
    deadline = time.monotonic() + 30
    while capacity_stats(lab)["held"] and time.monotonic() < deadline:
        time.sleep(0.1)
    before = capacity_stats(lab, "reset")
    result: dict = {}
    load = threading.Thread(target=lambda: result.update(wrk(lab, f"http://{HAPROXY_VIP}:8000/", duration, clients,
                                                             close=False)))  # fmt: skip
    load.start()
    time.sleep(duration * 0.8)
    during = capacity_stats(lab)
    load.join()
    after = capacity_stats(lab)
    served = max(after["requests"] - before["requests"], 1)
    result["service_max_held"] = during["max_held"]
    result["backend_connections_per_request"] = (after["connections"] - before["connections"]) / served
    return result


def run(args) -> dict:
    workdir = Path(tempfile.mkdtemp(prefix="lbweb-bench-http-"))
    lab = Lab(f"lbh{os.getpid() % 10000}", backend_server=servers.nginx_starter(workdir)).build()
    haproxy = nginx = capacity = None
    try:
        cert, key = self_signed(["bench.lbweb.test"])
        haproxy = HAProxyLab(lab, workdir / "haproxy", vips=(HAPROXY_VIP, NGINX_VIP)).start()
        haproxy.engine.apply(engine_spec(cert + key))
        proxy_dir = workdir / "nginx-proxy"
        proxy_dir.mkdir()
        (proxy_dir / "cert.pem").write_text(cert)
        (proxy_dir / "key.pem").write_text(key)
        conf = NGINX_PROXY.format(dir=proxy_dir, vip=NGINX_VIP, b1=backend4("b1"), b2=backend4("b2"), b3=backend4("b3"))
        (proxy_dir / "nginx.conf").write_text(conf)
        nginx = servers._popen(lab.lb, ["nginx", "-p", str(proxy_dir), "-c", str(proxy_dir / "nginx.conf")],
                               proxy_dir / "stdout.log")  # fmt: skip
        time.sleep(1)
        cases = {
            "direct http": f"http://{backend4('b1')}/",
            "haproxy http": f"http://{HAPROXY_VIP}/",
            "haproxy https": f"https://{HAPROXY_VIP}/",
            "nginx http": f"http://{NGINX_VIP}/",
            "nginx https": f"https://{NGINX_VIP}/",
        }
        results: dict[str, list[dict]] = {}
        wanted = [c.strip() for c in args.cases.split(",")] if args.cases else list(cases)
        kinds = {"keep-alive": False, "close": True}
        names = [(name, kinds[kind]) for name in cases if name in wanted for kind in args.conns.split(",")]
        for round_ in range(args.rounds):
            shift = round_ % len(names)
            for name, close in names[shift:] + names[:shift]:
                key_ = f"{name} {'close' if close else 'keep-alive'}"
                results.setdefault(key_, []).append(wrk(lab, cases[name], args.duration, args.connections, close))
        table = {k: {m: statistics.median(r[m] for r in runs) for m in runs[0]} for k, runs in results.items()}
        ratios = {}
        for engine in ("haproxy", "nginx"):
            for kind in ("keep-alive", "close"):
                https, http = table.get(f"{engine} https {kind}"), table.get(f"{engine} http {kind}")
                if https and http:
                    ratios[f"{engine} {kind}"] = https["req_s"] / http["req_s"]
        if args.no_capacity:
            return {"settings": settings_of(args), "cases": table, "https_http_ratio": ratios,
                    "skudonet_https_http_ratio": SKUDONET_HTTPS_HTTP}  # fmt: skip

        # The capacity experiment.
        n = args.capacity
        capacity = subprocess.Popen(
            ["ip", "netns", "exec", lab.backends["b1"], sys.executable, str(ROOT / "bench" / "capacity_server.py"),
             str(CAPACITY_PORT), str(n), str(WORK_MS)],
        )  # fmt: skip
        time.sleep(1)
        experiment = {}
        for declared in (False, True):
            server = ServerSpec(100, backend4("b1"), CAPACITY_PORT, capacity=n if declared else None)
            haproxy.engine.apply(
                engine_spec(cert + key, ServiceSpec(3, "capacity", queue_timeout=30, servers=(server,)))
            )
            experiment["declared" if declared else "not declared"] = capacity_run(lab, args.duration, 4 * n)
        return {
            "settings": settings_of(args),
            "cases": table,
            "https_http_ratio": ratios,
            "skudonet_https_http_ratio": SKUDONET_HTTPS_HTTP,
            "capacity": {"capacity": n, "clients": 4 * n, "work_ms": WORK_MS, **experiment},
        }
    finally:
        for proc in (capacity, nginx):
            servers.stop(proc)
        if haproxy:
            haproxy.stop()
        lab.destroy()
        subprocess.run(["rm", "-rf", str(workdir)], check=False)


def report(result: dict) -> str:
    lines = ["case                          req/s    p50 ms   p99 ms  errors  LB CPU us/req"]
    for name, f in result["cases"].items():
        lines.append(
            f"{name:28} {f['req_s']:8.0f} {f['p50_ms']:8.2f} {f['p99_ms']:8.2f} {f['errors']:7.0f} "
            f"{f['lb_cpu_us_per_req']:10.1f}"
        )
    lines.append("")
    for name, ratio in result["https_http_ratio"].items():
        lines.append(f"HTTPS/HTTP req/s, {name}: {ratio:.2f} (SKUDONET: {result['skudonet_https_http_ratio']:.2f})")
    if "capacity" not in result:
        return "\n".join(lines)
    cap = result["capacity"]
    lines += ["", f"capacity experiment: capacity {cap['capacity']}, {cap['clients']} clients, {cap['work_ms']:g} ms"]
    for name in ("not declared", "declared"):
        f = cap[name]
        lines.append(
            f"  {name:13} {f['req_s']:8.0f} req/s  p99 {f['p99_ms']:8.1f} ms  errors {f['errors']:.0f}  "
            f"service held at most {f['service_max_held']}  backend connections/request "
            f"{f['backend_connections_per_request']:.4f}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=10, help="seconds per case (default 10)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds over every case (default 2)")
    parser.add_argument("--connections", type=int, default=64, help="wrk connections (default 64)")
    parser.add_argument("--capacity", type=int, default=8, help="the service's capacity N (default 8)")
    parser.add_argument("--cases", default="", help="only these cases, e.g. 'haproxy https,nginx https' (default all)")
    parser.add_argument("--conns", default="keep-alive,close", help="keep-alive, close or both (default both)")
    parser.add_argument("--no-capacity", action="store_true", help="skip the capacity experiment")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "http.json")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/http_farms.py builds network namespaces: run it as root")
    result = run(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(report(result))


if __name__ == "__main__":
    main()
