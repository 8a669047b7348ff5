"""How a farm picks one backend for a new connection: a verdict map per scheduler (rr, weight, hash,
symhash, maglev, leastconn) and, for a NAT farm, the named maps the pick goes through.

A module of its own because the pick is where the kernel's costs hide (an anonymous map, a set found by
name, a rule validated against the whole table): each function's docstring says what its choice saves."""

from __future__ import annotations

from collections.abc import Callable

from compiler.types import Json

from . import fragments as f
from . import maglev
from .names import backend_chain_name
from .spec import BackendSpec, FarmSpec
from .units import Builder

HASH_SEED = 0x6C627765  # fixed, so every lbweb node hashes a flow to the same backend
WEIGHT_SPAN = (1 << 16) - 1  # a NAT farm's random pick, whatever its weights (see _spread_vmap)
SCHEDULE_SHARDS = 64  # schedules-<n> maps, each looked up in its schedule-<n> chain (see shared_pick_base)
SCHEDULE_STRIDE = 1 << 16  # farm n's slot of the 32-bit ct mark starts at n * SCHEDULE_STRIDE
SCHEDULE_SLOTS = 1 << 16  # farms 1..65535 have a slot (see shared_pick_base)
# The NAT schedulers whose pick's rule stays when weights change: it goes through two maps (see nat_scheduler).
STABLE_PICK_SCHEDULERS = ("weight", "leastconn", "maglev")


def l3_of(farm: FarmSpec) -> str:
    return "ip" if farm.family == 4 else "ip6"


def hash_expr(farm: FarmSpec, fields_: tuple[str, ...]) -> Json:
    return f.field_expr(l3_of(farm), fields_)


def _weighted_vmap(make_key: Callable[[int], Json], backends: tuple[BackendSpec, ...], target: Callable) -> Json:
    """Each backend owns an interval of [0, total weight) as wide as its weight."""
    elems, low = [], 0
    for b in backends:
        high = low + b.weight - 1
        elems.append([f.port_value(low, high), f.jump(target(b))])
        low = high + 1
    return f.vmap(make_key(low), {"set": elems})


def _spread_vmap(
    make_key: Callable[[int], Json], backends: tuple[BackendSpec, ...], target: Callable, base: int = 0
) -> Json:
    """A random pick over a fixed span, each backend owning a share as wide as its weight's share.

    The pick's modulus so stays the same when a weight changes (or when the worker derives new
    least-connection weights): only the scheduler map's elements change, and the farm's chain,
    whose rule would cost the kernel a validation of every jump of the table, stays as it is. The
    shares are exact to 1 in 65,535. Beyond that total weight, the modulus is the total itself.
    ``base``: where the farm's slot of its shared schedules-<n> map starts (see :func:`shared_pick_base`);
    the keys are offset by it, and ``make_key`` is handed the span and the base."""
    total = sum(b.weight for b in backends)
    if total > WEIGHT_SPAN:
        return _weighted_vmap(make_key, backends, target)
    elems, seen = [], 0
    for b in backends:
        low, high = seen * WEIGHT_SPAN // total, (seen + b.weight) * WEIGHT_SPAN // total - 1
        elems.append([f.port_value(base + low, base + high), f.jump(target(b))])
        seen += b.weight
    return f.vmap(make_key(WEIGHT_SPAN), {"set": elems})


def shared_pick_base(farm: FarmSpec, backends: tuple[BackendSpec, ...]) -> int | None:
    """Where a ``weight`` or ``leastconn`` farm's random pick starts in the shared ``schedules-<n>`` maps, or
    None when the farm keeps a scheduler map of its own.

    Why shared maps rather than one a farm: the kernel finds a set by name walking the table's list of sets,
    when it creates the set, adds its elements and binds it to a rule, so a bulk apply's cost grows
    with the square of the number of named sets (perf: ~35 % of all samples of a 10,000-farm apply
    in ``nft_set_lookup_global`` and ``nf_tables_newset``, with two per farm). The pick
    ``numgen random mod WEIGHT_SPAN offset <base>`` lands in the farm's own slot of the 32-bit ct mark,
    ``base = id * SCHEDULE_STRIDE``, and a shared interval map takes it to the backend's id: one named
    set per farm (its ``targets-<name>``, a verdict map: one shared verdict map would make the kernel
    walk all of its elements for every rule that looks it up, when it validates the table's jumps).
    A farm whose id is past the slots (65,535) or whose weights add up to more than the span keeps
    its own ``sched-<name>-id-w``: the same packets' path, at the cost of a set.

    The farm's chain jumps to a ``schedule-<n>`` chain (of the ``prerouting`` hook unit), whose one rule
    looks the map up, rather than looking it up itself: the kernel walks every element of a map when a
    rule in another chain binds it, and every binding when an element is added, so a lookup a farm
    made a 10,000-farm apply quadratic (114-123 s, perf: ``rb_next`` under ``nf_tables_bind_set`` and
    ``nft_add_set_elem``).
    And the map is one of ``SCHEDULE_SHARDS`` (``schedules-<id mod 64>``): the kernel walks the whole
    tree of an interval set at each commit that changed it (``nft_rbtree_commit``), which cost a weight
    change 17 ms against 9 ms with one map of 200,000 elements at 10,000 farms.

    The span is one less than the stride: the kernel keeps a range as a start element and an end
    element (the value after its last), so the farm's last range ends at ``base + WEIGHT_SPAN`` inside
    its own slot, no range of one farm touches another's, and every element of the map tells its farm
    by its key alone (:func:`schedule_slot`)."""
    if farm.scheduler not in ("weight", "leastconn") or not 0 < farm.id < SCHEDULE_SLOTS:
        return None
    if sum(b.weight for b in backends) > WEIGHT_SPAN:
        return None
    return farm.id * SCHEDULE_STRIDE


SHARDS = range(SCHEDULE_SHARDS)


def schedules_map_name(farm_id: int) -> str:
    """The shared map that holds farm ``farm_id``'s slot (see shared_pick_base)."""
    return f"schedules-{farm_id % SCHEDULE_SHARDS}"


def schedule_chain_name(farm_id: int) -> str:
    """The chain whose one rule looks :func:`schedules_map_name` up."""
    return f"schedule-{farm_id % SCHEDULE_SHARDS}"


def is_schedules_map(name: str) -> bool:
    return name.startswith("schedules-")


def schedule_slot(value: int) -> int:
    """The farm id whose slot of the ``schedules-<n>`` maps holds ``value`` (a start or an end element's key)."""
    return value // SCHEDULE_STRIDE


def maglev_fields(farm: FarmSpec) -> tuple[str, ...]:
    """What a maglev farm hashes: its hash fields, else the client's address and port (its address
    alone for protocol 'all'), so each connection of a client is placed on its own."""
    return farm.sched_param or (("srcip",) if farm.protocol == "all" else ("srcip", "srcport"))


def _maglev_vmap(farm: FarmSpec, backends: tuple[BackendSpec, ...], target: Callable) -> Json:
    """``jhash`` of the flow modulo the Maglev table's size, looked up in the table itself: slot -> backend.

    For a NAT farm the table goes into the farm's named scheduler map through the ct mark (see
    :func:`nat_scheduler`); a change refills that map in one transaction, and what the packets see
    changes only in the slots Maglev moved."""
    keys = [(f"{b.address} {b.port or ''}", b.weight) for b in backends]
    # Sized by every backend of the farm, not the active ones: a backend going down must not resize the
    # table (a resize moves nearly every flow); only adding backends past 40, 163 or 655 does.
    table = maglev.lookup_table(keys, maglev.table_size(len(farm.backends)))
    expr = hash_expr(farm, maglev_fields(farm))
    key = {"jhash": {"mod": len(table), "seed": HASH_SEED, "offset": 0, "expr": expr}}
    return f.vmap(key, {"set": [[slot, f.jump(target(backends[i]))] for slot, i in enumerate(table)]})


def scheduler_map(
    farm: FarmSpec,
    backends: tuple[BackendSpec, ...],
    target: Callable | None = None,
    *,
    spread: bool = False,
    base: int = 0,
) -> Json:
    """The verdict map that picks one backend for a new connection: it jumps to ``target(backend)``,
    the backend's chain unless told otherwise. ``spread``: a random pick over a span that does not
    depend on the weights (see :func:`_spread_vmap`), offset by ``base``."""
    target = target or (lambda b: backend_chain_name(farm, b.id))
    if farm.scheduler == "rr":  # weighted, as nftlb: each backend takes weight turns in a row
        return _weighted_vmap(lambda total: f.numgen("inc", total), backends, target)
    if farm.scheduler == "hash":
        expr = hash_expr(farm, farm.sched_param or ("srcip",))
        return _weighted_vmap(
            lambda total: {"jhash": {"mod": total, "seed": HASH_SEED, "offset": 0, "expr": expr}}, backends, target
        )
    if farm.scheduler == "symhash":
        return _weighted_vmap(lambda total: {"symhash": {"mod": total, "offset": 0}}, backends, target)
    if farm.scheduler == "maglev":
        return _maglev_vmap(farm, backends, target)
    # weight, and leastconn (whose weights the worker derives from live connection counts)
    if spread:
        return _spread_vmap(lambda span: f.numgen("random", span, base), backends, target, base)
    return _weighted_vmap(lambda total: f.numgen("random", total), backends, target)


def sched_map_name(farm: FarmSpec, interval: bool = False, ids: bool = False) -> str:
    """The NAT farm's scheduler map (the pick's value -> a backend's id, or a jump to its chain, see
    :func:`nat_scheduler`); its name says its flags (an interval map when a backend owns a range of the
    pick's values), so a change of kind makes a new map."""
    kind = "-id" if ids else ""  # a map of ids is another map than one of jumps: a new name
    return f"sched-{farm.name}{kind}-w" if interval else f"sched-{farm.name}{kind}"


def targets_map_name(farm: FarmSpec) -> str:
    """The NAT farm's verdict map: a backend's id -> a jump to its chain."""
    return f"targets-{farm.name}"


def nat_scheduler(
    b: Builder, farm: FarmSpec, chain: str, backends: tuple[BackendSpec, ...], target: Callable | None = None
):
    """The statements that pick one backend of a NAT farm for a new connection, through named maps.

    An anonymous map costs the kernel a walk of the whole transaction when it is bound to its rule
    (``__nft_set_trans_bind``), so a full apply of n farms, each with one, took time in n squared
    (961 s at 10,000 farms). A named map costs no such walk. libnftables 1.0.6 cannot declare (in
    JSON) a named map keyed by ``numgen``/``jhash``, whose type is a bare integer, so the pick goes
    through the ct mark, a 32-bit key of type ``mark``: ``ct mark set <numgen|jhash|symhash>``, then
    ``ct mark set ct mark map @sched-<name>-id`` (the pick's value -> the backend's id; for ``weight``
    and ``leastconn`` a shared ``@schedules-<n>``, where the pick lands in the farm's own slot, see
    :func:`shared_pick_base`), then ``ct mark vmap @targets-<name>`` (the id -> a jump to the backend's
    chain); every chain that map jumps to puts the farm's mark back first (see ``nat._restore_mark``),
    before anything reads it.

    Two maps, because adding an element that jumps makes the kernel validate every jump of the
    whole table (~80 ms at 10,000 farms): the scheduler map holds no verdict, so a weight change
    (or Maglev's new table after a backend went down) changes its elements alone (refills the farm's
    own map; replaces the farm's shares in the shared one), and ``targets-<name>`` changes element
    by element, only when a backend comes or goes. Only for the schedulers whose
    pick's rule does not follow the weights (``STABLE_PICK_SCHEDULERS``): for rr and the hashes a
    weight changes the modulus, so the rule is rewritten (and validated) anyway, and their farms keep
    one map, ``sched-<name>``, from the pick to the jump: the kernel finds a set by name walking
    the table's list of sets, so a second set per farm made a 10,000-farm load ~3 times slower
    (23 s -> 67 s of ``nft -j -f``)."""
    two_maps = farm.scheduler in STABLE_PICK_SCHEDULERS
    base = shared_pick_base(farm, backends) if two_maps else None
    verdict = scheduler_map(farm, backends, target, spread=True, base=base or 0)["vmap"]
    elements = verdict["data"]["set"]
    if two_maps:  # the pick's value -> the id of the backend it jumps to
        target = target or (lambda x: backend_chain_name(farm, x.id))
        ids = {target(x): x.id for x in backends}
        elements = [[key, ids[jump["jump"]["target"]]] for key, jump in elements]
    if base is not None:  # the farm's slot of the shared map, element by element (see shared_pick_base)
        name = schedules_map_name(farm.id)
        for key, backend_id in elements:
            b.element(name, key, backend_id)
    else:
        interval = any(isinstance(key, dict) for key, _value in elements)
        name = sched_map_name(farm, interval, ids=two_maps)
        data = "mark" if two_maps else "verdict"
        b.obj("map", f.named_map(name, "mark", data, ["interval"] if interval else None), volatile=True)
        b.creates.append(f.add("element", f.element(name, elements)))
    if not two_maps:
        return [f.set_ct_mark(verdict["key"]), f.vmap(f.ct("mark"), "@" + name)]
    targets = targets_map_name(farm)
    if base is not None:  # the pick, then the shared lookup in the schedule chain (see shared_pick_base)
        b.rule(chain, [f.set_ct_mark(verdict["key"]), f.jump(schedule_chain_name(farm.id))])
    b.obj("map", f.named_map(targets, "mark", "verdict"))
    for backend in sorted(backends, key=lambda x: x.id):
        b.element(targets, backend.id, f.jump(target(backend)))
    if base is not None:
        return [f.vmap(f.ct("mark"), "@" + targets)]
    return [
        f.set_ct_mark(verdict["key"]),
        f.set_ct_mark({"map": {"key": f.ct("mark"), "data": "@" + name}}),
        f.vmap(f.ct("mark"), "@" + targets),
    ]
