"""The scale part of bench/control_plane.py: at each farm count, a full apply beside the kernel's own
limit, single-backend changes, and a burst of writes from several API clients.

Every farm here is written through farms.services or the REST API (validated, audited, one
apply request per write after commit) and applied by the real worker in the LB namespace.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time

from bench.cp_kernel import Watcher, kernel_limit, shares_match
from bench.cp_util import Api, TreeMemory, ms, next_weight, progress, ratio, summary, wait_until

SCALE_PREFIX = "s"  # scale farms are s00000, s00001, ...
BACKEND_NET = "198.19"  # backends of the scale farms: 198.19.0.0/16, inside 198.18.0.0/15, never routed
BACKEND_ADDRESSES = 250 * 250


def scale_name(i: int) -> str:
    return f"{SCALE_PREFIX}{i:05d}"


def scale_vip(i: int) -> str:
    """VIPs in 198.18.128.0/17 (up to 32,000 farms; the lab uses 198.18.0-100.x only)."""
    return f"198.18.{128 + i // 250}.{1 + i % 250}"


def scale_backend(n: int) -> tuple[str, int]:
    """Backend ``n`` of all scale farms: a distinct (address, port) for each, addresses in 198.19.0.0/16."""
    a = n % BACKEND_ADDRESSES
    return f"{BACKEND_NET}.{a // 250}.{1 + a % 250}", 80 + n // BACKEND_ADDRESSES


def max_farms(per_farm: int) -> int:
    return min(128 * 250, 1000 * BACKEND_ADDRESSES // max(per_farm, 1))


# -- the worker's full apply ---------------------------------------------------------------


def create_scale_farms(count: int, per_farm: int, marks: dict, committed: threading.Event) -> None:
    """``count`` farms of ``per_farm`` backends (scheduler ``weight``, weights 1..per_farm) in one commit.

    Farm 0 and its backends go through farms.services (validated, audited, one generation bump and one
    apply request per write); the others are written with bulk inserts of the rows those services write
    for the same values (the farm and backend rows, one audit event per farm and per backend, the
    farms' configuration generation from one bump), checked against farm 0's rows field by field.
    Through the services alone 10,000 farms took ~15 min to write (~8 ms per call); the rows the worker
    then reads are the same either way, and what is measured starts at the COMMIT.
    """
    from django.db import transaction

    from farms import services

    def on_commit() -> None:  # registered first, so it runs first after the COMMIT
        marks["committed"] = time.monotonic()
        committed.set()

    marks["started"] = time.monotonic()
    with transaction.atomic():
        transaction.on_commit(on_commit)
        farm = services.farm_create(name=scale_name(0), vip=scale_vip(0), **FARM_VALUES)
        for j in range(per_farm):
            address, port = scale_backend(j)
            services.backend_create(farm=farm, address=address, port=port, weight=1 + j)
        bulk_scale_farms(range(1, count), per_farm, reference=farm)
        marks["written"] = time.monotonic()
    marks["enqueued"] = time.monotonic()  # every on_commit callback (one apply request) has run


FARM_VALUES = {"protocol": "tcp", "ports": "80", "mode": "dnat", "scheduler": "weight"}


def bulk_scale_farms(indexes: range, per_farm: int, reference) -> None:
    """Scale farms ``indexes`` as bulk inserts (inside the caller's transaction): the rows farms.services
    writes for them, checked against ``reference`` (farm 0, written through the services)."""
    from farms import audit, services
    from farms.models import AuditEvent, Backend, Farm

    if not indexes:
        return
    generation = services.mark_farms_changed([reference.pk])  # one bump, one apply request on commit
    ref_backend = reference.backends.order_by("id").first()
    farms = []
    for i in indexes:
        farm = Farm(name=scale_name(i), vip=scale_vip(i), **FARM_VALUES)
        farm.config_generation = generation
        farms.append(farm)
    _same_row(farms[0], Farm.objects.get(pk=reference.pk), ("id", "name", "vip", "config_generation", "created",
                                                             "updated"))  # fmt: skip
    Farm.objects.bulk_create(farms, batch_size=2000)
    backends = []
    for farm, i in zip(farms, indexes, strict=True):
        for j in range(per_farm):
            address, port = scale_backend(i * per_farm + j)
            backends.append(Backend(farm=farm, address=address, port=port, weight=1 + j))
    _same_row(backends[0], ref_backend, ("id", "farm", "address", "port", "created", "updated"))
    Backend.objects.bulk_create(backends, batch_size=5000)
    events = []
    for obj in [*farms, *backends]:
        state = audit.state_of(obj) if isinstance(obj, Backend) else {
            **{name: getattr(obj, name) for name in services.FARM_FIELDS}, "policies": []}  # fmt: skip
        events.append(AuditEvent(actor_name="system", action="create", object_type=type(obj)._meta.model_name,
                                 object_id=obj.pk, object_name=str(obj), farm_ref=audit.farm_ref_of(obj),
                                 after=state))  # fmt: skip
    AuditEvent.objects.bulk_create(events, batch_size=5000)
    progress(f"  {len(farms):,} farms and {len(backends):,} backends inserted in bulk")


def _same_row(new, reference, differ: tuple[str, ...]) -> None:
    """The bulk row is what the services wrote for farm 0, except the fields that must differ."""
    for field in type(reference)._meta.concrete_fields:
        if field.name in differ:
            continue
        mine, theirs = getattr(new, field.attname), getattr(reference, field.attname)
        if mine != theirs:
            raise RuntimeError(f"bulk {type(new).__name__}.{field.name} = {mine!r}, the services wrote {theirs!r}")


def pending_farms() -> bool:
    from django.db.models import F

    from farms.models import Farm

    failed = Farm.objects.exclude(apply_error="").values_list("name", "apply_error").first()
    if failed:
        raise RuntimeError(f"farm {failed[0]} failed to apply: {failed[1][:500]}")
    return Farm.objects.filter(applied_generation__lt=F("config_generation")).exists()


def watch_applied(marks: dict, committed: threading.Event, stop: threading.Event) -> None:
    """In a thread of its own (the main thread is busy sending apply requests after the commit):
    the time when no farm is pending any more, polled from the database."""
    from django.db import connection

    try:
        while not committed.wait(0.05):
            if stop.is_set():
                return
        while pending_farms():
            if stop.is_set():
                return
            time.sleep(0.02)
        marks["applied"] = time.monotonic()
    except Exception as exc:  # handed to the main thread
        marks["error"] = exc
    finally:
        connection.close()


def queue_length(redis_client) -> int:
    """Apply requests in Celery's Redis queue, plus one taken but not yet acknowledged."""
    return redis_client.llen("dataplane") + redis_client.hlen("unacked")


def drain_queue(redis_client, since: float, cap: float) -> dict:
    """Wait until the worker has worked through the apply requests a big commit released.

    All but the first are no-ops (their generation is already applied) but each is a task. If
    they are not gone within ``cap`` seconds, the rate seen so far gives an estimate and the
    rest are purged (Celery's own purge), so that later measurements do not queue behind them.
    """
    started = time.monotonic()
    initial = left = queue_length(redis_client)
    while left and time.monotonic() - started < cap:
        time.sleep(0.05)
        left = queue_length(redis_client)
    now = time.monotonic()
    if not left:
        return {
            "queue_drained_s": round(now - since, 2),
            "queue_estimated": False,
            "queue_purged": 0,
            "queued_tasks": initial,
        }
    from lbweb.celery import app

    rate = (initial - left) / (now - started)  # no-op requests per second
    purged = app.control.purge()
    wait_until(lambda: queue_length(redis_client) == 0, 60, "the request in progress", 0.02)
    return {
        "queue_drained_s": round(now - since + left / rate, 1) if rate else None,
        "queue_estimated": True,
        "queue_rate_per_s": round(rate, 1),
        "queue_purged": purged,
        "queued_tasks": initial,
    }


def last_run_id() -> int:
    from farms.models import ApplyRun

    return ApplyRun.objects.order_by("-id").values_list("id", flat=True).first() or 0


def delete_scale_farms(redis_client, drain_cap: float) -> int:
    """Remove every scale farm through farms.services (one transaction) and wait for the worker."""
    from django.db import transaction

    from farms import services
    from farms.models import ApplyRun, ConfigGeneration, Farm

    farms = list(Farm.objects.filter(name__startswith=SCALE_PREFIX))
    if not farms:
        return 0
    with transaction.atomic():
        for farm in farms:
            services.farm_delete(farm=farm)
    target = ConfigGeneration.current()
    wait_until(lambda: ApplyRun.objects.filter(generation__gte=target).exists(), 3600, "the deletion applied", 0.1)
    failed = ApplyRun.objects.filter(generation__gte=target, ok=False).first()
    if failed:
        raise RuntimeError(f"deleting the scale farms failed: {failed.error[:500]}")
    drain_queue(redis_client, time.monotonic(), drain_cap)
    return len(farms)


def full_apply(count: int, per_farm: int, redis_client, drain_cap: float, worker_pid: int) -> dict:
    """Create ``count`` farms in one commit; the worker's time from that commit to all applied, and the
    memory its processes held meanwhile (``TreeMemory``)."""
    from farms.models import ApplyRun, Backend

    first_run = last_run_id()
    wall_offset = time.time() - time.monotonic()  # ApplyRun.started is wall-clock time
    marks: dict = {}
    committed, stop = threading.Event(), threading.Event()
    poller = threading.Thread(target=watch_applied, args=(marks, committed, stop), daemon=True)
    poller.start()
    memory = TreeMemory(worker_pid)
    try:
        with memory:
            create_scale_farms(count, per_farm, marks, committed)
            progress(f"  written in {marks['committed'] - marks['started']:.1f} s; waiting for the worker")
            poller.join(7200)
    finally:
        stop.set()
    if "error" in marks:
        raise marks["error"]
    if "applied" not in marks:
        raise RuntimeError(f"{count} farms were not applied within 7200 s")
    # apply requests: farm 0's service calls and the bulk rows' one bump (each asks, apply_queue lets one through)
    out = {"apply_requests": per_farm + 2 if count > 1 else per_farm + 1, "worker_memory": memory.figures()}
    out.update(drain_queue(redis_client, marks["committed"], drain_cap))
    runs = list(ApplyRun.objects.filter(id__gt=first_run).exclude(kind="noop").order_by("id"))
    if not runs or not all(run.ok for run in runs):
        raise RuntimeError(f"scale apply failed: {[(r.kind, r.error[:300]) for r in runs]}")
    main = max(runs, key=lambda run: run.farms_changed)
    worker_s = marks["applied"] - marks["committed"]
    out.update(
        {
            "backend_rows": Backend.objects.filter(farm__name__startswith=SCALE_PREFIX).count(),
            "create_s": round(marks["committed"] - marks["started"], 2),
            "commit_ms": ms(marks["committed"] - marks["written"]),
            "enqueue_s": round(marks["enqueued"] - marks["committed"], 2),
            "worker_apply_s": round(worker_s, 3),
            "worker_ms_per_farm": round(worker_s * 1000 / count, 3),
            "worker_runs": [
                {
                    "kind": r.kind,
                    "farms_changed": r.farms_changed,
                    "commands": r.commands,
                    "duration_ms": r.duration_ms,
                    "started_after_commit_ms": ms(r.started.timestamp() - wall_offset - marks["committed"]),
                }
                for r in runs
            ],
            "worker_run": {
                "kind": main.kind,
                "farms_changed": main.farms_changed,
                "commands": main.commands,
                "duration_s": round(main.duration_ms / 1000, 3),
                "writer": main.writer,
            },
        }
    )
    return out


def with_kernel_limit(apply: dict, count: int, netns: str, env: dict, path: str, repetitions: int) -> dict:
    """The kernel-limit baseline beside the worker's figure, and their ratio."""
    limit = kernel_limit(netns, env, path, repetitions)
    resync_after_reload()
    limit["ms_per_farm"] = round(limit["nft_load_s"] * 1000 / count, 3)
    apply["kernel_limit"] = limit
    apply["ratio_worker_to_kernel"] = ratio(apply["worker_apply_s"], limit["nft_load_s"])
    return apply


def resync_after_reload() -> None:
    """``nft -j -f`` rebuilt lbweb's table behind the worker's back: the same rules, but not the objects
    the worker wrote (new handles), which a reconcile may report as drift. Let it rewrite them before
    the next figures (and the final ``kernel --check``). A table whose objects read back the same (no
    anonymous sets renamed by the reload) is no drift: the reconcile then records no run, and its end
    is when the worker has nothing left to do."""
    from dataplane.tasks import reconcile
    from farms.models import ApplyRun
    from lbweb.celery import app

    before = last_run_id()
    reconcile.apply_async(kwargs={"reason": "bench: table reloaded"})
    done = ApplyRun.objects.filter(id__gt=before, reason__startswith="bench: table reloaded")
    time.sleep(0.5)

    def idle() -> bool:
        inspect = app.control.inspect(timeout=1)
        active = inspect.active()  # None: no answer, and the worker answers only between tasks (solo pool)
        busy = [*(active or {"": ["no answer"]}).values(), *(inspect.reserved() or {}).values()]
        return not any(busy) and app.connection().default_channel.client.llen("dataplane") == 0

    wait_until(lambda: done.exists() or idle(), 3600, "the reconcile after the reload", 0.1)


# -- single-backend changes ----------------------------------------------------------------


def weight_changes(api: Api, watcher: Watcher, backends: list[int], weights: list[int], count: int, gap: float):
    """``count`` PATCHes of one backend's weight each; (API ms, kernel ms) per change.

    ``gap``: seconds to wait after a change reached the kernel before sending the next.
    """
    api_ms, kernel_ms, via_read = [], [], 0
    for k in range(count):
        if gap:
            time.sleep(gap)
        i = k % len(backends)
        weights[i] = next_weight(k, weights[i])
        watcher.arm(weights)
        sent = time.monotonic()
        api.call("PATCH", f"backends/{backends[i]}/", 200, json={"weight": weights[i]})
        answered = time.monotonic()
        seen = watcher.seen_at()
        api_ms.append(ms(answered - sent))
        kernel_ms.append(ms(seen["t"] - sent))
        via_read += seen["via"] == "read"
    return {
        "api_ms": summary(api_ms),
        "kernel_ms": summary(kernel_ms),
        "detected_by_safety_read": via_read,
        "api_ms_values": api_ms,
        "kernel_ms_values": kernel_ms,
    }


def single_changes(api: Api, netns: str, count: int, gap: float, farm_count: int) -> dict:
    """One backend's weight of one scale farm, PATCHed through the REST API ``count`` times, each timed from
    the request to the new rule in the kernel; and the worker's ApplyRun of each."""
    from farms.models import ApplyRun, Backend, Farm

    name = scale_name(farm_count // 2)
    rows = list(Backend.objects.filter(farm__name=name).order_by("id").values_list("id", "weight"))
    backends, weights = [r[0] for r in rows], [r[1] for r in rows]
    watcher = Watcher(netns, name, Farm.objects.get(name=name).id)
    try:
        if not shares_match(watcher.initial, weights):
            raise RuntimeError(f"the watcher reads {watcher.initial}, expected the shares of {weights}")
        before = last_run_id()
        out = weight_changes(api, watcher, backends, weights, count, gap)
    finally:
        watcher.stop()
    time.sleep(gap)
    runs = list(ApplyRun.objects.filter(id__gt=before).exclude(kind="noop").order_by("id"))
    if not runs or not all(r.ok for r in runs):
        raise RuntimeError(f"a single change failed to apply: {[r.error[:300] for r in runs if not r.ok]}")
    out.update(
        {
            "farm": name,
            "apply_runs": len(runs),
            "apply_run_ms": summary([round(r.duration_ms, 2) for r in runs]),
            "apply_run_ms_values": [round(r.duration_ms, 2) for r in runs],
            "commands": sorted({r.commands for r in runs}),
            "farms_changed": sorted({r.farms_changed for r in runs}),
            "kinds": sorted({r.kind for r in runs}),
            "writers": sorted({r.writer for r in runs}),
        }
    )
    return out


# -- a burst of writes ---------------------------------------------------------------------


def burst(api: Api, writes: int, clients: int, farm_count: int) -> dict:
    """``writes`` PATCHes of backend weights, spread over the scale farms, sent as fast as ``clients``
    API clients can (each waits for its answer before its next write). Then: writes accepted per second,
    kernel transactions (ApplyRun rows that changed the kernel) per second, and the time from the last
    answer to every farm recorded applied (the worker records it once the kernel committed)."""
    from farms.models import ApplyRun, Backend

    ids = list(Backend.objects.filter(farm__name__startswith=SCALE_PREFIX).order_by("id").values_list("id", flat=True))
    per_farm = max(len(ids) // farm_count, 1)
    # write k goes to farm k (mod the farm count), to a backend not written before
    targets = [ids[(k % farm_count) * per_farm + (k // farm_count) % per_farm] for k in range(writes)]
    sessions = [api.clone() for _ in range(clients)]
    for s in sessions:  # connections open before the clock starts
        s.call("GET", f"backends/{targets[0]}/", 200)
    before = last_run_id()
    start = threading.Barrier(clients)
    wall_offset = time.time() - time.monotonic()  # ApplyRun.started is wall-clock time

    def client(c: int) -> list[tuple[float, float]]:
        times = []
        start.wait()
        for k in range(c, writes, clients):
            sent = time.monotonic()
            sessions[c].call("PATCH", f"backends/{targets[k]}/", 200, json={"weight": 101 + k % 100})
            times.append((sent, time.monotonic()))
        return times

    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        results = [t for f in [pool.submit(client, c) for c in range(clients)] for t in f.result()]
    first = min(sent for sent, _ in results)
    last = max(answered for _, answered in results)
    wait_until(lambda: not pending_farms(), 600, "the burst applied", interval=0.01)
    applied = time.monotonic()
    runs = list(ApplyRun.objects.filter(id__gt=before).order_by("id"))
    changed = [r for r in runs if r.kind != "noop"]
    if not all(r.ok for r in runs):
        raise RuntimeError(f"an apply of the burst failed: {[r.error[:300] for r in runs if not r.ok]}")
    return {
        "writes": writes,
        "clients": clients,
        "writes_per_s": round(writes / (last - first), 1),
        "write_api_ms": summary([ms(b - a) for a, b in results]),
        "transactions": len(changed),
        "noop_runs": len(runs) - len(changed),
        "transactions_per_s": round(len(changed) / (applied - first), 2),
        "writes_per_transaction": round(writes / len(changed), 1) if changed else None,
        "apply_run_ms": summary([round(r.duration_ms, 2) for r in changed]) if changed else None,
        "first_write_to_applied_s": round(applied - first, 3),
        "last_write_to_applied_ms": ms(applied - last),
        "last_write_ms": ms(last - first),
        "runs": [  # each ApplyRun: start (ms after the first write), duration (ms), kind, farms changed
            [ms(r.started.timestamp() - wall_offset - first), round(r.duration_ms, 1), r.kind, r.farms_changed]
            for r in runs
        ],
    }
