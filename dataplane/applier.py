"""Worker-side service: bring the kernel to what the database says.

Runs only in the Celery worker on queue ``dataplane`` (concurrency 1), the
one process allowed to change the kernel. A task carries at most ids; every
thing else is read here from the database.

The Applier decides what a run does (an incremental change, a rebuild of the table, a repair of
drifted units) and writes down its record (``ApplyRun``, each farm's outcome). What it holds:

- ``cache`` (``unit_cache.py``): compiled units and what the kernel holds, which must outlive one
  Applier to be of use (the worker keeps one a process: ``tasks.worker_cache``);
- ``changes`` (``batching.py``): how a change goes to the kernel, in one transaction or several, and
  how a unit the kernel refuses is found and isolated (``isolation.py``);
- ``read_back`` (``fingerprints.py``): the fingerprints of what was written, and the comparison.
"""

from __future__ import annotations

import functools
import gc
import logging
import time
from collections.abc import Callable

from django.conf import settings
from django.db import transaction
from django.db.models import F, Max
from django.utils import timezone

import compiler
import compiler.names
from compiler import carry
from compiler.units import combined_digest
from farms import syslog_events
from farms.choices import L7_MODES, ApplyKindChoices
from farms.models import ApplyRun, ConfigGeneration, Farm
from farms.specs import Snapshot, snapshot

from . import batching, fingerprints, isolation
from .batching import ChangeWriter
from .fingerprints import DriftReport, ReadBack
from .kernel import drift
from .kernel.interface import ApplyError, Interface
from .kernel.sandbox import IsolatedKernel
from .kernel.transcribe import Untranscribable
from .localise import localise
from .outcome import Outcome
from .unit_cache import UnitCache, hold

log = logging.getLogger("lbweb.dataplane")


def last_handled_generation() -> int:
    return ApplyRun.objects.aggregate(g=Max("generation"))["g"] or 0


def configuration_digest(compiled: dict[str, compiler.UnitRuleset]) -> str:
    """One digest of every unit's, recorded with each apply: the cache's units keep theirs up to date
    (``UnitMap``), so a single change does not hash 10,000 units (~6 ms at 10,000 farms, py-spy)."""
    return combined_digest(compiled)


def left_out(snap: Snapshot, good: list) -> set[int]:
    """The farms of ``snap`` a rebuild did not compile (failed here, isolated, refused)."""
    return {s.id for s in snap.specs} - {s.id for s in good}


def cyclic_gc_paused(function: Callable) -> Callable:
    """Run ``function`` with Python's cyclic garbage collector off. Compiling thousands of farms
    allocates millions of objects and no cycles worth collecting, and the collector would scan them
    all again and again: 2.3 times the compile time at 4,000 farms (``bench/compile.py``)."""

    @functools.wraps(function)
    def paused(*args, **kwargs):
        enabled = gc.isenabled()
        gc.disable()
        try:
            return function(*args, **kwargs)
        finally:
            if enabled:
                gc.enable()

    return paused


class Applier:
    """One apply or reconcile pass; records an ApplyRun and the per-farm outcome.

    ``kernel``: the kernel writer by default; ``cache``: a new, empty unit cache by default (it refills
    from the database), so a caller that makes an Applier per run passes the one it keeps."""

    def __init__(self, kernel: Interface | None = None, cache: UnitCache | None = None):
        self.kernel: Interface = kernel or IsolatedKernel()
        self.cache = cache if cache is not None else UnitCache()
        self.read_back = ReadBack(self.kernel, self.cache)
        self.changes = ChangeWriter(self.kernel, self.cache, self.read_back)

    # -- entry points ---------------------------------------------------------------

    @cyclic_gc_paused
    def apply_pending(self, requested: int | None = None, reason: str = "change") -> ApplyRun | None:
        """Apply what changed since the last apply; a request already covered is skipped."""
        if requested is not None and requested <= last_handled_generation():
            return None
        self._coalesce()
        generation, compiled, failures, isolated = self.cache.current()
        if requested is not None and generation <= last_handled_generation():
            return None
        return self._apply(generation, compiled, failures, set(isolated), reason)

    @cyclic_gc_paused
    def reconcile(self, reason: str = "reconcile") -> ApplyRun | None:
        """Compare the kernel with what lbweb wrote there, unit by unit, and repair the units that drifted.

        Reading the whole table back costs about a second at 10,000 farms, which would hold the
        worker's queue every 30 s. So when the kernel's ruleset generation has not moved since the
        worker last knew the kernel right (its own commit, or a comparison that matched), and no write
        came since, nothing is read. Otherwise lbweb's tables are read as netlink messages and each
        unit's objects compared with the fingerprint kept when it was written (``kernel/drift/``); only
        the units that differ are removed and written again, in one transaction that keeps their
        counters and dynamic sets (persistence) when these are as lbweb wrote them."""
        generation_id = self.kernel.generation_id()
        if self.cache.verified == (generation_id, ConfigGeneration.current()) and not isolation.pending_farms():
            log.info(
                "%s: kernel generation %d unchanged since it was verified; nothing to compare", reason, generation_id
            )
            return None
        expected = fingerprints.load_fingerprints()
        if drift.SKELETON not in expected and not self._take_baseline():
            return self._full(localise(snapshot()), reason=f"{reason}: kernel differs")
        generation, compiled, failures, isolated = self.cache.current()
        report = fingerprints.find_drift(self.cache.applied(), fingerprints.load_fingerprints(), self.kernel)
        if not report.present:
            return self._resync(f"{reason}: table missing")
        if report.units:
            log.warning("%s: the kernel differs from what lbweb wrote: %s", reason, report.summary())
            return self._repair(generation, compiled, failures, set(isolated), report, reason)
        if isolation.pending_farms() or failures or generation > last_handled_generation():
            return self._apply(generation, compiled, failures, set(isolated), reason)
        self.cache.verified = (generation_id, generation)
        log.info("%s: the kernel is as lbweb wrote it", reason)
        return None

    def _take_baseline(self) -> bool:
        """A table written before lbweb kept fingerprints: compared the old way (digests, names), and
        when it matches, what it holds now becomes the reference."""
        snap = localise(snapshot())
        compiled = hold(snap.compiled(), isolation.isolated_farms(), self.cache.applied())
        try:
            state = fingerprints.observe(self.kernel)
        except ApplyError as exc:  # libnftables cannot even print what the table holds: rebuild it
            log.warning("the kernel's table cannot be read (%s)", exc.message)
            return False
        if not fingerprints.kernel_matches(state, compiled):
            return False
        self.read_back.table()
        return True

    # -- internals -------------------------------------------------------------------

    def _apply(
        self, generation: int, compiled: dict, failures: dict[int, str], held: set[int], reason: str
    ) -> ApplyRun:
        if self.kernel.base_digest() != compiler.base_digest():
            return self._resync(f"{reason}: table missing")
        changed = self.cache.changed(compiled)
        outcome = Outcome(changed=changed, failed=dict(failures), held=held)
        started = time.monotonic()
        if not changed:
            return self._record(generation, ApplyKindChoices.NOOP, reason, started, outcome, compiled)
        try:
            self.changes.write_isolating(compiled, changed, outcome)
        except ApplyError as exc:  # the kernel may hold the change or not: rebuild from what it holds
            log.warning("apply outcome unknown (%s); doing a full resync", exc.message)
            return self._resync(f"{reason}: outcome unknown")
        if not outcome.failed and not outcome.error:
            self.cache.verified = (self.kernel.generation_id(), generation)
        return self._record(generation, ApplyKindChoices.INCREMENTAL, reason, started, outcome, compiled)

    def _repair(
        self,
        generation: int,
        compiled: dict,
        failures: dict[int, str],
        held: set[int],
        report: DriftReport,
        reason: str,
    ) -> ApplyRun:
        """Write again the drifted units (and any unit with a pending change) from what the kernel holds of
        them; a full rebuild when that cannot be done unit by unit."""
        started = time.monotonic()
        # An isolated farm that drifted is not written again (nothing of it can be): it leaves the kernel.
        compiled = {
            k: u
            for k, u in compiled.items()
            if not (k in report.units and k.startswith("farm:") and isolation.farm_id(k) in held)
        }
        applied = self.cache.applied()
        rewrite = set(report.units) | set(compiler.changed_units(applied, compiled))
        units = sorted(k for k in rewrite if k != drift.SKELETON)
        expected = fingerprints.load_fingerprints()
        outcome = Outcome(changed=units, failed=dict(failures), held=held, drift=report.as_list())
        try:
            if batching.is_bulk(len(rewrite), len(compiled)):
                raise drift.CannotRepair(f"{len(rewrite)} units drifted")
            wanted = {k: compiled[k].objects for k in units if k in compiled}
            removals, kept = report.reading.removals(rewrite, wanted, expected)
            # DSR units own whole tables, re-made by their own creates (libnftables: lbweb does not transcribe them)
            dsr = [k for k in units if k in compiled and compiled[k].objects.tables]
            inet = [k for k in units if k in compiled and k not in dsr]
            commands = drift.without_kept(compiler.base_commands(), kept) if drift.SKELETON in rewrite else []
            for unit in compiler.ordered({k: compiled[k] for k in inet}):
                commands += drift.without_kept(unit.creates, kept)
            document = compiler.document(commands)
            outcome.writer = self.kernel.repair(removals, document, compiler.incremental_context(compiled, inet))
            if dsr:
                tables = compiler.document([c for k in dsr for c in compiled[k].creates])
                self.kernel.apply(tables)
                outcome.writer = "libnftables" if not removals and not commands else outcome.writer
                document = compiler.document(commands + tables["nftables"])
            outcome.commands = len(removals) + len(document["nftables"])
        except (drift.CannotRepair, Untranscribable, ApplyError) as exc:
            log.warning("drift not repaired unit by unit (%s); rebuilding the table", exc)
            return self._full(localise(snapshot()), reason=f"{reason}: kernel differs", found=outcome.drift)
        self.cache.store_applied(compiled, units)
        self.read_back.units(rewrite, document, all_maps=drift.SKELETON in rewrite)
        if not outcome.failed:
            self.cache.verified = (self.kernel.generation_id(), generation)
        return self._record(generation, ApplyKindChoices.REPAIR, f"{reason}: drift", started, outcome, compiled)

    def _resync(self, reason: str) -> ApplyRun:
        self.cache.reset()
        return self._full(localise(snapshot()), reason=reason)

    def _coalesce(self) -> None:
        window = settings.LBWEB_APPLY_COALESCE_SECONDS
        last = ApplyRun.objects.order_by("-id").first()
        if last and window > 0:
            finished = last.started + timezone.timedelta(milliseconds=last.duration_ms)
            wait = window - (timezone.now() - finished).total_seconds()
            if wait > 0:
                time.sleep(min(wait, window))

    def _full(self, snap: Snapshot, reason: str, found: list[dict] | None = None, build: bool = True) -> ApplyRun:
        """Rebuild lbweb's table in one transaction, carrying over what the kernel learnt (``carry.py``).
        Isolated farms stay out; farms the kernel refuses now are found, isolated and left out.
        With no table in the kernel and many farms, :meth:`_build` instead (unless ``build`` is false)."""
        self.cache.reset()
        started = time.monotonic()
        isolated = isolation.isolated_farms()
        outcome = Outcome(failed=dict(snap.failures), held=set(isolated), drift=found or [])
        stale = self.kernel.dsr_tables()
        good = [s for s in snap.specs if s.id not in outcome.failed and s.id not in isolated]
        listing, counters = self._learnt()
        # No listing also when libnftables cannot print the table: the skeleton's digest tells that the
        # table is really absent (a build deletes the table first, and writes the farms back in steps).
        if build and listing is None and len(good) > batching.BULK_UNITS and self.kernel.base_digest() is None:
            return self._build(snap, good, stale, reason, started, outcome)
        document, carried = carry.carry_over(
            compiler.full_document(good, snap.policies, stale_tables=stale), listing, counters
        )
        try:
            self.kernel.apply(document)
        except ApplyError as exc:
            by_id = {s.id: s for s in good}
            refused = isolation.bisect(
                list(by_id),
                lambda ids: self.kernel.check(compiler.full_document([by_id[i] for i in ids], snap.policies)),
                exc,
            )
            isolation.isolate(
                self.kernel, {compiler.farm_key(fid): message for fid, message in refused.items()}, outcome
            )
            good = [s for s in good if s.id not in refused]
            plain = compiler.full_document(good, snap.policies, stale_tables=stale)
            document, carried = carry.carry_over(plain, listing, counters)
            try:
                try:
                    self.kernel.apply(document)
                except ApplyError as exc2:
                    if refused:
                        raise
                    log.warning("the rebuild with the carried-over state was refused (%s); without it", exc2.message)
                    document, carried = plain, 0
                    self.kernel.apply(document)
            except ApplyError as exc2:  # the base or the policies fail: nothing changed
                outcome.failed = {s.id: exc2.message for s in snap.specs}
                outcome.error = exc2.message
                return self._record(snap.generation, ApplyKindChoices.FULL, reason, started, outcome, {})
        if carried:
            log.info("%s: %d learnt element(s) and %d counter(s) carried over", reason, carried, len(counters))
        units = compiler.compile_units(good, snap.policies)
        self.cache.fill(snap.generation, good, units, left_out(snap, good))
        outcome.changed = sorted(units)
        outcome.commands = len(document["nftables"])
        outcome.writer = "libnftables"
        self._table_written(outcome, snap.generation)
        self.cache.store_applied(units, None)
        return self._record(snap.generation, ApplyKindChoices.FULL, reason, started, outcome, units)

    def _build(
        self, snap: Snapshot, good: list, stale: list[tuple[str, str]], reason: str, started: float, outcome: Outcome
    ) -> ApplyRun:
        """:meth:`_full` when the kernel has no table of lbweb's (boot, or someone deleted it) and there
        are many farms: with nothing to replace at once and nothing learnt to carry over, the skeleton
        goes in alone and the units follow as a bulk change does, in transactions of whole units
        (``ChangeWriter``), so the worker never holds the whole table in libnftables (~3.2 GB for
        10,000 farms of 10 backends). A farm the kernel refuses is isolated as in any change."""
        try:
            self.kernel.apply(compiler.full_document([], [], stale_tables=stale))
        except ApplyError as exc:  # the skeleton fails: nothing changed
            outcome.failed = {s.id: exc.message for s in snap.specs}
            outcome.error = exc.message
            return self._record(snap.generation, ApplyKindChoices.FULL, reason, started, outcome, {})
        self.cache.store_applied({}, None)  # none of lbweb's units is in the kernel now
        units = compiler.compile_units(good, snap.policies)
        self.cache.fill(snap.generation, good, units, left_out(snap, good))
        outcome.changed = sorted(units)
        try:
            self.changes.write_isolating(units, outcome.changed, outcome, fingerprint=False)
        except ApplyError as exc:  # part of the table is written, or not: rebuild from what the kernel holds
            log.warning("the build's outcome is unknown (%s); rebuilding the table", exc.message)
            return self._full(localise(snapshot()), reason=f"{reason}: outcome unknown", build=False)
        self._table_written(outcome, snap.generation)
        return self._record(snap.generation, ApplyKindChoices.FULL, reason, started, outcome, units)

    def _table_written(self, outcome: Outcome, generation: int) -> None:
        """After a rebuild (:meth:`_full`, :meth:`_build`): the whole table is read back once the run is
        recorded (``ReadBack.after_run``), and the kernel is known to match unless a farm failed."""
        outcome.read_all, outcome.written_generation = True, self.kernel.generation_id()
        if not outcome.failed and not outcome.error:
            self.cache.verified = (outcome.written_generation, generation)

    def _learnt(self) -> tuple[list[dict] | None, dict]:
        """The table as the kernel holds it and its counters, for the rebuild to carry over (nothing
        when it cannot be read: a rebuild must still happen)."""
        try:
            return self.kernel.list_table(), self.kernel.read_counters()
        except (ApplyError, OSError) as exc:
            log.warning("the table's learnt state cannot be read (%s); the rebuild starts it afresh", exc)
            return None, {}

    def _record(self, g: int, kind: str, reason: str, started: float, outcome: Outcome, compiled: dict) -> ApplyRun:
        """The run and each farm's outcome, then the fingerprints left to read (``ReadBack.after_run``): the
        run's duration is from its start to the kernel holding the change, bookkeeping after it aside."""
        duration_ms = (time.monotonic() - started) * 1000
        failed = outcome.failed
        with transaction.atomic():
            run = ApplyRun.objects.create(
                generation=g,
                kind=kind,
                reason=reason[:40],
                started=timezone.now() - timezone.timedelta(milliseconds=duration_ms),
                duration_ms=duration_ms,
                ok=not failed and not outcome.error,
                error=outcome.error or "\n".join(f"farm {fid}: {msg}" for fid, msg in sorted(failed.items())),
                digest=configuration_digest(compiled),
                farms_changed=len([k for k in outcome.changed if not k.startswith(compiler.names.HOOK_PREFIX)]),
                commands=outcome.commands,
                writer=outcome.writer,
                drift=outcome.drift,
            )
            pending = Farm.objects.exclude(mode__in=L7_MODES).filter(
                config_generation__lte=g, applied_generation__lt=F("config_generation")
            )
            pending.exclude(id__in=[*failed, *outcome.held]).update(applied_generation=g, apply_error="")
            for fid, message in failed.items():
                Farm.objects.filter(id=fid, config_generation__lte=g).update(
                    apply_error=message, failed_generation=g, applied_generation=0
                )
        log.info("%s", run)
        syslog_events.apply_run(run)
        self.read_back.after_run(outcome)
        return run
