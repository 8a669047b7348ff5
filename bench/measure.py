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
  request: client, LB and backends together.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.lab import Lab

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
    """One simulated client: a wrk process under its own uid, which policy routing in the client
    namespace maps to its own source address (see :func:`add_clients`)."""

    uid: int
    address: str
    url: str


def add_clients(lab: Lab, clients: list[Client], gateway: str, table_base: int = 1000) -> None:
    """Give each client its address on the client's interface and a route that uses it as source."""
    for n, client in enumerate(clients):
        table = str(table_base + n)
        lab.ns(lab.client, "ip", "addr", "add", f"{client.address}/24", "dev", "eth0")
        lab.ns(lab.client, "ip", "route", "add", "default", "via", gateway, "src", client.address, "table", table)
        lab.ns(lab.client, "ip", "rule", "add", "uidrange", f"{client.uid}-{client.uid}", "lookup", table)


@dataclass
class Load:
    """A run: every client's wrk process at once, the connections shared out among them."""

    clients: list[Client]
    script: Path
    close: bool = False
    duration: float = 30
    connections: int = 48
    timeout: float = 5


def _wrk_command(lab: Lab, load: Load, client: Client) -> list[str]:
    uid = str(client.uid)
    command = ["ip", "netns", "exec", lab.client, "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
    command += ["wrk", "-t1", f"-c{load.connections // len(load.clients)}", f"-d{load.duration:g}s"]
    command += [f"--timeout={load.timeout:g}s", "-s", str(load.script)]
    if load.close:
        command += ["-H", "Connection: close"]
    return [*command, client.url]


def run_wrk(lab: Lab, load: Load) -> dict:
    """Run every client's wrk in the client namespace; returns their figures and the CPU the run cost."""
    lb_pids = netns_pids(lab.lb)
    backends = list(lab.backends.values())
    tcp_before = {ns: tcp_counters(lab, ns) for ns in (lab.client, lab.lb, *backends)}
    commands = [_wrk_command(lab, load, client) for client in load.clients]
    client_cpu = {"user": 0.0, "system": 0.0}
    with contextlib.ExitStack() as stack:
        outputs = [stack.enter_context(tempfile.TemporaryFile("w+")) for _ in commands]
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
        texts = []
        for out in outputs:
            out.seek(0)
            texts.append(out.read())
    tcp_after = {ns: tcp_counters(lab, ns) for ns in (lab.client, lab.lb, *backends)}
    reports = []
    for command, proc, text in zip(commands, procs, texts, strict=True):
        lines = [line for line in text.splitlines() if line.startswith("JSON ")]
        if proc.returncode != 0 or not lines:
            raise RuntimeError(f"wrk failed ({proc.returncode}): {' '.join(command)}\n{text[-2000:]}")
        reports.append(json.loads(lines[-1][5:]))
    lb_user = sum(procs_after[p][0] - procs_before[p][0] for p in procs_after if p in procs_before)
    lb_sys = sum(procs_after[p][1] - procs_before[p][1] for p in procs_after if p in procs_before)

    def delta(ns: str, name: str) -> int:
        return tcp_after[ns].get(name, 0) - tcp_before[ns].get(name, 0)

    return {
        "wrk": merge(reports),
        "elapsed_s": elapsed,
        "ticks": {name: ticks_after[name] - ticks_before[name] for name in STAT_FIELDS},
        "busy_ticks": busy(ticks_after) - busy(ticks_before),
        "lb_process_ticks": {"user": lb_user, "system": lb_sys, "pids": len(procs_after)},
        "client_cpu_s": client_cpu,
        "syn_retrans": {"client": delta(lab.client, "TCPSynRetrans"), "lb": delta(lab.lb, "TCPSynRetrans")},
        "client_tw_at_end": tcp_after[lab.client].get("tw", 0),
        "lb_tw_at_end": tcp_after[lab.lb].get("tw", 0),
        "backend_tw_at_start": sum(tcp_before[ns].get("tw", 0) for ns in backends),
        "backend_tw_at_end": sum(tcp_after[ns].get("tw", 0) for ns in backends),
    }


def merge(reports: list[dict]) -> dict:
    """Several wrk processes as one: requests and errors added, latency percentiles of the pooled
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
        "latency_us": {
            "p50": percentile(50),
            "p90": percentile(90),
            "p99": percentile(99),
            "p999": percentile(99.9),
            "max": max(r["max_us"] for r in reports),
        },
    }


def figures(raw: dict, idle: dict[str, float]) -> dict:
    """The per-run numbers the report uses, from a :func:`run_wrk` result and the idle rates."""
    wrk = raw["wrk"]
    seconds = wrk["duration_us"] / 1e6
    requests = max(wrk["requests"], 1)
    per_request_us = 1e6 / TICK / requests

    def corrected(ticks: float, rate: float) -> float:
        return max(ticks - rate * raw["elapsed_s"], 0.0) * per_request_us

    softirq = corrected(raw["ticks"]["softirq"], idle["softirq"])
    lb_user = raw["lb_process_ticks"]["user"] * per_request_us
    lb_system = raw["lb_process_ticks"]["system"] * per_request_us
    return {
        "req_s": wrk["requests"] / seconds,
        "requests": wrk["requests"],
        "p50_ms": wrk["latency_us"]["p50"] / 1000,
        "p99_ms": wrk["latency_us"]["p99"] / 1000,
        "max_ms": wrk["latency_us"]["max"] / 1000,
        "errors": sum(wrk["errors"].values()),
        "softirq_us": softirq,
        "lb_user_us": lb_user,
        "lb_system_us": lb_system,
        "lb_us": softirq + lb_user + lb_system,
        "machine_us": corrected(raw["busy_ticks"], idle["busy"]),
        "syn_retrans": raw["syn_retrans"]["client"] + raw["syn_retrans"]["lb"],
    }
