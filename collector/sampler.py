"""Turn two kernel readings into one sample of rates: the system's and each farm's.

A rate needs two readings, so the first sample after a (re)start has none, and
a counter that went backwards (farm re-created, table rebuilt) gives no rate
for that step: both are ``None``, shown as a gap, never as a zero.

Active connections and SNAT source ports come from a conntrack *census* (a
walk of the whole table). Its cost grows with the table, so censuses are
spaced out to stay within ``census_budget`` of one core: every sample for a
small table, every ~30 s at 100,000 entries. Samples without a census carry
no active-connection figures (not stale ones).

A farm whose figures cannot be built (an unexpected counter, HAProxy's statistics unreadable) gets an entry
that holds only the reason (``{"error": ...}``, see :func:`error_entry`): the store keeps it where the figures
would be, so the farm's series has nulls there (never the zeros of an idle farm) and its row in the summary and
on the dashboard says why. One farm's bad reading never stops the others', nor the collector.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

from pyroute2 import IPRoute

from collector import readings as collectors
from compiler.types import Json
from dataplane.kernel import conntrack
from dataplane.kernel.applier import CounterValue, Kernel
from monitoring.farm_index import FarmIndex, FarmInfo

from .http_stats import HttpFarmStats

log = logging.getLogger("lbweb.monitoring")


@dataclass
class Reading:
    """Cumulative values read from the kernel at one instant."""

    monotonic: float
    wall: float
    counters: dict[str, CounterValue] = field(default_factory=dict)
    links: dict[str, dict[str, int]] = field(default_factory=dict)
    cpu: list[collectors.CpuTimes] = field(default_factory=list)
    conntrack_count: int | None = None
    conntrack_max: int | None = None
    conntrack_stats: dict[str, int] = field(default_factory=dict)


@dataclass
class Sample:
    """What the store keeps for one instant: system-wide figures and one entry per farm that moved.

    ``idle`` farms had no packet and no new connection since the previous sample (every
    rate a known zero): no entry is built for them. ``totals`` has every farm's
    cumulative (bytes in, bytes out, connections), None where its counters are missing. A farm whose figures
    could not be read has an :func:`error_entry`.
    """

    t: float
    system: Json
    farms: dict[int, Json]
    census: bool = False
    idle: frozenset[int] = frozenset()
    totals: dict[int, tuple[int | None, int | None, int | None]] = field(default_factory=dict)


def reading_error(exc: BaseException) -> str:
    """What a farm's row says when its figures could not be built: the exception's kind and words."""
    return f"figures not read: {type(exc).__name__}: {exc}" if str(exc) else f"figures not read: {type(exc).__name__}"


def error_entry(error: str) -> Json:
    """The entry of a farm whose figures could not be read: the reason and no figure (unknown, not zero)."""
    return {"error": error, "backends": {}}


def rate(current: int | None, previous: int | None, seconds: float) -> float | None:
    """Per second between two cumulative readings, to 0.1; None when unknown or reset."""
    if current is None or previous is None or seconds <= 0 or current < previous:
        return None
    return round((current - previous) / seconds, 1)


CounterRates = dict[str, tuple[float | None, float | None]]  # counter name -> (packets/s, bytes/s)


def counter_rates(
    current: dict[str, CounterValue], previous: dict[str, CounterValue], seconds: float, names: list[str]
) -> CounterRates:
    """Rates of the counters ``names`` that were read twice."""
    rates: CounterRates = {}
    if seconds <= 0:
        return rates
    for name in names:
        now, before = current.get(name), previous.get(name)
        if now is None or before is None:
            continue
        packets, octets = now
        if packets < before.packets or octets < before.bytes:
            continue  # re-created counter: no rate yet
        rates[name] = (round((packets - before.packets) / seconds, 1), round((octets - before.bytes) / seconds, 1))
    return rates


def add_sums(counters: dict[str, CounterValue], farms: Iterable[FarmInfo], *, backends: bool) -> None:
    """Add to ``counters`` (one reading of the kernel's) the sums of ``farms`` (:attr:`FarmInfo.sums`): the
    farms' own in and out, or (``backends``) their backends' traffic. A sum is there when every counter it
    adds up is, so a half-written farm shows no figure rather than a wrong one. Two parts because the
    collector needs every farm's own figures at each reading (to tell idle farms) and the backends' only
    for the farms whose figures it reports."""
    for farm in farms:
        for name, parts in farm.sums[2:] if backends else farm.sums[:2]:
            packets = octets = 0
            for part in parts:
                value = counters.get(part)
                if value is None:
                    break
                packets += value.packets
                octets += value.bytes
            else:
                counters[name] = CounterValue(packets, octets)


def total(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


@dataclass
class CensusByMark:
    """A census regrouped so each farm reads only its own destinations."""

    # mark -> (destination, entries, open entries, SNAT entries)
    destinations: dict[int, list[tuple[conntrack.Destination, int, int, int]]]
    port_range: int


def group_by_mark(census: conntrack.Census) -> CensusByMark:
    grouped: dict[int, list] = {}
    for destination, count in census.connections.items():
        row = (destination, count, census.open.get(destination, 0), census.snat.get(destination, 0))
        grouped.setdefault(destination.mark, []).append(row)
    return CensusByMark(grouped, collectors.read_local_port_range())


class Sampler:
    """Reads the kernel of the current network namespace; keeps the previous reading for rates."""

    def __init__(
        self,
        kernel: Kernel | None = None,
        census_budget: float = 0.015,
        min_census_interval: float = 2.0,
        max_census_interval: float = 120.0,
    ):
        self.kernel = kernel or Kernel()
        self.ipr = IPRoute()
        self.census_budget = census_budget
        self.min_census_interval = min_census_interval
        self.max_census_interval = max_census_interval
        self.census_interval = min_census_interval
        self.next_census = 0.0
        self.previous: Reading | None = None
        self._generation: int | None = None
        self.http = HttpFarmStats()
        self._errors: dict[int, str] = {}  # farm id -> the error last logged

    def close(self) -> None:
        self.ipr.close()

    def read(self, counters: Collection[str] | None = None) -> Reading:
        """One reading of the kernel: ``counters`` (every counter of lbweb's table without it)."""
        reading = Reading(monotonic=time.monotonic(), wall=time.time())
        for name, read in (
            ("counters", lambda: self.kernel.read_counters(counters)),
            ("links", lambda: collectors.read_links(self.ipr)),
            ("cpu", collectors.read_cpu_times),
            ("conntrack_stats", collectors.read_conntrack_stats),
        ):
            try:
                setattr(reading, name, read())
            except OSError as exc:  # one source failing leaves its figures empty, not the whole sample
                log.warning("reading %s failed: %s", name, exc)
        reading.conntrack_count, reading.conntrack_max = collectors.read_conntrack_totals()
        return reading

    def sample(self, index: FarmIndex) -> Sample:
        started = time.thread_time()
        current = self.read(index.counter_names)
        previous = self.previous
        self.previous = current
        seconds = current.monotonic - previous.monotonic if previous else 0.0
        census = self._census_if_due(current.monotonic)
        by_mark = group_by_mark(census[0]) if census else None
        # Idle farms are recognised from three counters (one without byte counters: its connections); a census or
        # a configuration change builds every entry.
        shortcut = previous is not None and by_mark is None and self._generation == index.generation
        self._generation = index.generation
        now, before = current.counters, previous.counters if previous else {}
        add_sums(now, index.farms, backends=False)
        idle, busy, totals = set(), [], {}
        for farm in index.farms:
            traffic_in, traffic_out = now.get(farm.traffic_in_counter), now.get(farm.traffic_out_counter)
            conns = now.get(farm.new_connections_counter)
            totals[farm.id] = (
                traffic_in.bytes if traffic_in else None,
                traffic_out.bytes if traffic_out else None,
                conns.packets if conns else None,
            )
            bytes_still = not farm.bytes_counted or (  # a farm that counts no bytes is idle on its connections
                traffic_in is not None
                and traffic_out is not None
                and traffic_in == before.get(farm.traffic_in_counter)
                and traffic_out == before.get(farm.traffic_out_counter)
            )
            if shortcut and conns is not None and conns == before.get(farm.new_connections_counter) and bytes_still:
                idle.add(farm.id)
            else:
                busy.append(farm)
        for counters in (now, before):  # a farm idle at the last reading has no backend sums in it yet
            add_sums(counters, busy, backends=True)
        rates = counter_rates(now, before, seconds, names=[n for farm in busy for n in farm.counters])
        farms: dict[int, Json] = {}
        for farm in busy:
            try:
                farms[farm.id] = self._farm(farm, now, rates, by_mark, index)
            except Exception as exc:  # this farm's figures are missing and say why; the others go on
                farms[farm.id] = error_entry(reading_error(exc))
        farms.update(self._http(current.monotonic))
        self._log_errors(farms)
        system = self._system(current, previous, seconds, farms, idle_farms=bool(idle))
        if census is not None:
            system["census"] = {
                "entries": census[0].entries,
                "cost_ms": round(census[1] * 1000, 1),
                "interval": round(self.census_interval, 1),
            }
        system["census_interval"] = round(self.census_interval, 1)
        system["collector_cpu_ms"] = round((time.thread_time() - started) * 1000, 1)
        return Sample(
            t=current.wall,
            system=system,
            farms=farms,
            census=census is not None,
            idle=frozenset(idle),
            totals=totals,
        )

    # -- internals -------------------------------------------------------------------

    def _http(self, monotonic: float) -> dict[int, Json]:
        """HTTP farms' entries from HAProxy's statistics, an :func:`error_entry` for each one without figures;
        should reading them fail as a whole (the database or the socket answering something unexpected),
        every HTTP farm known says why, and the L4 farms' figures are kept."""
        try:
            entries, errors = self.http.sample(monotonic)
        except Exception as exc:
            self.http.previous = None
            entries, errors = {}, dict.fromkeys(self.http.farm_ids(), reading_error(exc))
        return {**entries, **{farm_id: error_entry(error) for farm_id, error in errors.items()}}

    def _log_errors(self, farms: dict[int, Json]) -> None:
        """Log each farm's error when it appears or changes, not at every sample (its row shows it meanwhile)."""
        errors = {farm_id: entry["error"] for farm_id, entry in farms.items() if "error" in entry}
        for farm_id, error in errors.items():
            if self._errors.get(farm_id) != error:
                log.warning("farm %s: %s", farm_id, error)
        self._errors = {**{k: v for k, v in self._errors.items() if k not in farms}, **errors}

    def _census_if_due(self, now: float) -> tuple[conntrack.Census, float] | None:
        if now < self.next_census:
            return None
        started = time.thread_time()
        try:
            census = conntrack.conntrack_census()
        except OSError as exc:
            log.warning("conntrack census failed: %s", exc)
            self.next_census = now + self.max_census_interval
            return None
        cost = time.thread_time() - started
        wanted = cost / self.census_budget if self.census_budget > 0 else self.min_census_interval
        self.census_interval = min(max(wanted, self.min_census_interval), self.max_census_interval)
        self.next_census = now + self.census_interval - 0.1  # a little early: the loop ticks on the interval
        return census, cost

    def _farm(self, farm, counters: dict[str, CounterValue], rates: CounterRates, by_mark, index) -> Json:
        none = (None, None)
        farm_in, farm_out = rates.get(farm.traffic_in_counter, none), rates.get(farm.traffic_out_counter, none)
        in_now, out_now = counters.get(farm.traffic_in_counter), counters.get(farm.traffic_out_counter)
        conns_now = counters.get(farm.new_connections_counter)
        entry: Json = {
            "bytes_in": farm_in[1],
            "bytes_out": farm_out[1],
            "packets_in": farm_in[0],
            "packets_out": farm_out[0],
            "new_conns": rates.get(farm.new_connections_counter, none)[0],
            "total_bytes_in": in_now.bytes if in_now else None,
            "total_bytes_out": out_now.bytes if out_now else None,
            "total_conns": conns_now.packets if conns_now else None,
            "backends": {},
        }
        for backend in farm.backends:
            traffic, conns = counters.get(backend.traffic_counter), counters.get(backend.new_connections_counter)
            traffic_rate = rates.get(backend.traffic_counter, none)
            entry["backends"][str(backend.id)] = {
                "bytes": traffic_rate[1],
                "packets": traffic_rate[0],
                "new_conns": rates.get(backend.new_connections_counter, none)[0],
                "total_bytes": traffic.bytes if traffic else None,
                "total_conns": conns.packets if conns else None,
                "enabled": backend.enabled,
            }
        if by_mark is not None:
            self._add_census(entry, farm, by_mark, index)
        return entry

    def _add_census(self, entry: Json, farm, by_mark: CensusByMark, index: FarmIndex) -> None:
        tracked = active = snat = busiest = 0
        per_backend: dict[str, list[int]] = {str(b.id): [0, 0] for b in farm.backends}
        for destination, count, opened, used in by_mark.destinations.get(farm.mark, ()):
            tracked += count
            active += opened
            snat += used
            busiest = max(busiest, used)
            backend = index.backend_for(*destination)
            if backend is not None and str(backend) in per_backend:
                per_backend[str(backend)][0] += opened
                per_backend[str(backend)][1] += used
        entry["tracked_conns"] = tracked
        entry["active_conns"] = active
        entry["snat_ports"] = snat
        # SNAT picks a source port per destination (backend address and port): the busiest one runs out first,
        # out of the farm's addresses x ports (masquerade: 1024-65535, whatever ip_local_port_range says).
        entry["snat_port_use"] = round(100 * busiest / (farm.snat_tuples or by_mark.port_range), 2)
        for key, (count, used) in per_backend.items():
            entry["backends"][key]["active_conns"] = count
            entry["backends"][key]["snat_ports"] = used

    def _system(
        self, current: Reading, previous: Reading | None, seconds: float, farms: dict[int, Json], idle_farms: bool
    ) -> Json:
        values = list(farms.values())
        idle = [0.0] if idle_farms else []  # idle farms add a known zero
        # An HTTP farm's entry (HAProxy's figures) has no packets: it adds nothing to the packet rates.
        system: Json = {
            key: total([f.get(key) for f in values] + idle)
            for key in ("new_conns", "bytes_in", "bytes_out", "packets_in", "packets_out")
        }
        if previous and len(previous.cpu) == len(current.cpu):
            system["cpu"] = [
                round(100 * (now.busy - before.busy) / (now.total - before.total), 1)
                if now.total > before.total
                else None
                for now, before in zip(current.cpu, previous.cpu, strict=True)
            ]
        else:
            system["cpu"] = [None] * len(current.cpu)
        system["conntrack_count"] = current.conntrack_count
        system["conntrack_max"] = current.conntrack_max
        for name in collectors.CONNTRACK_STAT_FIELDS:
            before = previous.conntrack_stats.get(name) if previous else None
            system[f"conntrack_{name}"] = rate(current.conntrack_stats.get(name), before, seconds)
        system["links"] = {
            link: {
                key: rate(value, (previous.links.get(link) or {}).get(key) if previous else None, seconds)
                for key, value in counters.items()
            }
            for link, counters in current.links.items()
        }
        if any("active_conns" in f for f in values):
            system["active_conns"] = sum(f.get("active_conns", 0) for f in values)
        return system
