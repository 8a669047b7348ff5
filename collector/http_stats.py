"""The collector's reading of HAProxy (HTTP farms): ``show stat`` through the master socket every sample, turned
into farm entries by ``collector/haproxy_stats.py`` and stored with the kernel's farms (same streams, same
charts and API).

No HTTP farm: no entry, and nothing else changes. HTTP farms while HAProxy's statistics cannot be read (HAProxy
not running, its socket refusing): no entry and, for each HTTP farm, the reason as its error, which its row shows."""

from __future__ import annotations

import logging

from django.conf import settings

from collector import haproxy_stats as stats
from dataplane.l7.runtime import EngineError, MasterCLI
from farms.choices import L7_MODES
from farms.models import ConfigGeneration, Farm

log = logging.getLogger("lbweb.monitoring")


class HttpFarmStats:
    def __init__(self, socket: str | None = None):
        self.cli = MasterCLI(socket or settings.LBWEB_HAPROXY_SOCKET, timeout=2.0)
        self.previous: tuple[float, stats.Rows] | None = None
        self._generation: int | None = None
        self._service_farm: dict[str, int] = {}

    def _services(self) -> dict[str, int]:
        """HAProxy backend name -> farm id, read again when the configuration changes."""
        generation = ConfigGeneration.current()
        if generation != self._generation:
            from l7.models import HttpService

            farms = list(Farm.objects.filter(mode__in=L7_MODES).values_list("id", flat=True))
            mapping = {f"f{fid}-default": fid for fid in farms}
            for sid, fid in HttpService.objects.filter(farm_id__in=farms).values_list("id", "farm_id"):
                mapping[f"s{sid}"] = fid
            self._service_farm, self._generation = mapping, generation
        return self._service_farm

    def farm_ids(self) -> set[int]:
        """The HTTP farms as last read from the database."""
        return set(self._service_farm.values())

    def sample(self, monotonic: float) -> tuple[dict[int, dict], dict[int, str]]:
        """Each HTTP farm's entry, and for those without one the reason (farm id -> error)."""
        services = self._services()
        if not services:
            self.previous = None
            return {}, {}
        try:
            rows = stats.index(self.cli.stats())
        except (EngineError, KeyError) as exc:  # not running, or rows without their names
            log.debug("HAProxy statistics unavailable: %s", exc)
            self.previous = None
            return {}, dict.fromkeys(self.farm_ids(), f"HAProxy's statistics unavailable: {exc}")
        seconds, before = (monotonic - self.previous[0], self.previous[1]) if self.previous else (0.0, {})
        self.previous = (monotonic, rows)
        return stats.farm_entries(rows, before, seconds, services)
