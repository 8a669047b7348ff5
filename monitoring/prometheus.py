"""``/metrics``: lbweb's figures in Prometheus' text format, named the way HAProxy's exporter names its own.

Everything is read at scrape time from what is already kept: the database (farms, backends, their
health, apply runs), the collector's Redis keys (cumulative counters ``P:totals``, the last conntrack
census, the last system sample) and the processes' heartbeats. The web process reads; it never asks
the kernel. A figure nobody measured (no collector, no census yet, a counter the kernel does not have)
is left out, never written as 0, so a dashboard shows a gap and not a false idle.

| name | kind | labels | from |
|---|---|---|---|
| ``lbweb_farm_status`` | gauge | farm, mode, protocol | 1: farm up and the kernel holds it as saved |
| ``lbweb_farm_current_sessions`` | gauge | farm | open connections (last census) |
| ``lbweb_farm_bytes_in_total``, ``_bytes_out_total`` | counter | farm | client to backend, and back |
| ``lbweb_farm_connections_total`` | counter | farm | new connections |
| ``lbweb_farm_snat_ports_in_use`` | gauge | farm | SNAT source ports held (last census) |
| ``lbweb_backend_status`` | gauge | farm, backend | 1: takes new connections (enabled and not down) |
| ``lbweb_backend_weight`` | gauge | farm, backend | |
| ``lbweb_backend_check_status`` | gauge | farm, backend, state | 1 for the backend's health (up, down, unknown) |
| ``lbweb_backend_current_sessions``, ``_snat_ports_in_use`` | gauge | farm, backend | last census |
| ``lbweb_http_farm_retries_per_second``, ``_redispatches_per_second`` | gauge | farm | HAProxy, newest sample |
| ``lbweb_backend_bytes_total``, ``_connections_total`` | counter | farm, backend | |
| ``lbweb_conntrack_entries``, ``lbweb_conntrack_limit`` | gauge | | ``nf_conntrack_count``/``_max`` |
| ``lbweb_snat_ports_in_use`` | gauge | | every farm's, last census |
| ``lbweb_process_up`` | gauge | process | heartbeat younger than ``LBWEB_PROCESS_STALE_SECONDS`` |
| ``lbweb_apply_duration_seconds`` | histogram | | every apply run kept |
| ``lbweb_apply_failures_total`` | counter | | apply runs that failed |
| ``lbweb_changes_pending`` | gauge | | farms the kernel does not hold as saved yet |
| ``lbweb_collector_sample_age_seconds`` | gauge | | age of the newest sample |
| ``lbweb_certificate_expiry_timestamp_seconds`` | gauge | certificate, subject | every certificate lbweb holds |

Other apps add their own figures with :func:`register` (a function yielding metric families) and
their certificates with :func:`register_certificates` (a function yielding ``(name, subject,
not_after)``), from their ``AppConfig.ready()``; both are read on every scrape.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from django.db.models import Count, F, Q, Sum
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from farms.choices import BackendHealthChoices, BackendStateChoices
from farms.models import ApplyRun, Farm
from lbweb import heartbeat

from .store import metric_store

log = logging.getLogger("lbweb.monitoring")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
APPLY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
HEALTH_STATES = [c.value for c in BackendHealthChoices]

_EXTRA: list[Callable[[], Iterable[Metric]]] = []
_CERTIFICATES: list[Callable[[], Iterable[tuple[str, str, datetime]]]] = []


def register(source: Callable[[], Iterable[Metric]]) -> None:
    """Add a source of metric families (another app's farms, engines) to every scrape."""
    if source not in _EXTRA:
        _EXTRA.append(source)


def register_certificates(source: Callable[[], Iterable[tuple[str, str, datetime]]]) -> None:
    """Add a source of certificates: ``(name, subject, not_after)`` each, shown as their expiry."""
    if source not in _CERTIFICATES:
        _CERTIFICATES.append(source)


def web_certificate() -> Iterable[tuple[str, str, datetime]]:
    from system import tls

    current = tls.current()
    if current is not None:
        yield "web", current.subject, current.not_after


def http_farm_certificates() -> Iterable[tuple[str, str, datetime]]:
    """The certificates HTTPS farms offer (the l7 app's), when that app is installed."""
    from django.apps import apps

    if not apps.is_installed("l7"):
        return
    for name, names, not_after in apps.get_model("l7", "Certificate").objects.values_list("name", "names", "not_after"):
        if not_after is not None:
            yield f"http {name}", ", ".join(names or []) or name, not_after


register_certificates(web_certificate)
register_certificates(http_farm_certificates)


class LbwebCollector:
    """A prometheus_client collector that builds every family from lbweb's stores at each scrape."""

    def collect(self) -> Iterable[Metric]:
        store = metric_store()
        try:
            totals, census, latest = store.totals(), store.latest_census() or {}, store.latest() or {}
        except Exception as exc:  # Redis down: the database's figures are still worth a scrape
            log.warning("metrics: the collector's figures are unreadable (%s)", exc)
            totals, census, latest = {}, {}, {}
        yield from self.farms(totals, census.get("farms", {}))
        yield from self.http_farms(latest.get("farms", {}))
        yield from self.system(latest, census)
        yield from self.processes()
        yield from self.applies()
        yield from self.certificates()
        for source in _EXTRA:
            yield from source()

    def farms(self, totals: dict[int, Any], census: dict[str, Any]) -> Iterable[Metric]:
        farm, backend = ["farm"], ["farm", "backend"]
        f = _families(
            ("farm_status", "gauge", "1: up, and the kernel holds it as saved.", [*farm, "mode", "protocol"]),
            ("farm_current_sessions", "gauge", "Open connections of the farm (last conntrack census).", farm),
            ("farm_bytes_in", "counter", "Bytes from clients to backends.", farm),
            ("farm_bytes_out", "counter", "Bytes from backends to clients.", farm),
            ("farm_connections", "counter", "New connections the farm balanced.", farm),
            ("farm_snat_ports_in_use", "gauge", "SNAT source ports the farm's connections hold.", farm),
            ("backend_status", "gauge", "1 when the backend takes new connections (enabled, not down).", backend),
            ("backend_weight", "gauge", "The backend's configured weight.", backend),
            ("backend_check_status", "gauge", "1 for the backend's current health state.", [*backend, "state"]),
            ("backend_current_sessions", "gauge", "Open connections to the backend (last census).", backend),
            ("backend_snat_ports_in_use", "gauge", "SNAT source ports held towards the backend.", backend),
            ("backend_bytes", "counter", "Bytes to and from the backend.", backend),
            ("backend_connections", "counter", "New connections sent to the backend.", backend),
        )  # fmt: skip
        for row in Farm.objects.prefetch_related("backends").order_by("name"):
            up = row.state == "up" and row.apply_status == "applied"
            f["farm_status"].add_metric([row.name, row.mode, row.protocol], 1 if up else 0)
            counted = totals.get(row.id, {})
            counted_backends = counted.get("b", {})
            seen = census.get(str(row.id), {})
            _add(f["farm_bytes_in"], [row.name], counted.get("bi"))
            _add(f["farm_bytes_out"], [row.name], counted.get("bo"))
            _add(f["farm_connections"], [row.name], counted.get("nc"))
            _add(f["farm_current_sessions"], [row.name], seen.get("ac"))
            _add(f["farm_snat_ports_in_use"], [row.name], seen.get("sp"))
            for member in row.backends.all():
                labels = [row.name, str(member)]
                takes = member.state == BackendStateChoices.ENABLED and member.health != BackendHealthChoices.DOWN
                f["backend_status"].add_metric(labels, 1 if takes else 0)
                f["backend_weight"].add_metric(labels, member.weight)
                for state in HEALTH_STATES:
                    f["backend_check_status"].add_metric([*labels, state], 1 if member.health == state else 0)
                bytes_, conns = (counted_backends.get(str(member.id)) or [None, None])[:2]
                _add(f["backend_bytes"], labels, bytes_)
                _add(f["backend_connections"], labels, conns)
                in_census = seen.get("b", {}).get(str(member.id), {})
                _add(f["backend_current_sessions"], labels, in_census.get("ac"))
                _add(f["backend_snat_ports_in_use"], labels, in_census.get("sp"))
        yield from f.values()

    def http_farms(self, latest: dict[str, Any]) -> Iterable[Metric]:
        """HTTP farms' retries and redispatches per second in the newest sample (HAProxy's, by the collector)."""
        families = {
            "rt": GaugeMetricFamily(
                "lbweb_http_farm_retries_per_second", "Requests HAProxy sent again (retry_on).", labels=["farm"]
            ),
            "rd": GaugeMetricFamily(
                "lbweb_http_farm_redispatches_per_second", "Retries sent to another backend.", labels=["farm"]
            ),
        }
        names = dict(Farm.objects.filter(id__in=[int(f) for f in latest]).values_list("id", "name"))
        for farm_id, fields in sorted(latest.items()):
            for short, family in families.items():
                if fields.get(short) is not None and int(farm_id) in names:
                    family.add_metric([names[int(farm_id)]], fields[short])
        yield from families.values()

    def system(self, latest: dict[str, Any], census: dict[str, Any]) -> Iterable[Metric]:
        system = latest.get("system", {})
        if system.get("conntrack_count") is not None:
            yield GaugeMetricFamily(
                "lbweb_conntrack_entries", "Entries in the conntrack table.", system["conntrack_count"]
            )
        if system.get("conntrack_max") is not None:
            yield GaugeMetricFamily("lbweb_conntrack_limit", "nf_conntrack_max.", system["conntrack_max"])
        if census.get("farms"):
            used = sum(f.get("sp", 0) for f in census["farms"].values())
            yield GaugeMetricFamily("lbweb_snat_ports_in_use", "SNAT source ports held, every farm.", used)
        if latest.get("t"):
            age = max(0.0, time.time() - latest["t"])
            yield GaugeMetricFamily("lbweb_collector_sample_age_seconds", "Age of the newest sample.", age)

    def processes(self) -> Iterable[Metric]:
        family = GaugeMetricFamily("lbweb_process_up", "1 when the process's heartbeat is fresh.", labels=["process"])
        family.add_metric(["web"], 1)  # this answer is the web's heartbeat
        for name, state in heartbeat.process_states().items():
            family.add_metric([name], 1 if state["state"] == "running" else 0)
        yield family

    def applies(self) -> Iterable[Metric]:
        bounds = {f"le_{i}": Count("id", filter=Q(duration_ms__lte=b * 1000)) for i, b in enumerate(APPLY_BUCKETS)}
        figures = ApplyRun.objects.aggregate(
            n=Count("id"), total=Sum("duration_ms"), failed=Count("id", filter=Q(ok=False)), **bounds
        )
        buckets = [(str(b), figures[f"le_{i}"]) for i, b in enumerate(APPLY_BUCKETS)] + [("+Inf", figures["n"])]
        yield HistogramMetricFamily(
            "lbweb_apply_duration_seconds",
            "Time the worker took to bring the kernel to a configuration (every apply run kept).",
            buckets=buckets,
            sum_value=(figures["total"] or 0) / 1000,
        )
        yield CounterMetricFamily("lbweb_apply_failures", "Apply runs that failed.", value=figures["failed"])
        pending = Farm.objects.filter(applied_generation__lt=F("config_generation")).count()
        yield GaugeMetricFamily("lbweb_changes_pending", "Farms the kernel does not hold as saved yet.", pending)

    def certificates(self) -> Iterable[Metric]:
        family = GaugeMetricFamily(
            "lbweb_certificate_expiry_timestamp_seconds",
            "When each certificate lbweb holds stops being valid (Unix time).",
            labels=["certificate", "subject"],
        )
        for source in _CERTIFICATES:
            try:
                for name, subject, not_after in source():
                    family.add_metric([name, subject], not_after.timestamp())
            except Exception as exc:  # one unreadable certificate must not hide every other figure
                log.warning("metrics: a certificate source failed: %s", exc)
        yield family


def _families(*specs: tuple[str, str, str, list[str]]) -> dict[str, Metric]:
    kinds = {"gauge": GaugeMetricFamily, "counter": CounterMetricFamily}
    return {name: kinds[kind](f"lbweb_{name}", text, labels=labels) for name, kind, text, labels in specs}


def _add(family: Metric, labels: list[str], value: float | None) -> None:
    if value is not None:
        family.add_metric(labels, value)


def exposition() -> bytes:
    """The text Prometheus scrapes."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LbwebCollector())
    return generate_latest(registry)
