"""Small helpers shared by the control-plane benchmark's modules (bench/control_plane.py and its cp_*.py)."""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from tests.support.stack import wait_until  # noqa: F401 (the benchmarks import it from here)

ROOT = Path(__file__).resolve().parent.parent
PYTHON = ROOT / ".venv" / "bin" / "python"
STARTED = time.monotonic()


def progress(message: str) -> None:
    print(f"[{time.monotonic() - STARTED:7.1f}s] {message}", file=sys.stderr, flush=True)


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


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return round(numerator / denominator, 2)


def next_weight(k: int, current: int) -> int:
    """A new weight for change ``k`` that differs from the current one (so the total moves)."""
    weight = 1 + (k * 37) % 100
    return weight if weight != current else weight % 100 + 1


class Api:
    """The REST API under gunicorn, token authenticated."""

    def __init__(self, base: str, token: str):
        import requests

        self.base = base.rstrip("/") + "/api/v1/"
        self.token = token
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Token {token}"

    def clone(self) -> Api:
        """Another client with a connection of its own (for writes from several clients at once)."""
        return Api(self.base.removesuffix("api/v1/"), self.token)

    def call(self, method: str, path: str, expect: int, **kwargs) -> dict:
        response = self.session.request(method, self.base + path, timeout=60, **kwargs)
        if response.status_code != expect:
            raise RuntimeError(f"{method} {path}: {response.status_code} {response.text[:500]}")
        return response.json() if response.content else {}

    def wait_applied(self, farm_id: int, timeout: float = 60) -> dict:
        return wait_until(
            lambda: (f := self.call("GET", f"farms/{farm_id}/", 200))["apply_status"]["status"] == "applied" and f,
            timeout,
            f"farm {farm_id} applied",
            interval=0.02,
        )


class TreeMemory:
    """Peak memory of a process and all its descendants (the Celery worker, which runs its tasks itself
    (``CELERY_WORKER_POOL``), the kernel writer and the scratch process that one starts).

    A thread reads /proc every ``interval`` seconds: the sum of the tree's resident sets at each sample
    (its peak is what the machine had to give the worker at once), each process's own high-water
    mark (VmHWM, kept by the kernel: a peak between two samples is not missed), and the CPU time the
    tree used meanwhile (user + system, the kernel's work on lbweb's netlink batches included): on a
    shared machine the wall time is the others' as much as lbweb's, the CPU time is lbweb's own.
    """

    def __init__(self, pid: int, interval: float = 0.05):
        import threading

        self.pid, self.interval = pid, interval
        self.peak_sum_kb = 0
        self.hwm_kb: dict[int, tuple[str, int]] = {}
        self.cpu_first: dict[int, int] = {}  # pid -> user + system clock ticks when first seen (0: born since)
        self.cpu_last: dict[int, int] = {}
        self._started = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> TreeMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    @staticmethod
    def _status(pid: int) -> dict[str, str]:
        try:
            lines = Path(f"/proc/{pid}/status").read_text().splitlines()
        except OSError:
            return {}
        return dict(line.split(":\t", 1) for line in lines if ":\t" in line)

    def tree(self) -> list[int]:
        children: dict[int, list[int]] = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
                children.setdefault(ppid, []).append(int(entry.name))
        found, todo = [], [self.pid]
        while todo:
            pid = todo.pop()
            found.append(pid)
            todo += children.get(pid, [])
        return found

    @staticmethod
    def _cpu_ticks(pid: int) -> int | None:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return None
        return int(fields[11]) + int(fields[12])  # utime, stime

    def sample(self) -> None:
        total = 0
        for pid in self.tree():
            status = self._status(pid)
            if not status:
                continue
            ticks = self._cpu_ticks(pid)
            if ticks is not None:
                self.cpu_first.setdefault(pid, ticks if not self._started else 0)
                self.cpu_last[pid] = ticks
            rss = int(status.get("VmRSS", "0 kB").split()[0])
            hwm = int(status.get("VmHWM", "0 kB").split()[0])
            total += rss
            name = status.get("Name", "?").strip()
            if hwm >= self.hwm_kb.get(pid, ("", 0))[1]:
                self.hwm_kb[pid] = (name, hwm)
        self.peak_sum_kb = max(self.peak_sum_kb, total)
        self._started = True

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)
        self.sample()

    def figures(self) -> dict:
        """Peak of the tree's summed RSS and each process's VmHWM, in MB (largest first)."""
        hwm = sorted(self.hwm_kb.items(), key=lambda item: -item[1][1])
        import os

        ticks = sum(self.cpu_last[pid] - self.cpu_first.get(pid, 0) for pid in self.cpu_last)
        return {
            "cpu_s": round(ticks / os.sysconf("SC_CLK_TCK"), 2),  # the tree's user + system time meanwhile
            "peak_tree_rss_mb": round(self.peak_sum_kb / 1024, 1),
            "max_process_hwm_mb": round(hwm[0][1][1] / 1024, 1) if hwm else None,
            "process_hwm_mb": [[pid, name, round(kb / 1024, 1)] for pid, (name, kb) in hwm],
        }
