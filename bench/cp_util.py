"""Small helpers shared by the control-plane benchmark's modules (bench/control_plane.py and its cp_*.py)."""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from tests.stack import wait_until  # noqa: F401 (the benchmarks import it from here)

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
