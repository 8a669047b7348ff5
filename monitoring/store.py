"""Time series in Redis: the last hour at the sampling interval, the last day at one minute.

Layout (``P`` = ``lbweb:metrics``):

* ``P:system:raw`` / ``P:system:1m`` -- a stream, one entry per sample; its
  presence at an instant is the collector's heartbeat.
* ``P:farm:<id>:raw`` / ``P:farm:<id>:1m`` -- a stream whose entries hold one
  compact JSON field ``v`` (short keys, see FARM_FIELDS; one field keeps writes cheap).
  A farm that was idle for a sample (every rate exactly 0, no active connection,
  backends unchanged) gets no entry: at an instant the system stream has, a farm
  without an entry was idle (zeros); where the system stream has nothing, the
  collector was not running (a gap, null). Memory grows with busy farms only. A farm whose figures could not
  be read has an entry with only ``e``, the reason: null figures there, not an idle farm's zeros.
* ``P:latest`` -- the last sample (system, farms that moved, every farm's totals)
  and ``P:census`` -- the last conntrack census, both for the summary.
* ``P:totals`` -- a hash, one field per farm: its counters' cumulative values and its
  backends' (``/metrics`` exposes them as Prometheus counters). Written for the farms
  that moved only: an idle farm's totals are the ones it has.

Entry ids are the sample's time in ms, the same in every stream of one sample,
so a farm's entries join the heartbeat exactly. Lengths are bounded with
``MAXLEN ~`` (1 h of samples, 1,440 minutes).
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import redis
from django.conf import settings

from compiler.types import Json
from lbweb import redis_keys as keys

if TYPE_CHECKING:  # the sampler reads the kernel: the web process, which reads the store, never imports it
    from collector.sampler import Sample

log = logging.getLogger("lbweb.monitoring")

PREFIX = keys.METRICS
LATEST = keys.METRICS_LATEST
CENSUS = keys.METRICS_CENSUS
TOTALS = keys.METRICS_TOTALS
MINUTE = 60
DAY_MINUTES = 1440
RAW, MINUTES = "raw", "1m"


FARM_FIELDS = {
    "bytes_in": "bi",
    "bytes_out": "bo",
    "packets_in": "pi",
    "packets_out": "po",
    "new_conns": "nc",
    "active_conns": "ac",
    "tracked_conns": "tc",
    "snat_ports": "sp",
    "snat_port_use": "su",
    # HTTP farms (collector/haproxy_stats.py, from HAProxy): requests/s, responses by class /s, latency, sessions, queue
    "requests": "rq",
    "responses_1xx": "h1",
    "responses_2xx": "h2",
    "responses_3xx": "h3",
    "responses_4xx": "h4",
    "responses_5xx": "h5",
    "latency_ms": "lt",
    "sessions": "ss",
    "queue": "q",
    "retries": "rt",  # requests sent again per second (retry_on), and of them sent to another backend (redispatch)
    "redispatches": "rd",
    # A farm whose figures could not be read (collector/sampler.py error_entry): why, and no figure at that instant
    "error": "e",
}
BACKEND_FIELDS = {
    "bytes": "b",
    "packets": "p",
    "new_conns": "nc",
    "active_conns": "ac",
    "snat_ports": "sp",
    "enabled": "on",
    "sessions": "ss",  # HTTP farms: sessions in use, declared capacity, queue, time in queue, latency
    "capacity": "cap",
    "queue": "q",
    "queue_time_ms": "qt",
    "latency_ms": "lt",
}
RATE_FIELDS = ("bytes_in", "bytes_out", "packets_in", "packets_out", "new_conns")
BACKEND_RATE_FIELDS = ("bytes", "packets", "new_conns")
CENSUS_FIELDS = ("active_conns", "tracked_conns", "snat_ports", "snat_port_use")
BACKEND_CENSUS_FIELDS = ("active_conns", "snat_ports")


system_key = keys.metrics_system
farm_key = keys.metrics_farm


def client(url: str | None = None) -> redis.Redis:
    """A Redis client for ``url`` (default: settings.REDIS_URL), with short timeouts."""
    return redis.Redis.from_url(url or settings.REDIS_URL, socket_timeout=5, socket_connect_timeout=2)


def _number(value: float | int | bool) -> int | float:
    """Booleans as 0/1; numbers as they are (the sampler rounds rates to 0.1)."""
    return int(value) if value is True or value is False else value


def encode_farm(entry: Json) -> Json:
    """Short keys, numbers only (and an unread farm's error, its words); None is left out (unknown). Backends
    under "b" by id."""
    fields: Json = {short: _number(entry[name]) for name, short in FARM_FIELDS.items() if entry.get(name) is not None}
    backends = {
        backend_id: {short: _number(b[name]) for name, short in BACKEND_FIELDS.items() if b.get(name) is not None}
        for backend_id, b in entry.get("backends", {}).items()
    }
    if backends:
        fields["b"] = backends
    return fields


def totals_of(entry: Json) -> Json:
    """A farm's cumulative counters: bytes in/out ``bi``/``bo``, connections ``nc``, and per backend id
    ``[bytes, connections]``; None where the kernel has no such counter (yet)."""
    return {
        "bi": entry.get("total_bytes_in"),
        "bo": entry.get("total_bytes_out"),
        "nc": entry.get("total_conns"),
        "b": {bid: [b.get("total_bytes"), b.get("total_conns")] for bid, b in entry.get("backends", {}).items()},
    }


def pack(fields: Json) -> str:
    return json.dumps(fields, separators=(",", ":"))


def decode_farm(packed: bytes | str) -> Json:
    return decode_farm_fields(json.loads(packed))


def census_fields(entry: Json) -> Json:
    """The compact fields a census gives (farm and backends)."""
    fields = encode_farm(entry)
    census = {k: fields[k] for k in ("ac", "tc", "sp", "su") if k in fields}
    census["b"] = {b: {k: v[k] for k in ("ac", "sp") if k in v} for b, v in fields.get("b", {}).items()}
    return census


def decode_farm_fields(fields: Json) -> Json:
    """Long names back from the compact fields (see encode_farm)."""
    long_farm = {v: k for k, v in FARM_FIELDS.items()}
    long_backend = {v: k for k, v in BACKEND_FIELDS.items()}
    entry: Json = {long_farm[k]: v for k, v in fields.items() if k in long_farm}
    entry["backends"] = {
        backend_id: {long_backend[k]: (bool(v) if k == "on" else v) for k, v in b.items() if k in long_backend}
        for backend_id, b in fields.get("b", {}).items()
    }
    return entry


def backend_flags(fields: Json) -> dict[str, int]:
    return {backend_id: b.get("on") for backend_id, b in fields.get("b", {}).items()}


def is_idle(fields: Json, census: bool, backends_unchanged: bool) -> bool:
    """Nothing moved: every rate is a known zero and no connection is tracked (when a census says so)."""
    if not backends_unchanged:
        return False
    for name in RATE_FIELDS:
        if fields.get(FARM_FIELDS[name]) != 0:
            return False
    if census and fields.get(FARM_FIELDS["tracked_conns"]) != 0:
        return False
    return all(v == 0 for b in fields.get("b", {}).values() for k, v in b.items() if k != "on")


class MetricStore:
    """Writes samples (collector side) and reads series (web side)."""

    def __init__(self, redis_client: redis.Redis | None = None, interval: float = 2.0):
        self.redis = redis_client or client()
        self.interval = interval
        self.raw_length = max(int(3600 / interval), 1)
        self._last_ms = 0
        self._minute: int | None = None
        self._backend_flags: dict[int, dict[str, int | float]] = {}
        self._last_census: Json = {}

    # -- writing (collector) -------------------------------------------------------------

    def write(self, sample: Sample) -> None:
        ms = max(int(sample.t * 1000), self._last_ms + 1)
        self._last_ms = ms
        entry_id = f"{ms}-0"
        system = dict(sample.system, t=ms / 1000, census=sample.system.get("census"))
        pipe = self.redis.pipeline(transaction=False)
        pipe.xadd(system_key(RAW), {"d": json.dumps(system)}, id=entry_id, maxlen=self.raw_length, approximate=True)
        moved: Json = {}
        for farm_id, entry in sample.farms.items():
            fields = encode_farm(entry)
            flags = backend_flags(fields)
            if is_idle(fields, sample.census, self._backend_flags.get(farm_id) == flags):
                continue
            self._backend_flags[farm_id] = flags
            moved[farm_id] = fields
            key = farm_key(farm_id, RAW)
            pipe.xadd(key, {"v": pack(fields)}, id=entry_id, maxlen=self.raw_length, approximate=True)
        totals = {  # a farm whose figures failed keeps the totals it had
            farm_id: pack(totals_of(entry)) for farm_id, entry in sample.farms.items() if "error" not in entry
        }
        if totals:
            pipe.hset(TOTALS, mapping=totals)
        latest = {"t": ms / 1000, "system": system, "farms": moved, "totals": sample.totals}
        pipe.set(LATEST, pack(latest))
        if sample.census:
            census = {fid: census_fields(e) for fid, e in sample.farms.items()}
            pipe.set(CENSUS, pack({"t": ms / 1000, "active_conns": system.get("active_conns"), "farms": census}))
        pipe.execute()
        self._downsample_if_due(ms / 1000, list(sample.totals) or list(sample.farms))

    def _downsample_if_due(self, now: float, farm_ids: list[int]) -> None:
        minute = int(now // MINUTE)
        if self._minute is None:
            self._minute = minute
            return
        if minute == self._minute:
            return
        start = self._minute * MINUTE
        self._minute = minute
        self.downsample(start, farm_ids)

    def downsample(self, start: float, farm_ids: Iterable[int]) -> None:
        """Average the raw samples of the minute starting at ``start`` into the 1-minute streams."""
        low, high = int(start * 1000), int((start + MINUTE) * 1000) - 1
        heartbeat = self._read(system_key(RAW), low, high)
        if not heartbeat:
            return
        entry_id = f"{int(start * 1000)}-0"
        system_points = [json.loads(fields[b"d"]) for _t, fields in heartbeat]
        pipe = self.redis.pipeline(transaction=False)
        pipe.xadd(
            system_key(MINUTES),
            {"d": json.dumps(dict(average_json(system_points), t=start))},
            id=entry_id,
            maxlen=DAY_MINUTES,
            approximate=True,
        )
        farm_ids = list(farm_ids)
        reads = self.redis.pipeline(transaction=False)
        for farm_id in farm_ids:
            reads.xrange(farm_key(farm_id, RAW), low, high)
        census_count = sum(1 for p in system_points if p.get("census"))
        for farm_id, entries in zip(farm_ids, reads.execute(), strict=True):
            if not entries:
                continue  # idle all minute
            decoded = [decode_farm(fields[b"v"]) for _id, fields in entries]
            averaged = average_farm(decoded, len(heartbeat), census_count)
            key = farm_key(farm_id, MINUTES)
            pipe.xadd(key, {"v": pack(encode_farm(averaged))}, id=entry_id, maxlen=DAY_MINUTES, approximate=True)
        try:
            pipe.execute()
        except redis.ResponseError as exc:  # clock moved back: the minute exists already
            log.warning("downsampling %s skipped: %s", start, exc)

    # -- reading (web) ---------------------------------------------------------------------

    def _read(self, key: str, low: int | str, high: int | str = "+") -> list[tuple[float, dict]]:
        return [(int(i.split(b"-")[0]) / 1000, fields) for i, fields in self.redis.xrange(key, low, high)]

    def latest(self) -> Json | None:
        """The newest sample: system, the farms that moved (compact fields), every farm's totals."""
        raw = self.redis.get(LATEST)
        return json.loads(raw) if raw else None

    def latest_census(self) -> Json | None:
        """The newest census: its time, total open connections, per farm compact census fields."""
        raw = self.redis.get(CENSUS)
        return json.loads(raw) if raw else None

    def open_connections(self, farm_id: int) -> tuple[dict[int, int], float | None]:
        """Each backend's open connections (backend id -> count) from the newest conntrack census, and the
        census's time; ({}, None) when there is no census (the collector is not running, or the farm is
        not measured). What a person confirming a cut is shown: the web process never reads conntrack."""
        census = self.latest_census() or {}
        farm = (census.get("farms") or {}).get(str(farm_id))
        if farm is None:
            return {}, None
        counts = {int(b): int(round(v.get("ac", 0))) for b, v in (farm.get("b") or {}).items()}
        return counts, census.get("t")

    def totals(self) -> dict[int, Json]:
        """Every farm's cumulative counters as last sampled (see :func:`totals_of`)."""
        return {int(k): json.loads(v) for k, v in self.redis.hgetall(TOTALS).items()}

    def system_series(self, resolution: str, since: float) -> list[Json]:
        return [json.loads(fields[b"d"]) for _t, fields in self._read(system_key(resolution), int(since * 1000) + 1)]

    def farm_series(self, farm_id: int, resolution: str, since: float) -> dict[float, Json]:
        return {t: decode_farm(f[b"v"]) for t, f in self._read(farm_key(farm_id, resolution), int(since * 1000) + 1)}


def average_json(points: list[Any]) -> Any:
    """Element-wise mean of JSON-like values; None where no point has a number."""
    first = next((p for p in points if p is not None), None)
    if isinstance(first, dict):
        keys = {k for p in points if isinstance(p, dict) for k in p}
        return {k: average_json([p.get(k) for p in points if isinstance(p, dict)]) for k in sorted(keys)}
    if isinstance(first, list):
        width = max(len(p) for p in points if isinstance(p, list))
        return [
            average_json([p[i] if isinstance(p, list) and i < len(p) else None for p in points]) for i in range(width)
        ]
    if isinstance(first, bool) or not isinstance(first, int | float):
        return first
    numbers = [p for p in points if isinstance(p, int | float) and not isinstance(p, bool)]
    return sum(numbers) / len(numbers) if numbers else None


def average_farm(entries: list[Json], samples: int, census_samples: int) -> Json:
    """Mean over the minute's samples; samples where the farm wrote nothing were idle (zeros)."""

    def mean(values: list[float | None], idle_samples: int) -> float | None:
        known = [v for v in values if v is not None]
        count = len(known) + idle_samples
        return sum(known) / count if count else None

    idle = max(samples - len(entries), 0)
    with_census = [e for e in entries if "active_conns" in e]
    idle_census = max(census_samples - len(with_census), 0)
    result: Json = {name: mean([e.get(name) for e in entries], idle) for name in RATE_FIELDS}
    for name in CENSUS_FIELDS:
        result[name] = mean([e.get(name) for e in with_census], idle_census)
    result["backends"] = {}
    backend_ids = {b for e in entries for b in e["backends"]}
    for backend_id in backend_ids:
        values = [e["backends"].get(backend_id, {}) for e in entries]
        backend: Json = {n: mean([v.get(n) for v in values], idle) for n in BACKEND_RATE_FIELDS}
        census_values = [e["backends"].get(backend_id, {}) for e in with_census]
        for name in BACKEND_CENSUS_FIELDS:
            backend[name] = mean([v.get(name) for v in census_values], idle_census)
        backend["enabled"] = values[-1].get("enabled")
        result["backends"][backend_id] = backend
    return result


@functools.cache
def _store_for(url: str, interval: float) -> MetricStore:
    return MetricStore(client(url), interval)


def metric_store() -> MetricStore:
    """The process-wide store for settings.REDIS_URL (one connection pool per URL)."""
    return _store_for(settings.REDIS_URL, settings.LBWEB_METRICS_INTERVAL)
