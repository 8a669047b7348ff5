"""The worker's side of HTTP farms: read the database, build the ``EngineSpec``, bring HAProxy to it.

Called by the same Celery tasks as the kernel's apply (``dataplane/tasks.py``), after it, so one change of either
kind goes through one queue, one ``ApplyRun`` history (``writer`` = ``haproxy``) and one status per farm. Web code
never imports this module (it talks to HAProxy's socket).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.db.models import F, Max
from django.utils import timezone

from compiler.haproxy.config import CONFIG_NAME
from compiler.haproxy.spec import EngineSpec
from farms import syslog_events
from farms.choices import L7_MODES, ApplyKindChoices
from farms.models import ApplyRun, Farm
from l7.specs import MAX_PORTS, l7_farms, snapshot

from ..isolation import ISOLATED, isolated_farms
from ..syslog.applier import access_socket
from .engine import Engine, EngineError, merge

log = logging.getLogger("lbweb.l7")
_ENGINE: Engine | None = None


def engine() -> Engine:
    global _ENGINE
    if _ENGINE is None:
        _ENGINE = Engine(
            settings.LBWEB_HAPROXY_CONF_DIR, settings.LBWEB_HAPROXY_SOCKET, access_log=str(access_socket())
        )
    return _ENGINE


def apply(reason: str = "change", force: bool = False) -> ApplyRun | None:
    """Bring HAProxy to the database; no ApplyRun when it already serves exactly this (its farms are marked
    applied all the same, :func:`_served`).

    A farm HAProxy refuses is isolated as the kernel's are (``dataplane.isolation.isolated_farms``): every other farm
    applies, the refused one keeps what the running worker serves of it and is failed with HAProxy's words, and
    it is tried again when it changes (or is retried)."""
    eng = engine()
    generation, wanted, farms = snapshot()
    held = {fid: message for fid, message in isolated_farms(http=True).items() if fid in farms}
    spec = merge(wanted, eng.recall(), held)
    if not spec.farms and not force and not (eng.running and eng.running.farms) and not _farms_on_disk(eng):
        return None  # no HTTP farm, none served: nothing to write (an L4-only appliance never sees HAProxy)
    notes = unserved(spec)
    if not force and eng.running == spec and eng.cli.alive():
        _served(generation, farms, notes, held)
        return None
    if spec.farms:
        ensure_nonlocal_bind()
    started = time.monotonic()
    error, kind, commands, refused = "", ApplyKindChoices.FULL, 0, {}
    try:
        outcome, refused = eng.apply_isolating(spec)
        if not outcome.engine_running:
            error = "HAProxy is not running: its configuration is written and loads when it starts."
        elif not outcome.reloaded:
            kind, commands = ApplyKindChoices.INCREMENTAL, len(outcome.runtime_commands)
        else:
            commands = 1
        digest = outcome.digest
    except EngineError as exc:
        error, digest = str(exc), ""
    return _record(generation, kind, reason, started, error, digest, commands, farms, notes, held, refused)


def unserved(spec: EngineSpec) -> dict[int, str]:
    """Farms HAProxy serves otherwise than they are stated, or not at all, and why (farm id -> the words shown):
    their status says so instead of "applied"."""
    notes = {}
    for farm in spec.farms:
        if farm.mode == "https" and not farm.certificates and farm.ports:
            notes[farm.id] = "An HTTPS farm needs a certificate: none is set, so it does not listen."
        elif farm.unbound_ports:
            notes[farm.id] = (
                f"HAProxy binds at most {MAX_PORTS} ports of an HTTP farm: its {farm.unbound_ports} are not bound "
                f"(the others serve). Give the farm at most {MAX_PORTS} ports."
            )
    return notes


def ensure_nonlocal_bind() -> None:
    """HAProxy binds each HTTP farm's VIP. On a cluster's backup node keepalived holds the VIPs elsewhere until a
    failover, so the worker lets sockets bind addresses the host does not hold (net.ipv4/ipv6.ip_nonlocal_bind),
    as it turns forwarding on: a reload never fails on a VIP that is away. Traffic still reaches HAProxy only
    where the VIP is."""
    if not settings.LBWEB_MANAGE_SYSCTL:
        return
    for path in ("/proc/sys/net/ipv4/ip_nonlocal_bind", "/proc/sys/net/ipv6/ip_nonlocal_bind"):
        try:
            if Path(path).read_text().strip() != "1":
                Path(path).write_text("1\n")
        except OSError as exc:
            log.warning("cannot allow binding VIPs held elsewhere (%s): %s", path, exc)


def _farms_on_disk(eng: Engine) -> bool:
    """Whether the configuration HAProxy loads still has farms (a worker started after the last was deleted)."""
    try:
        return "\nfrontend " in (eng.conf_dir / CONFIG_NAME).read_text()
    except OSError:
        return False


def _served(generation: int, farms: dict[int, int], notes: dict[int, str], held: dict[int, str]) -> None:
    """HAProxy already serves exactly the database's farms at ``generation``: each is marked as it is served.

    Why: an apply that wrote this very spec may have marked them at an older generation than the one they
    were read at (seen in CI: HAProxy's apply at the worker's start served a new farm with its backends,
    the farm stayed at applied_generation 0, and every later apply found nothing to write, so it stayed
    pending for good). A farm that failed before and is now served as it is stated (a bad change reverted to
    what HAProxy runs) is applied, its error gone (issue 39: it stayed pending or failed until another change)."""
    with transaction.atomic():
        _mark(generation, farms, notes, held, {})


def _mark(
    generation: int, farms: dict[int, int], notes: dict[int, str], held: dict[int, str], refused: dict[int, str]
) -> None:
    """Each farm's status at ``generation`` (rows saved later wait for their own apply): refused farms failed and
    isolated with HAProxy's words, farms served otherwise than stated failed with why (``notes``), farms isolated
    before (``held``) left as they are, every other one applied."""
    rows = Farm.objects.filter(id__in=list(farms), config_generation__lte=generation)
    failed = {fid: ISOLATED + message for fid, message in refused.items()}
    failed.update({fid: message for fid, message in notes.items() if fid not in failed and fid not in held})
    served = rows.exclude(id__in=[*failed, *held])
    served.filter(applied_generation__lt=F("config_generation")).update(applied_generation=generation)
    served.exclude(apply_error="").update(apply_error="")
    for farm_id, message in failed.items():
        rows.filter(id=farm_id).update(apply_error=message, failed_generation=generation, applied_generation=0)


def _record(generation, kind, reason, started, error, digest, commands, farms, notes, held, refused) -> ApplyRun:
    duration_ms = (time.monotonic() - started) * 1000
    lines = [f"farm {fid}: {message}" for fid, message in sorted(refused.items())]
    with transaction.atomic():
        # The kernel's apply counts generations up to the newest ApplyRun: never claim one it has not seen.
        handled = ApplyRun.objects.exclude(writer="haproxy").aggregate(g=Max("generation"))["g"] or 0
        run = ApplyRun.objects.create(
            generation=min(generation, handled),
            kind=kind,
            reason=f"haproxy: {reason}"[:40],
            started=timezone.now() - timezone.timedelta(milliseconds=duration_ms),
            duration_ms=duration_ms,
            ok=not error and not refused,
            error="\n".join([error, *lines] if error else lines),
            digest=digest[:32],
            farms_changed=len(farms),
            commands=commands,
            writer="haproxy",
        )
        # HAProxy not reached, or not running: no farm is known to be served, each says why.
        _mark(generation, farms, dict.fromkeys(farms, error) if error else notes, held, refused)
    log.info("%s", run)
    syslog_events.apply_run(run)
    return run


def cut_backend(backend_id: int, only_if_down: bool = False) -> int | None:
    """Maintenance "cut" of an HTTP farm's backend: end the requests HAProxy has in progress with it now (the
    apply that put it in maintenance ran first: the worker's queue is in order). None for a kernel farm's
    backend (conntrack's business, dataplane/sessions.py)."""
    from farms.models import Backend
    from l7.specs import farm_spec

    backend = Backend.objects.select_related("farm").filter(id=backend_id).first()
    if backend is None or backend.farm.mode not in L7_MODES:
        return None
    if only_if_down and backend.health != "down":
        return 0  # healthd's "cut connections": it came back meanwhile
    eng = engine()
    spec = farm_spec(l7_farms().get(pk=backend.farm_id))
    cut = 0
    for service in spec.services:
        for server in service.servers:
            if server.id != backend_id:
                continue
            try:
                row = eng.cli.servers().get((service.backend_name, server.name), {})
                eng.cli.worker(f"shutdown sessions server {service.backend_name}/{server.name}")
                cut += int(row.get("scur") or 0)
            except EngineError as exc:
                log.warning("cutting backend %s in HAProxy: %s", backend, exc)
    log.info("cut backend %s: %d HAProxy session(s) ended", backend, cut)
    return cut
