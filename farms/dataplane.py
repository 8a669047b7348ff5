"""Worker-side service: bring the kernel to what the database says.

Runs only in the Celery worker on queue ``dataplane`` (concurrency 1), the
one process allowed to change the kernel. A task carries at most a
generation number; everything else is read here from the database.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.db.models import F, Max
from django.utils import timezone

from .choices import ApplyKindChoices, BackendStateChoices, FarmStateChoices
from .models import ApplyRun, ConfigGeneration, Farm, KernelFarm
from .nft import compiler
from .nft.applier import ApplyError, Kernel, KernelState
from .nft.spec import BackendSpec, FarmSpec

log = logging.getLogger("lbweb.dataplane")


@dataclass
class Snapshot:
    generation: int
    specs: list[FarmSpec]

    def compiled(self) -> dict[int, compiler.FarmRuleset]:
        return {spec.id: compiler.compile_farm(spec) for spec in self.specs}


def farm_spec(farm: Farm) -> FarmSpec:
    """The compiler's view of one farm row (backends prefetched)."""
    return FarmSpec(
        id=farm.id,
        name=farm.name,
        vip=farm.vip,
        protocol=farm.protocol,
        ports=tuple(farm.port_ranges),
        mode=farm.mode,
        scheduler=farm.scheduler,
        enabled=farm.state == FarmStateChoices.UP,
        backends=tuple(
            BackendSpec(
                id=b.id,
                address=b.address,
                port=b.port,
                weight=b.weight,
                enabled=b.state == BackendStateChoices.ENABLED,
            )
            for b in farm.backends.all()
        ),
    )


def snapshot() -> Snapshot:
    """A consistent read of the whole configuration and its generation."""
    with transaction.atomic():
        generation = ConfigGeneration.current()
        farms = Farm.objects.prefetch_related("backends").order_by("id")
        return Snapshot(generation, [farm_spec(f) for f in farms])


def last_handled_generation() -> int:
    return ApplyRun.objects.aggregate(g=Max("generation"))["g"] or 0


def ensure_forwarding() -> None:
    """An LB that does not route balances nothing: turn forwarding on in this namespace."""
    if not settings.LBWEB_MANAGE_SYSCTL:
        return
    for path in (
        "/proc/sys/net/ipv4/ip_forward",
        "/proc/sys/net/ipv6/conf/all/forwarding",
    ):
        try:
            Path(path).write_text("1\n")
        except OSError as exc:
            log.warning("cannot enable forwarding (%s): %s", path, exc)


def kernel_matches(state: KernelState, compiled: dict[int, compiler.FarmRuleset]) -> bool:
    """True when the kernel's table is exactly what the compiled configuration describes."""
    if not state.table_present or state.base_digest != compiler.base_digest():
        return False
    expected_digests: dict[str, str] = {}
    expected_dispatch: dict[str, dict[str, str]] = {}
    expected_traffic: dict[int, str] = {}
    for ruleset in compiled.values():
        objects = ruleset.objects
        if not objects.chains:
            continue
        farm_chain = objects.chains[0]
        expected_digests[farm_chain] = objects.digest
        if not set(objects.chains) <= state.chains:
            return False
        for map_name, key in objects.dispatch:
            expected_dispatch.setdefault(map_name, {})[compiler.canonical(key)] = farm_chain
        if objects.traffic_mark is not None:
            expected_traffic[objects.traffic_mark] = compiler.traffic_chain_name_of(ruleset.name)
    if state.farm_digests != expected_digests:
        return False
    observed = {name: entries for name, entries in state.dispatch.items() if entries}
    return observed == expected_dispatch and state.traffic == expected_traffic


class Applier:
    """One apply or reconcile pass; records an ApplyRun and the per-farm outcome."""

    def __init__(self, kernel: Kernel | None = None):
        self.kernel = kernel or Kernel()

    # -- entry points ---------------------------------------------------------------

    def apply_pending(self, requested: int | None = None, reason: str = "change") -> ApplyRun | None:
        """Apply what changed since the last apply; a request already covered is skipped."""
        if requested is not None and requested <= last_handled_generation():
            return None
        self._coalesce()
        snap = snapshot()
        if requested is not None and snap.generation <= last_handled_generation():
            return None
        compiled = snap.compiled()
        if not self._base_present():
            return self._full(snap, compiled, reason=f"{reason}: table missing")
        old = {kf.farm_id: compiler.FarmObjects.from_json(kf.objects_json) for kf in KernelFarm.objects.all()}
        document, changed = compiler.incremental_document(old, compiled)
        if not changed:
            return self._record(
                snap,
                ApplyKindChoices.NOOP,
                reason,
                time.monotonic(),
                compiled,
                [],
                {},
                0,
            )
        started = time.monotonic()
        try:
            self.kernel.apply(document)
        except ApplyError as exc:
            log.warning("incremental apply failed (%s); doing a full resync", exc.message)
            return self._full(snap, compiled, reason=f"{reason}: incremental failed")
        self._store_kernel_farms(compiled, changed)
        return self._record(
            snap,
            ApplyKindChoices.INCREMENTAL,
            reason,
            started,
            compiled,
            changed,
            {},
            len(document["nftables"]),
        )

    def reconcile(self, reason: str = "reconcile") -> ApplyRun | None:
        """Compare the kernel with the database; rebuild in one transaction if they differ."""
        snap = snapshot()
        compiled = snap.compiled()
        if kernel_matches(self.kernel.observe(), compiled):
            self._store_kernel_farms(compiled, None)
            pending = Farm.objects.filter(applied_generation__lt=F("config_generation")).exists()
            if pending or snap.generation > last_handled_generation():
                return self._record(
                    snap,
                    ApplyKindChoices.NOOP,
                    reason,
                    time.monotonic(),
                    compiled,
                    [],
                    {},
                    0,
                )
            return None
        return self._full(snap, compiled, reason=f"{reason}: kernel differs")

    # -- internals -------------------------------------------------------------------

    def _coalesce(self) -> None:
        window = settings.LBWEB_APPLY_COALESCE_SECONDS
        last = ApplyRun.objects.order_by("-id").first()
        if last and window > 0:
            finished = last.started + timezone.timedelta(milliseconds=last.duration_ms)
            wait = window - (timezone.now() - finished).total_seconds()
            if wait > 0:
                time.sleep(min(wait, window))

    def _base_present(self) -> bool:
        return self.kernel.base_digest() == compiler.base_digest()

    def _full(self, snap: Snapshot, compiled: dict, reason: str) -> ApplyRun:
        started = time.monotonic()
        failed: dict[int, str] = {}
        document = compiler.full_document(snap.specs)
        try:
            self.kernel.apply(document)
        except ApplyError as exc:
            failed = self._isolate_failures(snap, exc)
            good = [s for s in snap.specs if s.id not in failed]
            document = compiler.full_document(good)
            try:
                self.kernel.apply(document)
            except ApplyError as exc2:  # even the base or the good farms fail: nothing changed
                failed = {s.id: exc2.message for s in snap.specs}
                return self._record(
                    snap,
                    ApplyKindChoices.FULL,
                    reason,
                    started,
                    compiled,
                    [],
                    failed,
                    0,
                    exc2.message,
                )
        ok_compiled = {fid: r for fid, r in compiled.items() if fid not in failed}
        KernelFarm.objects.all().delete()
        self._store_kernel_farms(ok_compiled, None)
        return self._record(
            snap,
            ApplyKindChoices.FULL,
            reason,
            started,
            compiled,
            sorted(compiled),
            failed,
            len(document["nftables"]),
        )

    def _isolate_failures(self, snap: Snapshot, exc: ApplyError) -> dict[int, str]:
        """Find which farms the kernel refuses, by checking each alone (dry run)."""
        failed = {}
        for spec in snap.specs:
            try:
                self.kernel.check(compiler.full_document([spec]))
            except ApplyError as farm_exc:
                failed[spec.id] = farm_exc.message
        return failed or {s.id: exc.message for s in snap.specs}

    def _store_kernel_farms(self, compiled: dict[int, compiler.FarmRuleset], changed: list[int] | None) -> None:
        ids = set(compiled) if changed is None else set(changed)
        rows = [
            KernelFarm(
                farm_id=fid,
                name=compiled[fid].name,
                digest=r.digest,
                objects_json=r.objects.to_json(),
            )
            for fid in sorted(ids)
            if (r := compiled.get(fid)) is not None
        ]
        with transaction.atomic():
            if changed is not None:
                KernelFarm.objects.filter(farm_id__in=[fid for fid in ids if fid not in compiled]).delete()
            else:
                KernelFarm.objects.exclude(farm_id__in=list(compiled)).delete()
            KernelFarm.objects.bulk_create(
                rows,
                update_conflicts=True,
                unique_fields=["farm_id"],
                update_fields=["name", "digest", "objects_json", "applied_at"],
                batch_size=500,
            )

    def _record(
        self,
        snap: Snapshot,
        kind: str,
        reason: str,
        started: float,
        compiled: dict,
        changed: list[int],
        failed: dict[int, str],
        commands: int,
        error: str = "",
    ) -> ApplyRun:
        duration_ms = (time.monotonic() - started) * 1000
        g = snap.generation
        with transaction.atomic():
            run = ApplyRun.objects.create(
                generation=g,
                kind=kind,
                reason=reason[:40],
                started=timezone.now() - timezone.timedelta(milliseconds=duration_ms),
                duration_ms=duration_ms,
                ok=not failed and not error,
                error=error or "\n".join(f"farm {fid}: {msg}" for fid, msg in sorted(failed.items())),
                digest=compiler.digest_of(sorted((fid, r.digest) for fid, r in compiled.items())),
                farms_changed=len(changed),
                commands=commands,
            )
            pending = Farm.objects.filter(config_generation__lte=g, applied_generation__lt=F("config_generation"))
            pending.exclude(id__in=list(failed)).update(applied_generation=g, apply_error="")
            for fid, message in failed.items():
                Farm.objects.filter(id=fid, config_generation__lte=g).update(
                    apply_error=message, failed_generation=g, applied_generation=0
                )
        log.info("%s", run)
        return run
