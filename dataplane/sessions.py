"""Worker-side services on live connection state: persistence sessions, cuts, least-connections weights."""

from __future__ import annotations

import logging
import time

import compiler
from compiler import fragments as f
from farms import session_snapshots as snapshots
from farms.choices import BackendHealthChoices, FarmSchedulerChoices, FarmStateChoices
from farms.models import Backend, BackendLoad, Farm, KernelUnit

from .kernel import conntrack
from .kernel.applier import ApplyError
from .kernel.sandbox import IsolatedKernel as Kernel

log = logging.getLogger("lbweb.sessions")
LEASTCONN_MAX_WEIGHT = 100


def least_connection_weights(counts: list[int]) -> list[int]:
    """Weights inversely related to live connections: the least busy backend gets the most new ones."""
    busiest = max(counts, default=0)
    if busiest == 0:
        return [1 for _ in counts]
    return [1 + round((LEASTCONN_MAX_WEIGHT - 1) * (busiest - c) / busiest) for c in counts]


def refresh_least_connection_weights() -> bool:
    """Count each least-connections farm's connections per backend; True if any weight changed."""
    changed = False
    farms = Farm.objects.filter(scheduler=FarmSchedulerChoices.LEASTCONN, state=FarmStateChoices.UP)
    for farm in farms.prefetch_related("backends__load"):
        backends = list(farm.backends.all())
        counts_by_address = conntrack.connections_by_backend(farm.id)
        counts = [counts_by_address.get(b.address, 0) for b in backends]
        for backend, count, weight in zip(backends, counts, least_connection_weights(counts), strict=True):
            load = getattr(backend, "load", None)
            if load is None or load.weight != weight or load.connections != count:
                changed |= load is None or load.weight != weight
                BackendLoad.objects.update_or_create(backend=backend, defaults={"connections": count, "weight": weight})
    return changed


def _farm_sets(farm_id: int) -> list[str]:
    unit = KernelUnit.objects.filter(key=compiler.farm_key(farm_id)).first()
    if unit is None:
        return []
    return [name for kind, name in compiler.UnitObjects.from_json(unit.objects_json).objects if kind == "set"]


def _backend_of_set(name: str) -> int | None:
    # persist-<farm>-<backend id>-<definition> / static-<farm>-<backend id>
    parts = name.rsplit("-", 2 if name.startswith("persist-") else 1)
    try:
        return int(parts[1])
    except (IndexError, ValueError):
        return None


def flush_learnt(farm_id: int, backend_id: int | None, client: str | None) -> int:
    """Forget learnt persistence entries (all of a farm, one backend's, or one client's)."""
    kernel = Kernel()
    names = [n for n in _farm_sets(farm_id) if n.startswith("persist-")]
    if backend_id is not None:
        names = [n for n in names if _backend_of_set(n) == backend_id]
    commands = []
    for name in names:
        if client is None:
            commands.append(f.flush("set", f.counter(name)))
        else:
            for elem in kernel.list_set(name) or []:
                key = elem["elem"]["val"] if isinstance(elem, dict) and "elem" in elem else elem
                if _key_text(key) == client:
                    commands.append(f.delete("element", f.element(name, [key])))
    if commands:
        kernel.apply(compiler.document(commands))
    return len(commands)


def _key_text(key) -> str:
    if isinstance(key, dict) and "concat" in key:
        addr, port = key["concat"]
        return f"[{addr}]:{port}" if ":" in str(addr) else f"{addr}:{port}"
    return str(key)


def live_sessions(farm_id: int) -> list[dict]:
    """Every persistence entry of a farm in the kernel: client, backend, seconds left (None: static)."""
    kernel = Kernel()
    out = []
    for name in _farm_sets(farm_id) + [n for n in _volatile_sets(farm_id)]:
        backend_id = _backend_of_set(name)
        for elem in kernel.list_set(name) or []:
            if isinstance(elem, dict) and "elem" in elem:
                key, expires = elem["elem"]["val"], elem["elem"].get("expires")
            else:
                key, expires = elem, None
            out.append(
                {
                    "client": _key_text(key),
                    "backend": backend_id,
                    "static": name.startswith("static-"),
                    "expires_in": expires,
                }
            )
    return sorted(out, key=lambda s: (s["backend"] or 0, s["client"]))


def _volatile_sets(farm_id: int) -> list[str]:
    unit = KernelUnit.objects.filter(key=compiler.farm_key(farm_id)).first()
    if unit is None:
        return []
    objects = compiler.UnitObjects.from_json(unit.objects_json)
    return [name for kind, name in objects.volatile if kind == "set" and name.startswith("static-")]


def publish_live(farm_id: int) -> None:
    """Read a farm's live entries from the kernel and publish them for the API (``farms.session_snapshots``)."""
    started = time.time()
    try:
        snapshots.publish(farm_id, live_sessions(farm_id), read_at=started)
    except ApplyError as exc:
        snapshots.publish(farm_id, None, exc.message, read_at=started)


def cut_backend(backend_id: int) -> int:
    """Delete the backend's conntrack entries and learnt sessions: its connections end now."""
    backend = Backend.objects.select_related("farm").filter(id=backend_id).first()
    if backend is None:
        return 0
    flush_learnt(backend.farm_id, backend.id, None)
    deleted = conntrack.cut(backend.farm_id, backend.address)
    log.info("cut backend %s: %d conntrack entries deleted", backend, deleted)
    return deleted


def cut_backend_connections(backend_id: int) -> int:
    """Delete the conntrack entries of a backend that went down (unless it came back meanwhile)."""
    backend = Backend.objects.filter(pk=backend_id).first()
    if backend is None or backend.health != BackendHealthChoices.DOWN:
        return 0
    deleted = conntrack.delete_backend_connections(backend.farm_id, backend.address, backend.port)
    log.info("backend %s of farm %s is down: %d connection(s) cut", backend, backend.farm_id, deleted)
    return deleted
