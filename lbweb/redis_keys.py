"""Every Redis key lbweb's processes share, named once.

Redis is where the worker, beat, the collector and healthd tell the web process what they know
(heartbeats, the kernel's capabilities, live sessions, metrics), so a key is an interface between two
processes: a name written in one module and read in another must not be spelled twice. Celery's own
broker keys are Celery's.
"""

from __future__ import annotations

PREFIX = "lbweb"

CAPABILITIES = f"{PREFIX}:capabilities"  # the worker's probe of its kernel (JSON), read by validation and the API


def heartbeat(process: str) -> str:
    """A process's heartbeat (worker, beat, collector, healthd)."""
    return f"{PREFIX}:{process}:heartbeat"


def sessions(farm_id: int) -> str:
    """The worker's last reading of a farm's live persistence entries."""
    return f"{PREFIX}:sessions:{farm_id}"


def sessions_asked(farm_id: int) -> str:
    """When the web last asked the worker for a new reading of a farm's sessions."""
    return f"{PREFIX}:sessions:{farm_id}:asked"


NETWORK_OBSERVED = f"{PREFIX}:network:observed"  # the worker's last reading of the interfaces, for System -> Network

METRICS = f"{PREFIX}:metrics"
METRICS_LATEST = f"{METRICS}:latest"
METRICS_CENSUS = f"{METRICS}:census"
METRICS_TOTALS = f"{METRICS}:totals"  # running per-farm/backend totals for Prometheus counters


def metrics_system(resolution: str) -> str:
    return f"{METRICS}:system:{resolution}"


def metrics_farm(farm_id: int, resolution: str) -> str:
    return f"{METRICS}:farm:{farm_id}:{resolution}"
