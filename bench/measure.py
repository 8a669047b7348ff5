"""One load run of the benchmark, and what the kernel and the processes spent on it.

CPU method (also printed with the results): the kernel here counts CPU time by ticks, so a tick
that lands while a CPU serves a softirq is counted as ``softirq`` in /proc/stat whichever
namespace the packet is in; forwarding, NAT and conntrack in the LB namespace happen in softirq,
next to the client's and the backends' own TCP receive work. No counter splits softirq time by
namespace, so the bench reports:

* ``softirq_us``: the machine's softirq time per request, minus what the machine spent in softirq
  while idle just before (other users of the machine); the same client and backends run in every
  case, so the difference to the baseline is what the LB's packet path adds;
* ``lb_user_us``, ``lb_system_us``: user and system time of every process in the LB namespace
  (HAProxy; lbweb has no process in the packet path, only its idle worker and web server), per
  request, from /proc/PID/stat;
* ``lb_us`` = softirq_us + lb_user_us + lb_system_us: the LB's CPU per request. A softirq that
  runs inside one of HAProxy's system calls is counted twice (softirq and HAProxy's system time),
  so for HAProxy this is an upper bound; softirq_us + lb_user_us is its lower bound;
* ``machine_us``: all busy CPU of the machine per request (idle-corrected), the whole cost of a
  request: client, LB and backends together;
* ``lb_packets``: packets the LB namespace's interfaces received per request (with DSR only the
  client's direction passes the LB; its netdev-ingress rewrite is softirq work like the rest).
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.support.lab import Lab

TICK = os.sysconf("SC_CLK_TCK")
STAT_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
BUSY = ("user", "nice", "system", "irq", "softirq")


def machine_ticks() -> dict[str, int]:
    """The ``cpu`` line of /proc/stat, all CPUs together, in clock ticks."""
    with open("/proc/stat") as stat:
        values = stat.readline().split()[1:]
    return {name: int(v) for name, v in zip(STAT_FIELDS, values, strict=False)}


def busy(ticks: dict[str, int]) -> int:
    return sum(ticks[name] for name in BUSY)


def idle_rates(seconds: float) -> dict[str, float]:
    """Ticks per second the machine spends in each category while this bench sends nothing."""
    before, started = machine_ticks(), time.monotonic()
    time.sleep(seconds)
    after, elapsed = machine_ticks(), time.monotonic() - started
    rates = {name: (after[name] - before[name]) / elapsed for name in STAT_FIELDS}
    rates["busy"] = (busy(after) - busy(before)) / elapsed
    return rates


def netns_pids(netns: str) -> list[int]:
    result = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True)
    return [int(pid) for pid in result.stdout.split()]


def process_ticks(pids: list[int]) -> dict[int, tuple[int, int]]:
    """(utime, stime) in clock ticks of each process still alive."""
    ticks = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks[pid] = (int(fields[11]), int(fields[12]))  # fields 14 and 15 of proc(5)
    return ticks


def tcp_counters(lab: Lab, netns: str) -> dict[str, int]:
    """TcpExt counters and the TIME-WAIT socket count of one namespace."""
    text = lab.ns(netns, "cat", "/proc/net/netstat", "/proc/net/sockstat").stdout.splitlines()
    counters: dict[str, int] = {}
    for names, values in zip(text, text[1:], strict=False):
        if names.startswith("TcpExt:") and values.startswith("TcpExt:"):
            counters.update(zip(names.split()[1:], map(int, values.split()[1:]), strict=True))
    for line in text:
        if line.startswith("TCP:"):
            parts = line.split()
            counters["tw"] = int(parts[parts.index("tw") + 1])
    return counters


@dataclass
class Client:
    """One simulated client: a load generator under its own uid, which policy routing in the client
    namespace maps to its own source address (see :func:`add_clients`).

    ``target``: the address it sends to. ``device``/``gateway``: its interface and next hop (the
    routed link by default; the DSR segment's otherwise); ``on_link``: a prefix it reaches directly
    on ``device`` (the backends' addresses on the segment)."""

    uid: int
    address: str
    target: str
    device: str = "eth0"
    gateway: str = ""  # "" = the gateway given to add_clients
    on_link: str = ""


def add_clients(lab: Lab, clients: list[Client], gateway: str, table_base: int = 1000) -> None:
    """Give each client its address on its interface and routes that use it as source."""
    for n, client in enumerate(clients):
        table = str(table_base + n)
        src = ["src", client.address, "table", table]
        lab.ns(lab.client, "ip", "addr", "add", f"{client.address}/24", "dev", client.device)
        via = client.gateway or gateway
        lab.ns(lab.client, "ip", "route", "add", "default", "via", via, "dev", client.device, *src)
        if client.on_link:
            lab.ns(lab.client, "ip", "route", "add", client.on_link, "dev", client.device, *src)
        lab.ns(lab.client, "ip", "rule", "add", "uidrange", f"{client.uid}-{client.uid}", "lookup", table)


@dataclass
class Load:
    """A run: every client's load generator at once, the concurrency shared out among them.

    ``tool`` ``wrk`` (HTTP; ``script`` is the Lua report script) or ``dnsperf`` (DNS over UDP;
    ``queries`` is its query file). ``connections``: wrk's connections, or dnsperf's queries in
    flight (one socket each), in all."""

    clients: list[Client]
    tool: str = "wrk"
    script: Path | None = None
    queries: Path | None = None
    close: bool = False
    duration: float = 30
    connections: int = 48
    timeout: float = 5


def _as_client(lab: Lab, client: Client) -> list[str]:
    uid = str(client.uid)
    return ["ip", "netns", "exec", lab.client, "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]


def _wrk_command(lab: Lab, load: Load, client: Client) -> list[str]:
    command = [*_as_client(lab, client), "wrk", "-t1", f"-c{load.connections // len(load.clients)}"]
    command += [f"-d{load.duration:g}s", f"--timeout={load.timeout:g}s", "-s", str(load.script)]
    if load.close:
        command += ["-H", "Connection: close"]
    return [*command, f"http://{client.target}/"]


def _dnsperf_command(lab: Lab, load: Load, client: Client) -> list[str]:
    """dnsperf keeps ``n`` queries in flight from ``n`` sockets; ``-v`` prints each answer's latency."""
    n = str(load.connections // len(load.clients))
    command = [*_as_client(lab, client), "dnsperf", "-s", client.target, "-a", client.address]
    command += ["-d", str(load.queries), "-l", f"{load.duration:g}", "-c", n, "-q", n]
    return [*command, "-t", f"{load.timeout:g}", "-v"]


def wrk_report(out) -> dict:
    """The JSON line of bench/wrk_report.lua."""
    lines = [line for line in out if line.startswith("JSON ")]
    if not lines:
        raise ValueError("no JSON line")
    return json.loads(lines[-1][5:])


def dnsperf_report(out) -> dict:
    """dnsperf -v's output as wrk_report.lua's figures: answered queries are the requests, latencies from
    its per-answer lines (microseconds), its statistics for what it sent, lost and how long it ran."""
    latencies: collections.Counter[int] = collections.Counter()
    rcodes: collections.Counter[str] = collections.Counter()
    stats: dict[str, str] = {}
    for line in out:
        if line.startswith("> "):
            parts = line.split()
            if parts[1] in ("T", "I"):  # timed out, interrupted: counted by dnsperf's statistics
                continue
            rcodes[parts[1]] += 1
            latencies[round(float(parts[-1]) * 1e6)] += 1
        elif line.startswith("  ") and ":" in line:
            key, _, value = line.strip().partition(":")
            stats[key] = value.split()[0] if value.split() else ""
    if "Queries sent" not in stats:
        raise ValueError("no statistics")
    answered = sum(latencies.values())
    ordered = sorted(latencies.items())
    quantiles, running, value, position = [], 0, 0, iter(ordered)
    for i in range(1, 1001):  # the latency at 0.1 %, 0.2 %, ... 100 % of the answers, as wrk_report.lua gives
        while running < answered * i / 1000:
            value, count = next(position)
            running += count
        quantiles.append(value)
    sent, lost = int(stats["Queries sent"]), int(stats["Queries lost"])
    return {
        "requests": answered,
        "duration_us": round(float(stats["Run time (s)"]) * 1e6),
        "bytes": 0,
        "errors": {"lost": lost, "rcode": answered - rcodes.get("NOERROR", 0)},
        "sent": sent,
        "completed": int(stats["Queries completed"]),
        "max_us": ordered[-1][0] if ordered else 0,
        "mean_us": sum(v * c for v, c in ordered) / max(answered, 1),
        "quantiles": quantiles,
    }


TOOLS = {"wrk": (_wrk_command, wrk_report), "dnsperf": (_dnsperf_command, dnsperf_report)}


def lb_rx_packets(lab: Lab) -> int:
    """Packets the LB namespace's interfaces have received (loopback and the bridge itself left out)."""
    text = lab.ns(lab.lb, "cat", "/proc/net/dev").stdout.splitlines()[2:]
    total = 0
    for line in text:
        name, _, fields = line.partition(":")
        if name.strip() not in ("lo", "br0"):
            total += int(fields.split()[1])
    return total


def run_load(lab: Lab, load: Load) -> dict:
    """Run every client's load generator in the client namespace; returns their figures and the CPU the run cost."""
    command_of, parse = TOOLS[load.tool]
    lb_pids = netns_pids(lab.lb)
    backends = list(lab.backends.values())
    tcp_before = {ns: tcp_counters(lab, ns) for ns in (lab.client, lab.lb, *backends)}
    commands = [command_of(lab, load, client) for client in load.clients]
    client_cpu = {"user": 0.0, "system": 0.0}
    reports = []
    with contextlib.ExitStack() as stack:
        outputs = [stack.enter_context(tempfile.TemporaryFile("w+")) for _ in commands]
        rx_before = lb_rx_packets(lab)
        procs_before, ticks_before = process_ticks(lb_pids), machine_ticks()
        started = time.monotonic()
        procs = [
            subprocess.Popen(c, stdout=o, stderr=subprocess.STDOUT) for c, o in zip(commands, outputs, strict=True)
        ]
        for proc in procs:
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            client_cpu["user"] += usage.ru_utime
            client_cpu["system"] += usage.ru_stime
        elapsed = time.monotonic() - started
        ticks_after, procs_after = machine_ticks(), process_ticks(lb_pids)
        rx_after = lb_rx_packets(lab)
        for command, proc, out in zip(commands, procs, outputs, strict=True):
            out.seek(0)
            try:
                if proc.returncode != 0:
                    raise ValueError(f"exit status {proc.returncode}")
                reports.append(parse(out))
            except (ValueError, KeyError) as exc:
                out.seek(0)
                tail = out.read()[-2000:]
                raise RuntimeError(f"{load.tool} failed ({exc}): {' '.join(command)}\n{tail}") from None
    tcp_after = {ns: tcp_counters(lab, ns) for ns in (lab.client, lab.lb, *backends)}
    lb_user = sum(procs_after[p][0] - procs_before[p][0] for p in procs_after if p in procs_before)
    lb_sys = sum(procs_after[p][1] - procs_before[p][1] for p in procs_after if p in procs_before)

    def delta(ns: str, name: str) -> int:
        return tcp_after[ns].get(name, 0) - tcp_before[ns].get(name, 0)

    return {
        "tool": load.tool,
        "load": merge(reports),
        "elapsed_s": elapsed,
        "ticks": {name: ticks_after[name] - ticks_before[name] for name in STAT_FIELDS},
        "busy_ticks": busy(ticks_after) - busy(ticks_before),
        "lb_process_ticks": {"user": lb_user, "system": lb_sys, "pids": len(procs_after)},
        "lb_rx_packets": rx_after - rx_before,
        "client_cpu_s": client_cpu,
        "syn_retrans": {"client": delta(lab.client, "TCPSynRetrans"), "lb": delta(lab.lb, "TCPSynRetrans")},
        "client_tw_at_end": tcp_after[lab.client].get("tw", 0),
        "lb_tw_at_end": tcp_after[lab.lb].get("tw", 0),
        "backend_tw_at_start": sum(tcp_before[ns].get("tw", 0) for ns in backends),
        "backend_tw_at_end": sum(tcp_after[ns].get("tw", 0) for ns in backends),
    }


def merge(reports: list[dict]) -> dict:
    """Several load generators as one: requests and errors added, latency percentiles of the pooled
    distribution (each process's 1,000 quantiles weigh its requests / 1,000)."""
    samples = sorted(
        (value, report["requests"] / len(report["quantiles"])) for report in reports for value in report["quantiles"]
    )
    total = sum(weight for _, weight in samples) or 1

    def percentile(p: float) -> float:
        running = 0.0
        for value, weight in samples:
            running += weight
            if running >= total * p / 100:
                return value
        return samples[-1][0] if samples else 0

    errors = {key: sum(r["errors"][key] for r in reports) for key in reports[0]["errors"]}
    return {
        "clients": len(reports),
        "requests": sum(r["requests"] for r in reports),
        "duration_us": max(r["duration_us"] for r in reports),
        "bytes": sum(r["bytes"] for r in reports),
        "errors": errors,
        "requests_per_client": [r["requests"] for r in reports],
        **({"sent": sum(r["sent"] for r in reports)} if "sent" in reports[0] else {}),
        "latency_us": {
            "p50": percentile(50),
            "p90": percentile(90),
            "p99": percentile(99),
            "p999": percentile(99.9),
            "max": max(r["max_us"] for r in reports),
        },
    }


def figures(raw: dict, idle: dict[str, float]) -> dict:
    """The per-run numbers the report uses, from a :func:`run_load` result and the idle rates."""
    load = raw["load"]
    seconds = load["duration_us"] / 1e6
    requests = max(load["requests"], 1)
    per_request_us = 1e6 / TICK / requests

    def corrected(ticks: float, rate: float) -> float:
        return max(ticks - rate * raw["elapsed_s"], 0.0) * per_request_us

    softirq = corrected(raw["ticks"]["softirq"], idle["softirq"])
    lb_user = raw["lb_process_ticks"]["user"] * per_request_us
    lb_system = raw["lb_process_ticks"]["system"] * per_request_us
    lost = load["errors"].get("lost", 0)
    return {
        "req_s": load["requests"] / seconds,
        "requests": load["requests"],
        "p50_ms": load["latency_us"]["p50"] / 1000,
        "p99_ms": load["latency_us"]["p99"] / 1000,
        "max_ms": load["latency_us"]["max"] / 1000,
        "errors": sum(load["errors"].values()) - lost,
        "lost": lost,
        "softirq_us": softirq,
        "lb_user_us": lb_user,
        "lb_system_us": lb_system,
        "lb_us": softirq + lb_user + lb_system,
        "machine_us": corrected(raw["busy_ticks"], idle["busy"]),
        "lb_packets": raw["lb_rx_packets"] / requests,
        "syn_retrans": raw["syn_retrans"]["client"] + raw["syn_retrans"]["lb"],
    }
