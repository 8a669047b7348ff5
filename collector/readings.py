"""Read what the kernel counts right now, in the network namespace of the calling thread.

Each function reads one source and returns plain values (cumulative counters,
not rates); :mod:`collector.sampler` turns two readings into rates. Nothing
here writes to the kernel. nftables counters are read by
``dataplane.kernel.applier.Kernel.read_counters`` (the one module that talks to nftables), the conntrack
census by ``conntrack.conntrack_census`` (the one conntrack reader).
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from pyroute2 import IPRoute

LINK_FIELDS = ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets", "rx_errors", "tx_errors", "rx_dropped", "tx_dropped")
CONNTRACK_STAT_FIELDS = ("insert_failed", "drop", "early_drop")
# /proc/self/net follows the process's first thread; thread-self follows the thread that reads (see run_in_netns).
PROC_NET = Path("/proc/thread-self/net")
PROC_SYS_NETFILTER = Path("/proc/sys/net/netfilter")


def read_links(ipr: IPRoute) -> dict[str, dict[str, int]]:
    """Cumulative counters of every interface (bytes, packets, errors, drops each way), by name."""
    links = {}
    for message in ipr.get_links():
        stats = message.get_attr("IFLA_STATS64") or message.get_attr("IFLA_STATS") or {}
        links[message.get_attr("IFLA_IFNAME")] = {k: int(stats.get(k, 0)) for k in LINK_FIELDS}
    return links


class CpuTimes(NamedTuple):
    """Jiffies one core spent busy and in total since boot."""

    busy: int
    total: int


def read_cpu_times(path: Path = Path("/proc/stat")) -> list[CpuTimes]:
    """Per core, in core order (the aggregate ``cpu`` line is left out)."""
    cores = []
    for line in path.read_text().splitlines():
        if line.startswith("cpu") and line[3:4].isdigit():
            values = [int(v) for v in line.split()[1:]]
            idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
            total = sum(values[:8])  # guest time is already inside user/nice
            cores.append(CpuTimes(total - idle, total))
    return cores


def read_conntrack_totals() -> tuple[int | None, int | None]:
    """Entries in the conntrack table and its maximum (None when conntrack is not loaded)."""

    def read(name: str) -> int | None:
        try:
            return int((PROC_SYS_NETFILTER / name).read_text())
        except (OSError, ValueError):
            return None

    return read("nf_conntrack_count"), read("nf_conntrack_max")


def read_conntrack_stats(path: Path | None = None) -> dict[str, int]:
    """Cumulative insert_failed, drop and early_drop, summed over CPUs ({} when unavailable)."""
    try:
        lines = (path or PROC_NET / "stat" / "nf_conntrack").read_text().split("\n")
    except OSError:
        return {}
    names = lines[0].split()
    totals = dict.fromkeys(CONNTRACK_STAT_FIELDS, 0)
    for line in lines[1:]:
        values = line.split()
        if len(values) != len(names):
            continue
        for name, value in zip(names, values, strict=True):
            if name in totals:
                totals[name] += int(value, 16)
    return totals


def read_local_port_range() -> int:
    """ip_local_port_range's size: the census's denominator for a farm whose SNAT capacity is unknown
    (nf_nat itself picks masquerade ports in 1024-65535, and a farm's own range when it has one)."""
    try:
        low, high = (int(v) for v in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        return high - low + 1
    except (OSError, ValueError):
        return 28232  # Linux default 32768-60999
