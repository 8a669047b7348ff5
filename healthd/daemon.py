"""healthd: one asyncio process probing every backend of every farm concurrently.

Each backend has its own probe loop (phases spread over the interval); a
failed or slow probe is confirmed at once by parallel probes (``rounds``). Rise
and fall turn probe results into transitions, which one writer records in
batches through ``farms.health_services`` (generation bump, apply), so a
burst of failures becomes one transaction and one apply. All database work
runs on one thread beside the event loop. The daemon starts from the health
recorded in the database, so a restart neither flaps nor forgets.

It runs as the user lbweb with CAP_NET_RAW alone (for the ICMP socket); ``command``
checks are handed to the prober (``prober.py``), which runs them as another user.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import random
import resource
import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import redis.asyncio
from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone

from farms.health_services import HealthTransition, health_record
from farms.models import ConfigGeneration
from lbweb import heartbeat

from .icmp import Pinger
from .own_network import OwnNetwork
from .passive import PassiveWatch
from .probes import ProbeResult, Target
from .rounds import probe_round
from .state import DOWN, BackendHealth
from .targets import load_targets, passive_backends

log = logging.getLogger("lbweb.healthd")
T = TypeVar("T")
# A failing round is not trusted if healthd's own network failed (or its loop stalled) this soon before it began.
SETTLE_SECONDS = 1.0
PASSIVE_SECONDS = 0.5  # how often HAProxy's passive verdicts are read, while some backend has passive health


@dataclass
class Stats:
    """What the heartbeat reports about the daemon's own work."""

    started_at: float = field(default_factory=time.time)
    checks: int = 0
    local_errors: int = 0
    last_local_error: str = ""
    last_local_error_at: float | None = None
    last_widespread_error_at: float = 0.0  # time.monotonic() of the last network trouble or stall
    transitions: int = 0


@dataclass
class ProbeLoop:
    target: Target
    state: BackendHealth
    task: asyncio.Task


def _raise_file_limit() -> None:
    """A thousand concurrent probes need more descriptors than the usual soft limit of 1024."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class HealthDaemon:
    """Probe loops per backend, a transition writer, a configuration watcher and a heartbeat."""

    def __init__(self, reload_seconds: float = 0.5, haproxy_socket: str | None = None):
        self.reload_seconds = reload_seconds
        self.passive = PassiveWatch(haproxy_socket or settings.LBWEB_HAPROXY_SOCKET)
        self.passive_ids: frozenset[int] = frozenset()
        self.loops: dict[int, ProbeLoop] = {}
        self.stats = Stats()
        self.pinger = Pinger()
        self.generation: int | None = None
        self._db = ThreadPoolExecutor(max_workers=1, thread_name_prefix="healthd-db")
        self._net = ThreadPoolExecutor(max_workers=1, thread_name_prefix="healthd-net")
        self.own_network = OwnNetwork()
        self._transitions: asyncio.Queue[HealthTransition] = asyncio.Queue()

    async def run(self, stop: asyncio.Event) -> None:
        """Check until ``stop`` is set, then record what is still queued and exit."""
        _raise_file_limit()
        while self.generation is None and not stop.is_set():
            try:
                await self.reload()
            except Exception:
                log.exception("cannot read the configuration; retrying")
                await asyncio.sleep(1)
        log.info("healthd: checking %d backend(s) at generation %s", len(self.loops), self.generation)
        services = [
            asyncio.create_task(self._watch_config()),
            asyncio.create_task(self._write_transitions()),
            asyncio.create_task(self._heartbeat()),
            asyncio.create_task(self._watch_passive()),
        ]
        await stop.wait()
        for task in [*services, *(loop.task for loop in self.loops.values())]:
            task.cancel()
        await asyncio.gather(*services, *(loop.task for loop in self.loops.values()), return_exceptions=True)
        await self._record_queued()
        self.pinger.close()
        self._db.shutdown()
        self._net.submit(self.own_network.close).result()
        self._net.shutdown()
        log.info("healthd: stopped")

    # -- configuration -----------------------------------------------------------------

    async def _in_db(self, func: Callable[..., T], *args: Any) -> T:
        def call() -> T:
            close_old_connections()
            return func(*args)

        return await asyncio.get_running_loop().run_in_executor(self._db, call)

    async def reload(self) -> None:
        """Start, stop or restart probe loops so they match the database; keep what did not change."""
        generation, targets, recorded = await self._in_db(load_targets)
        self.passive_ids = await self._in_db(passive_backends)
        carried: dict[int, str] = {}
        for backend_id, loop in list(self.loops.items()):
            if targets.get(backend_id) != loop.target:
                loop.task.cancel()
                del self.loops[backend_id]
                carried[backend_id] = loop.state.health
        for backend_id, target in targets.items():
            if backend_id not in self.loops:
                health = carried.get(backend_id, recorded[backend_id])
                state = BackendHealth(health, rise=target.check.rise, fall=target.check.fall)
                task = asyncio.create_task(self._probe_loop(target, state), name=f"probe-{backend_id}")
                self.loops[backend_id] = ProbeLoop(target, state, task)
        self.generation = generation

    async def _watch_config(self) -> None:
        while True:
            await asyncio.sleep(self.reload_seconds)
            try:
                if await self._in_db(ConfigGeneration.current) != self.generation:
                    await self.reload()
            except Exception:
                log.exception("cannot read the configuration; keeping the current checks")

    # -- HAProxy's passive health ----------------------------------------------------

    async def _watch_passive(self) -> None:
        while True:
            await asyncio.sleep(PASSIVE_SECONDS)
            if self.passive_ids:
                try:
                    downs = await asyncio.get_running_loop().run_in_executor(self._net, self.passive.downs)
                    self.passive_verdicts(downs)
                except Exception:  # a bug must not end the watch for good
                    log.exception("cannot read HAProxy's passive health")

    def passive_verdicts(self, downs: dict[int, str]) -> None:
        """Take HAProxy's passive verdicts (backend id -> reason) as healthd's own: each backend healthd checks and
        HAProxy took out goes down now, with HAProxy's reason; healthd's check brings it back (rise)."""
        for backend_id, reason in downs.items():
            loop = self.loops.get(backend_id)
            if loop is None or backend_id not in self.passive_ids:
                continue  # not checked by healthd (a farm without a check): HAProxy's own check brings it back
            if loop.state.fail_now() is not None:
                self.stats.transitions += 1
                self._transitions.put_nowait(HealthTransition(backend_id, DOWN, reason, timezone.now()))

    # -- probing ---------------------------------------------------------------------

    async def _probe_loop(self, target: Target, state: BackendHealth) -> None:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(random.uniform(0, target.check.interval))  # spread the probes over the interval
        while True:
            started = loop.time()
            confirmations = 0 if state.health == DOWN else target.check.fall - 1  # rise: one interval apart
            try:
                results = await probe_round(target, self.pinger, confirmations)
                await self._judge(target, state, results, started)  # the loop's clock is time.monotonic()
            except Exception as exc:  # a bug must not end this backend's checks for good
                log.exception("probe of backend %s failed", target.backend_id)
                self._local_error(f"healthd error: {exc!r}"[:200])
            await asyncio.sleep(max(0.0, started + target.check.interval - loop.time()))

    async def _judge(self, target: Target, state: BackendHealth, results: list[ProbeResult], started: float) -> None:
        """Count a round's results into the backend's health, unless the failure is healthd's own.

        ``started`` is the round's start (time.monotonic()). A round that would take the backend down
        is not trusted when healthd's network failed, or its loop stalled, during it or in the
        ``SETTLE_SECONDS`` before: its probes may have been sent into the outage and timed out after it.
        """
        self.stats.checks += len(results)
        for result in results:
            if result.local:  # healthd's own trouble says nothing about the backend
                self._local_error(result.reason, result.widespread)
        counted = [result for result in results if not result.local]
        if self._would_fall(state, [result.ok for result in counted]):
            trouble = await asyncio.get_running_loop().run_in_executor(
                self._net, self.own_network.trouble, target.address
            )
            if trouble:
                self._local_error(trouble, widespread=True)
                return
            if self.stats.last_widespread_error_at >= started - SETTLE_SECONDS:
                return  # probed while healthd's own network was failing: probe again next interval
        for result in counted:
            if (health := state.observe(result.ok)) is not None:
                self.stats.transitions += 1
                self._transitions.put_nowait(HealthTransition(target.backend_id, health, result.reason, timezone.now()))

    @staticmethod
    def _would_fall(state: BackendHealth, verdicts: list[bool]) -> bool:
        trial = dataclasses.replace(state)
        return any(trial.observe(ok) == DOWN for ok in verdicts)

    def _local_error(self, reason: str, widespread: bool = False) -> None:
        self.stats.local_errors += 1
        self.stats.last_local_error = reason
        self.stats.last_local_error_at = time.time()
        if widespread:
            self.stats.last_widespread_error_at = time.monotonic()

    # -- recording -------------------------------------------------------------------

    async def _write_transitions(self) -> None:
        while True:
            batch = [await self._transitions.get()]
            batch += self._drain()
            await self._record(batch)

    def _drain(self) -> list[HealthTransition]:
        batch = []
        while not self._transitions.empty():
            batch.append(self._transitions.get_nowait())
        return batch

    async def _record(self, batch: list[HealthTransition]) -> None:
        while True:
            try:
                await self._in_db(health_record, batch)
                return
            except Exception:
                log.exception("cannot record %d transition(s); retrying", len(batch))
                await asyncio.sleep(1)

    async def _record_queued(self) -> None:
        batch = self._drain()
        if batch:
            try:
                await self._in_db(health_record, batch)
            except Exception:
                log.exception("%d transition(s) lost at shutdown; the next start probes again", len(batch))

    # -- liveness --------------------------------------------------------------------

    def heartbeat_info(self, checks_per_second: float) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started_at": self.stats.started_at,
            "generation": self.generation,
            "backends": len(self.loops),
            "checks": self.stats.checks,
            "checks_per_second": round(checks_per_second, 1),
            "transitions": self.stats.transitions,
            "local_errors": self.stats.local_errors,
            "last_local_error": self.stats.last_local_error,
            "last_local_error_at": self.stats.last_local_error_at,
        }

    def _log_impairment(self, was_impaired: bool) -> bool:
        """Log when healthd starts and stops failing on its own (the heartbeat carries the details)."""
        impaired = heartbeat.impaired(self.stats.last_local_error_at, time.time())
        if impaired and not was_impaired:
            reason = self.stats.last_local_error
            log.warning("healthd cannot probe (%s): the backends concerned keep their health", reason)
        elif was_impaired and not impaired:
            log.warning("healthd probes again")
        return impaired

    async def _heartbeat(self) -> None:
        client = redis.asyncio.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)
        last_checks, last_time = self.stats.checks, time.monotonic()
        warned = impaired = False
        try:
            while True:
                impaired = self._log_impairment(impaired)
                now = time.monotonic()
                rate = (self.stats.checks - last_checks) / max(now - last_time, 1e-6)
                last_checks, last_time = self.stats.checks, now
                try:
                    info = heartbeat.encode(self.heartbeat_info(rate))
                    await client.set(heartbeat.KEY, info, ex=heartbeat.KEEP_SECONDS)
                    warned = False
                except redis.RedisError as exc:
                    if not warned:
                        log.warning("cannot write the heartbeat (%s); checks go on", exc)
                    warned = True
                await asyncio.sleep(heartbeat.BEAT_SECONDS)
        finally:
            await client.aclose()
