"""Pure compiler: farm and policy specs in, deterministic nftables JSON out.

Layout of the table lbweb owns (``table inet lbweb``):

* ``prerouting`` (nat, dstnat) looks every new connection up in a verdict map
  keyed by ``daddr . l4proto . dport``: single ports in the hash maps
  ``dispatch4``/``dispatch6``, port ranges (and protocol ``all``'s every
  port) in the interval maps ``dispatch4_ranges``/``dispatch6_ranges``, looked
  up after them; an entry is a ``goto`` to the farm's chain, so a packet found meets
  no further lookup: one hash lookup whatever the number of farms. ``guard``,
  ``stateless`` and ``output`` (from the ``local*`` maps, intra-connect farms)
  key their maps the same way and look up a ``*_ranges`` map only while some
  farm has a range.
* ``farm-<name>`` counts the connection, sets the farm's conntrack mark,
  applies access policies, limits, logging and helpers, sends a client bound
  by persistence back to its backend, and otherwise picks one with
  ``numgen``/``jhash``/``symhash`` through an anonymous verdict map.
* ``be-<name>-<id>`` counts, enforces the backend's connection limit,
  records persistence and DNATs to one backend; ``be-<name>-fallback``
  DNATs to the farm's fallback address while no backend is active, and a
  farm with neither rejects new connections (TCP reset, else ICMP port
  unreachable).
* ``guard`` (filter, before NAT) runs per-packet options: ``tcp_strict``
  and the reset rate limit, from ``guard4``/``guard6``.
* ``stateless`` (filter, raw priority) rewrites addresses of stateless UDP
  farms without conntrack (``notrack``), both ways.
* ``postrouting`` (nat, srcnat) sends connections whose ct mark is a SNAT
  farm's to ``snat-<name>`` (masquerade or a source pool) and nothing else.
* a ``local`` farm (nftlb's mode local: the service runs on the appliance)
  has the same ``farm-<name>`` and guard chains without any NAT: its chain
  ends in ``accept`` and the packet goes on to the local socket; its bytes
  are counted in ``local-in`` (filter input: client to service) and
  ``local-out`` (filter output: the replies), from ``traffic_dir`` too.

Every packet through a hook pays for that hook's chain, so no base chain is
always there: ``prerouting``, ``guard``, ``stateless``, ``output``, ``forward``
and ``postrouting`` are *hook units* (``hook:<chain>``, :func:`compile_hooks`)
that exist while some farm needs them, with only the rules those farms need (an
IPv4-only configuration gets no IPv6 ``guard`` rule). They are units like farms:
created, replaced and removed by the same incremental machinery, so the first
stateless farm adds the ``stateless`` hook and the last one removes it without a
rebuild. ``prerouting`` (a NAT chain) and the ``schedule-<n>`` chains (ct
expressions) come with the first NAT or local farm: either makes the kernel
track every packet of the namespace, which a table of stateless farms alone
does not need. The skeleton is the maps (an unused map costs no packet
anything) and ``base``, a chain no packet reaches whose rule carries the
skeleton's digest.
  NAT keeps the client's source port whenever conntrack knows no other
  connection on that tuple, and conntrack forgets a closed connection's tuple
  as soon as the client reuses its port (a SYN on a TIME_WAIT entry reopens
  it); the backend, which closed first, still holds that tuple in TIME_WAIT
  for 60 s, and answers another client's SYN on it (unrelated sequence number
  and timestamp) with an ACK of the old connection: a reset and a SYN
  retransmitted. So a SNAT farm whose scheduler is not a hash sends a TCP
  client port reused within ``REUSE_TTL`` back to the backend it went to
  (``reuse-<name>-<id>``: the reopened connection takes the same tuple again,
  with the same client's increasing sequence number and timestamp, which
  TIME_WAIT accepts), and ``pick-<name>-<id>`` sends a new one whose port
  number another client holds at the scheduler's pick (``ports-<name>-<id>``)
  to the next backend where it is free (``elsewhere-<name>-<id>``), so NAT
  keeps the port instead of choosing one at random that the client's next
  reuse would not get again.
* ``forward`` (filter) sees every forwarded packet, not only a connection's
  first, so it holds no chain per farm and no rule per backend: one rule per
  direction and family counts bytes and packets into the counter map
  ``traffic4_in``/``traffic6_in`` (``ct direction original``, keyed by ``ip
  daddr . ct mark``: the backend, as DNAT has already rewritten the
  destination) or ``traffic4_out``/``traffic6_out`` (``ct direction reply``,
  ``ip saddr . ct mark``: the backend, as the reply's source is rewritten only
  at postrouting), giving ``traffic-be-<name>-<id>-in`` (client to backend) or
  ``-out`` (backend to client) of the backend the connection went to
  (``-fallback-`` for the farm's fallback address): one lookup per packet
  whatever the number of farms and backends, and a farm's bytes each way are
  the sum of its backends' (the collector adds them up,
  :mod:`monitoring.farm_index`). Why the packet's address and not the reply
  tuple's (``ct reply ip saddr``, the same address for the farm's packets):
  two fields rather than three, the address read from the packet, cost a
  packet about a third less of this lookup's excess over the minimal ruleset
  (bench/RESULTS.md, "The per-backend accounting's price"). Why a counter
  map and not conntrack's own accounting: read truthfully (every destroy
  event, for the connections that end between two censuses) it cost short
  connections more than this lookup does (bench/RESULTS.md, "Conntrack
  accounting with its reader"). (Backends of
  one farm that share an address are counted together, on the lowest id:
  nft 1.0.6 cannot put ``ct proto-src`` in a key.) The ``farm-``/``be-``
  counters in the nat chains count new connections. (NAT farms only:
  stateless and DSR farms have no conntrack mark; offloaded flows skip the
  hook. A farm with ``count_bytes`` off has no counter and no element, and
  when no farm counts the hook is not there: the operator's way to pay
  nothing of this.)

DSR farms live in ``table netdev lbweb-<interface>`` (see :mod:`.dsr`).

Every unit (farm or policy) lists the kernel objects it owns in
:class:`UnitObjects`, so a change replaces one unit without touching the
others, and within it only the chains whose rules changed; each farm's
``digest-<name>`` chain (no packet enters it) holds one rule whose comment is
``lbweb:<digest>``, so the kernel itself tells which version of a farm it runs.
A NAT farm's random pick (``weight``, ``leastconn``) spans ``WEIGHT_SPAN``
whatever the weights, so a weight change rewrites no rule that the kernel
validates against the whole table (see :class:`UnitObjects`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection
from typing import Any

from compiler.ports import merge_ranges
from compiler.types import Json

from . import dsr, maglev
from . import fragments as f
from .limits import LOG_PREFIX_BYTES, truncate_utf8
from .logs import log_statements as _log
from .logs import rate as _rate
from .spec import HELPER_PROTOCOLS, BackendSpec, FarmSpec, PolicySpec
from .units import COMPILER_VERSION, DIGEST_PREFIX, UnitObjects, UnitRuleset, canonical, digest_of
from .units import Builder as _Builder

BASE_DIGEST_PREFIX = "lbweb-base:"
BASE_CHAIN = "base"  # a chain no packet reaches, whose one rule carries the skeleton's digest
PRIO_RAW = -300
PRIO_GUARD = -150
PRIO_DSTNAT = -100
PRIO_FILTER = 0
PRIO_SRCNAT = 100
TRAFFIC_DIR_MAP = "traffic_dir"  # ct mark . ct direction -> a local farm's in/out counter
LOCAL_IN, LOCAL_OUT = "local-in", "local-out"  # local farms' traffic counters: filter input and output hooks
HOOK_PREFIX = "hook:"
HASH_SEED = 0x6C627765  # fixed, so every lbweb node hashes a flow to the same backend
ROUTE_MARKS = "route_marks"
LOG_FORWARD_MAP = "log_forward_marks"  # ct mark -> the farm's chain that logs every forwarded packet
REUSE_TTL = 120  # conntrack's TCP TIME_WAIT (nf_conntrack_tcp_timeout_time_wait): how long a reopen can happen
REUSE_SET_SIZE = 262144  # client address . port pairs learnt per backend; when full, new ones are not learnt
REUSE_ALTERNATIVES = 8  # backends tried after the scheduler's pick when another client holds the port there
WEIGHT_SPAN = (1 << 16) - 1  # a NAT farm's random pick, whatever its weights (see _spread_vmap)
SCHEDULE_SHARDS = 64  # schedules-<n> maps, each looked up in its schedule-<n> chain (see shared_pick_base)
SCHEDULE_STRIDE = 1 << 16  # farm n's slot of the 32-bit ct mark starts at n * SCHEDULE_STRIDE
SCHEDULE_SLOTS = 1 << 16  # farms 1..65535 have a slot (see shared_pick_base)
# The NAT schedulers whose pick's rule stays when weights change: it goes through two maps (see nat_scheduler).
STABLE_PICK_SCHEDULERS = ("weight", "leastconn", "maglev")
NUMGEN_SCHEDULERS = ("rr", "weight", "leastconn")  # the others hash the flow: a reused port meets the same backend

FarmObjects = UnitObjects  # a farm's objects are a unit's objects
FarmRuleset = UnitRuleset
__all__ = ["canonical", "digest_of", "DIGEST_PREFIX", "UnitObjects", "UnitRuleset"]


def farm_chain_name(farm: FarmSpec) -> str:
    return farm_chain_name_of(farm.name)


def digest_chain_name(name: str) -> str:
    """The chain that carries a farm's digest, and nothing else (see ``Builder.finish``)."""
    return f"digest-{name}"


def guard_chain_name(farm: FarmSpec) -> str:
    """The chain every client packet of the farm passes (policies, tcp-strict, reset limit, persistence refresh)."""
    return f"guard-{farm.name}"


def farm_chain_name_of(name: str) -> str:
    return f"farm-{name}"


def backend_chain_name(farm: FarmSpec, backend_id: int | str) -> str:
    return f"be-{farm.name}-{backend_id}"


def fallback_chain_name(farm: FarmSpec) -> str:
    return backend_chain_name(farm, "fallback")


def traffic_counter_name(farm_name: str, direction: str) -> str:
    """Bytes of one farm in one direction: ``in`` (client to backend) or ``out`` (backend to client).
    A local farm's own counter; a NAT farm's is the sum of its backends' (:func:`backend_traffic_counter_name`)."""
    return f"traffic-{direction}-{farm_name}"


def backend_traffic_counter_name(farm_name: str, backend_id: int | str, direction: str | None = None) -> str:
    """Bytes of one backend (``fallback``: the farm's fallback address): the kernel counts each
    ``direction`` on its own; without one, the name of their sum, which the collector adds up. The
    direction comes last, so no farm name (which may hold ``-``) makes two of these names alike."""
    name = f"traffic-be-{farm_name}-{backend_id}"
    return f"{name}-{direction}" if direction else name


# A counter's direction -> the ct direction it counts and the packet's field that holds the backend's address there
TRAFFIC_DIRECTIONS = {"in": ("original", "daddr"), "out": ("reply", "saddr")}


def traffic_map(family: int, direction: str) -> str:
    """The backend's address . ct mark -> the backend's counter for ``direction`` (``in``: the packets of the
    connection's original direction, keyed by their destination; ``out``: the replies, by their source)."""
    return f"traffic{family}_{direction}"


def hook_key(chain: str) -> str:
    return f"{HOOK_PREFIX}{chain}"


def dispatch_map_name(family: int, ranged: bool, prefix: str = "dispatch") -> str:
    """A service map: exact keys (one port) in a hash map, port ranges in an interval map of their own.

    A hash lookup costs the same whatever the number of farms; an interval map keyed by a
    concatenation (the kernel's pipapo) costs in proportion to its elements. So a farm of single ports
    (the usual case) never meets an interval map, and only farms with ranges pay for one."""
    return f"{prefix}{family}_ranges" if ranged else f"{prefix}{family}"


def policy_set_name(policy: PolicySpec, family: int) -> str:
    return f"policy-{policy.name}-v{family}"


def persist_set_name(farm: FarmSpec, backend_id: int) -> str:
    """Dynamic persistence entries of one backend; the name changes when the persistence settings do."""
    definition = digest_of([farm.persistence, farm.persist_ttl, farm.family])[:6]
    return f"persist-{farm.name}-{backend_id}-{definition}"


def reuse_set_name(farm: FarmSpec, backend_id: int) -> str:
    """Client address . port pairs that went to one backend of a SNAT farm in the last ``REUSE_TTL`` seconds."""
    return f"reuse-{farm.name}-{backend_id}"


def ports_set_name(farm: FarmSpec, backend_id: int) -> str:
    """TCP source port numbers that went to one backend of a SNAT farm in the last ``REUSE_TTL`` seconds."""
    return f"ports-{farm.name}-{backend_id}"


def pick_chain_name(farm: FarmSpec, backend_id: int) -> str:
    return f"pick-{farm.name}-{backend_id}"


def elsewhere_chain_name(farm: FarmSpec, backend_id: int) -> str:
    return f"elsewhere-{farm.name}-{backend_id}"


def keeps_reused_ports(farm: FarmSpec) -> bool:
    """Whether a client port reused within ``REUSE_TTL`` goes back to its backend (see the module's docstring).

    Only TCP has TIME_WAIT; persistence already binds a client, and a hash scheduler sends the
    same client port to the same backend by itself.
    """
    return (
        farm.mode == "snat"
        and farm.protocol in ("tcp", "all")
        and not farm.persistence
        and farm.scheduler in NUMGEN_SCHEDULERS
    )


def static_set_name(farm: FarmSpec, backend_id: int) -> str:
    return f"static-{farm.name}-{backend_id}"


def farm_key(farm_id: int) -> str:
    return f"farm:{farm_id}"


def policy_key(policy_id: int) -> str:
    return f"policy:{policy_id}"


# -- expressions ------------------------------------------------------------------------


def _l3(farm: FarmSpec) -> str:
    return "ip" if farm.family == 4 else "ip6"


def _hash_expr(farm: FarmSpec, fields_: tuple[str, ...]) -> Json:
    return f.field_expr(_l3(farm), fields_)


def _persist_key_type(farm: FarmSpec) -> str | list[str]:
    addr = "ipv4_addr" if farm.family == 4 else "ipv6_addr"
    types = {"srcip": addr, "srcport": "inet_service", "srcmac": "ether_addr"}
    parts = [types[name] for name in farm.persistence]
    return parts[0] if len(parts) == 1 else parts


def _verdict(farm: FarmSpec) -> Json:
    if farm.limit_verdict == "reject":
        return {"reject": {"type": "tcp reset"}} if farm.protocol == "tcp" else {"reject": None}
    return {"drop": None}


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


_SHARDS = range(SCHEDULE_SHARDS)


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
    expr = _hash_expr(farm, maglev_fields(farm))
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
        expr = _hash_expr(farm, farm.sched_param or ("srcip",))
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
    b: _Builder, farm: FarmSpec, chain: str, backends: tuple[BackendSpec, ...], target: Callable | None = None
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
    chain); every chain that map jumps to puts the farm's mark back first (see :func:`_restore_mark`),
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


def _restore_mark(farm: FarmSpec, expr: list[Json]) -> list[Json]:
    """The first rule of a chain the scheduler map jumps to: the farm's conntrack mark comes back first."""
    return [f.set_ct_mark(farm.mark), *expr]


# -- farm compilation -------------------------------------------------------------------


ALL_PROTOCOLS = ("tcp", "udp", "sctp")  # nftlb's protocol "all": these three, never ICMP or the others
EVERY_PORT = ((0, 65535),)


def farm_protocols(farm: FarmSpec) -> tuple[str, ...]:
    return ALL_PROTOCOLS if farm.protocol == "all" else (farm.protocol,)


def _dispatch_keys(farm: FarmSpec, prefix: str = "dispatch") -> list[tuple[str, Any]]:
    """One key per protocol and port range; no ports (nftlb: empty virtual-ports) is every port.
    Single ports go to the exact map, ranges to the interval map (see :func:`dispatch_map_name`)."""
    return [
        (dispatch_map_name(farm.family, lo != hi, prefix), f.concat(farm.vip, proto, f.port_value(lo, hi)))
        for proto in farm_protocols(farm)
        for lo, hi in farm.ports or EVERY_PORT
    ]


def _ranged(map_name: str) -> bool:
    return map_name.endswith("_ranges")


def _service_element(b: _Builder, map_name: str, key: Any, chain: str) -> None:
    """A service map's entry: ``goto`` the farm's chain, so that the hook's later lookups are not
    evaluated for a packet already found (its verdict is the chain's, then the hook's policy)."""
    b.element(map_name, key, _goto(chain))


def _backend_chain(b: _Builder, farm: FarmSpec, backend: BackendSpec) -> None:
    name = backend_chain_name(farm, backend.id)
    b.obj("counter", f.counter(name))
    b.chain(name)
    first = True

    def rule(expr: list[Json]) -> None:
        nonlocal first
        b.rule(name, _restore_mark(farm, expr) if first else expr)
        first = False

    expr: list[Json] = [f.counter_ref(name)]
    if backend.est_connlimit:
        prefix = f"est-connlimit-{farm.name}-{backend.address} "
        refuse = _refuse(b, farm, f"bck{backend.id}", prefix, f"{farm_chain_name(farm)}-limit")
        rule([{"ct count": {"val": backend.est_connlimit, "inv": True}}, *refuse])
    packet_mark = farm.fwmark | backend.fwmark
    if packet_mark:  # the connection's first packet is routed right after this chain (see _route_marks)
        expr.append({"mangle": {"key": f.meta("mark"), "value": packet_mark}})
    if farm.persistence:
        expr.append(
            {
                "set": {
                    "op": "update",
                    "elem": _hash_expr(farm, farm.persistence),
                    "set": "@" + persist_set_name(farm, backend.id),
                }
            }
        )
    if keeps_reused_ports(farm):
        reuse, held = reuse_set_name(farm, backend.id), ports_set_name(farm, backend.id)
        for set_name, key_type, size in ((reuse, _reuse_key_type(farm), REUSE_SET_SIZE), (held, "inet_service", 65536)):
            b.obj("set", {**f.named_set(set_name, key_type), "flags": ["timeout"], "timeout": REUSE_TTL, "size": size})
        tcp = _tcp_only(farm)
        # A rule of its own: a full set stops the rule it is in (NFT_BREAK), and the DNAT must still happen.
        rule(
            [
                *tcp,
                {"set": {"op": "update", "elem": _reuse_key(farm), "set": "@" + reuse}},
                {"set": {"op": "update", "elem": f.payload("th", "sport"), "set": "@" + held}},
            ],
        )
    nat: Json = {"family": _l3(farm), "addr": backend.address}
    if backend.port is not None:
        expr.append(f.match(f.meta("l4proto"), farm.protocol))
        nat["port"] = backend.port
    expr.append({"dnat": nat})
    rule(expr)


def _tcp_only(farm: FarmSpec) -> list[Json]:
    """The match that keeps a SNAT port-learning rule to TCP (a farm of protocol ``all`` sees every protocol)."""
    return [] if farm.protocol == "tcp" else [f.match(f.meta("l4proto"), "tcp")]


def _reuse_key(farm: FarmSpec) -> Json:
    return f.concat(f.payload(_l3(farm), "saddr"), f.payload("th", "sport"))


def _reuse_key_type(farm: FarmSpec) -> list[str]:
    return ["ipv4_addr" if farm.family == 4 else "ipv6_addr", "inet_service"]


def _goto(chain: str) -> Json:
    return {"goto": {"target": chain}}


def _reuse_rules(b: _Builder, farm: FarmSpec, chain: str, backends: tuple[BackendSpec, ...]) -> list[Json]:
    """A TCP client port seen in the last ``REUSE_TTL`` seconds goes back to the backend it went to;
    a new one goes where the scheduler says unless another client holds that port number there:
    then to the next backend where it is free (NAT keeps the port instead of picking one at random,
    which the client's next reuse would not get again). Returns the scheduler's statements."""
    tcp = _tcp_only(farm)
    sport = f.payload("th", "sport")
    for backend in backends:
        lookup = f.match(_reuse_key(farm), "@" + reuse_set_name(farm, backend.id))
        b.rule(chain, [*tcp, lookup, f.jump(backend_chain_name(farm, backend.id))])
    if len(backends) == 1:
        return nat_scheduler(b, farm, chain, backends)
    for i, backend in enumerate(backends):
        pick, other = pick_chain_name(farm, backend.id), elsewhere_chain_name(farm, backend.id)
        b.chain(other)
        following = (backends[i + 1 :] + backends[:i])[:REUSE_ALTERNATIVES]
        for alternative in following:
            free = f.match(sport, "@" + ports_set_name(farm, alternative.id), "!=")
            b.rule(other, [free, _goto(backend_chain_name(farm, alternative.id))])
        b.rule(other, [_goto(backend_chain_name(farm, backend.id))])  # held everywhere: NAT picks another port
        b.chain(pick)
        b.rule(pick, _restore_mark(farm, [*tcp, f.match(sport, "@" + ports_set_name(farm, backend.id)), _goto(other)]))
        b.rule(pick, [_goto(backend_chain_name(farm, backend.id))])
    return nat_scheduler(b, farm, chain, backends, lambda x: pick_chain_name(farm, x.id))


def _refuse(b: _Builder, farm: FarmSpec, tag: str, prefix: str, counter: str) -> list[Json]:
    """What follows a limit's or a policy's match: logged as nftlb logs it (``prefix``, at the farm's log
    rate, unless ``log_drops`` is off), counted, and dropped or rejected. A rated log needs a chain of
    its own, so that the match (which may add to a meter) is evaluated once."""
    tail = [f.counter_ref(counter), _verdict(farm)]
    if not farm.log_drops:
        return tail
    log = {"log": {"prefix": truncate_utf8(prefix, LOG_PREFIX_BYTES)}}
    if not farm.log_rtlimit:
        return [log, *tail]
    chain = f"drop-{farm.name}-{tag}"
    b.chain(chain)
    b.rule(chain, [_rate(farm.log_rtlimit, farm.log_rtlimit_unit), log])
    b.rule(chain, tail)
    return [f.jump(chain)]


def _meter(b: _Builder, farm: FarmSpec, kind: str, definition: list, *, timeout: int | None) -> str:
    """A per-client set a limit keeps its state in; its name changes with its definition."""
    name = f"{kind}-{farm.name}-{digest_of(definition)[:6]}"
    addr = "ipv4_addr" if farm.family == 4 else "ipv6_addr"
    body: Json = {**f.named_set(name, addr), "size": 65535}  # the kernel makes it dynamic (fed by packets)
    if timeout:
        body |= {"flags": ["timeout"], "timeout": timeout}
    b.obj("set", body)
    return name


def _farm_guards(b: _Builder, farm: FarmSpec, chain: str) -> None:
    """Limits, logging and helpers: evaluated once, on a connection's first packet (policies are
    checked on every packet, in the farm's guard chain)."""
    l3 = _l3(farm)
    saddr = f.payload(l3, "saddr")
    if farm.new_rtlimit:
        definition = [farm.new_rtlimit, farm.new_rtlimit_unit, farm.new_rtlimit_burst, farm.limits_ttl]
        meter = _meter(b, farm, "rtlimit", definition, timeout=farm.limits_ttl)
        limit = _rate(farm.new_rtlimit, farm.new_rtlimit_unit, over=True, burst=farm.new_rtlimit_burst)
        over = {"set": {"op": "add", "elem": saddr, "set": "@" + meter, "stmt": [limit]}}
        b.rule(chain, [over, *_refuse(b, farm, "new", f"new-rtlimit-{farm.name} ", f"{chain}-limit")])
    if farm.est_connlimit:  # per client address, as nftlb (a set of connection counts keyed by source)
        meter = _meter(b, farm, "estconn", [farm.est_connlimit], timeout=None)
        count = {"ct count": {"val": farm.est_connlimit, "inv": True}}
        over = {"set": {"op": "add", "elem": saddr, "set": "@" + meter, "stmt": [count]}}
        b.rule(chain, [over, *_refuse(b, farm, "est", f"est-connlimit-{farm.name} ", f"{chain}-limit")])
    if farm.log:
        b.rule(chain, _log(farm, "IN"))
    if farm.helper:
        protocols = tuple(p for p in HELPER_PROTOCOLS[farm.helper] if farm.protocol in (p, "all"))
        for protocol in protocols:
            helper = f"helper-{farm.name}-{farm.helper}" + (f"-{protocol}" if len(protocols) > 1 else "")
            b.obj("ct helper", {**f.counter(helper), "type": farm.helper, "protocol": protocol, "l3proto": "inet"})
            match = [f.match(f.meta("l4proto"), protocol)] if len(protocols) > 1 else []
            b.rule(chain, [*match, {"ct helper": helper}])


def _guard_chain(b: _Builder, farm: FarmSpec) -> None:
    """Every packet from a client to the farm (not only a connection's first), before NAT: access
    policies (a denied source loses its established connections too, as in nftlb), tcp-strict, the
    per-client reset limit, and the refresh of the client's persistence entry (nftlb's ``update``:
    the TTL counts from the client's last packet, not from its first connection)."""
    refresh = farm.persistence and farm.sticky_backends
    if not (farm.policies or farm.tcp_strict or farm.rst_rtlimit or refresh):
        return
    guard = guard_chain_name(farm)
    l3 = _l3(farm)
    b.chain(guard)
    for policy in farm.policies:
        members = "@" + policy_set_name(policy, farm.family)
        op, word = ("==", "BL") if policy.type == "deny" else ("!=", "WL")
        refuse = _refuse(
            b, farm, f"policy-{policy.name}", f"policy-{word}-{policy.name}-{farm.name} ", f"farm-{farm.name}-policy"
        )
        b.rule(guard, [f.match(f.payload(l3, "saddr"), members, op), *refuse])
    if farm.tcp_strict or farm.rst_rtlimit:
        b.obj("counter", f.counter(guard))
    if farm.tcp_strict:
        refuse = _refuse(b, farm, "strict", f"tcp-strict-{farm.name} ", guard)
        b.rule(guard, [f.match(f.ct("state"), "invalid"), *refuse])
    if farm.rst_rtlimit:
        definition = [farm.rst_rtlimit, farm.rst_rtlimit_unit, farm.rst_rtlimit_burst, farm.limits_ttl]
        meter = _meter(b, farm, "rstlimit", definition, timeout=farm.limits_ttl)
        rst = f.match({"&": [f.payload("tcp", "flags"), "rst"]}, 0, "!=")
        limit = _rate(farm.rst_rtlimit, farm.rst_rtlimit_unit, over=True, burst=farm.rst_rtlimit_burst)
        over = {"set": {"op": "add", "elem": f.payload(l3, "saddr"), "set": "@" + meter, "stmt": [limit]}}
        refuse = _refuse(b, farm, "rst", f"rst-rtlimit-{farm.name} ", guard)
        b.rule(guard, [f.match(f.meta("l4proto"), "tcp"), rst, over, *refuse])
    if refresh:
        key = _hash_expr(farm, farm.persistence)
        for backend in farm.sticky_backends:
            learnt = "@" + persist_set_name(farm, backend.id)
            b.rule(guard, [f.match(key, learnt), {"set": {"op": "update", "elem": key, "set": learnt}}])
    for map_name, key in _dispatch_keys(farm, "guard"):
        _service_element(b, map_name, key, guard)


def _route_marks(b: _Builder, farm: FarmSpec) -> None:
    """nftlb's farm and backend marks, as the packet mark of every packet of the farm's connections,
    both ways, so that policy routing (``ip rule fwmark``) sees them as under nftlb and SKUDONET.
    A connection's first packet gets it in its backend's chain; later ones here, before routing,
    by the backend the connection went to (its reply source)."""
    if not (farm.fwmark or any(x.fwmark for x in farm.backends)):
        return
    chain = f"mark-{farm.name}"
    b.chain(chain)
    marks: dict[str, int] = {}
    for backend in sorted(farm.backends, key=lambda x: x.id):
        marks.setdefault(backend.address, farm.fwmark | backend.fwmark)
    if not any(x.fwmark for x in farm.backends):
        value: Any = farm.fwmark
    else:
        source = f.ct(f"{_l3(farm)} saddr", "reply")
        value = {"map": {"key": source, "data": {"set": [[a, m] for a, m in marks.items() if m]}}}
    b.rule(chain, [{"mangle": {"key": f.meta("mark"), "value": value}}])
    b.element(ROUTE_MARKS, farm.mark, f.jump(chain))


def _persistence_sets(b: _Builder, farm: FarmSpec) -> dict[int, list[str]]:
    """Per sticky backend: a set of learnt clients (with the TTL) and, if any, a set of static sessions."""
    key_type = _persist_key_type(farm)
    statics: dict[int, list] = {}
    for session in farm.sessions:
        statics.setdefault(session.backend_id, []).append(_session_key(session.client, farm))
    lookups: dict[int, list[str]] = {}
    for backend in farm.sticky_backends:
        names = []
        if backend.id in statics:
            name = static_set_name(farm, backend.id)
            b.obj("set", f.named_set(name, key_type), volatile=True)
            elems = sorted(statics[backend.id], key=canonical)
            b.creates.append(f.add("element", f.element(name, elems)))
            names.append(name)
        name = persist_set_name(farm, backend.id)
        b.obj("set", {**f.named_set(name, key_type), "flags": ["timeout"], "timeout": farm.persist_ttl})
        names.append(name)
        lookups[backend.id] = names
    return lookups


def _persistence_rules(b: _Builder, farm: FarmSpec, chain: str, lookups: dict[int, list[str]]) -> None:
    """Clients already bound to a backend go back to it: static sessions first (they win), then learnt ones."""
    key = _hash_expr(farm, farm.persistence)
    static = [(bid, n) for bid, names in lookups.items() for n in names if n.startswith("static-")]
    learnt = [(bid, n) for bid, names in lookups.items() for n in names if not n.startswith("static-")]
    for backend_id, name in static + learnt:
        b.rule(chain, [f.match(key, "@" + name), f.jump(backend_chain_name(farm, backend_id))])


def _session_key(client: tuple, farm: FarmSpec) -> Any:
    return client[0] if len(client) == 1 else f.concat(*client)


def _snat(b: _Builder, farm: FarmSpec) -> None:
    """Postrouting of a new connection: nftlb's ``output`` log, then the SNAT of a snat farm."""
    chain = f"snat-{farm.name}"
    b.chain(chain)
    if farm.log_output:
        b.rule(chain, _log(farm, "OUT"))
    if farm.mode != "snat":
        b.element("snat_farms", farm.mark, f.jump(chain))
        return
    ports = farm.source_ports
    for backend in sorted(farm.backends, key=lambda x: x.id):  # nftlb's backend source-addr comes first
        if backend.source_addr:
            own: list[Json] = [f.match(f.payload(_l3(farm), "daddr"), backend.address)]  # after DNAT: the backend
            if backend.port is not None:
                own += [f.match(f.meta("l4proto"), farm.protocol), f.match(f.payload("th", "dport"), backend.port)]
            b.rule(chain, [*own, {"snat": {"family": _l3(farm), "addr": backend.source_addr}}])
    expr: list[Json] = []
    if ports:
        expr.append(f.match(f.meta("l4proto"), {"set": ["tcp", "udp", "sctp"]}))
    if farm.source_addr:
        low, _, high = farm.source_addr.partition("-")
        nat: Json = {"family": _l3(farm), "addr": {"range": [low, high]} if high else low}
        if ports:
            nat["port"] = {"range": list(ports)}
        expr.append({"snat": nat})
    else:
        expr.append({"masquerade": {"port": {"range": list(ports)}} if ports else None})
    b.rule(chain, expr)
    b.element("snat_farms", farm.mark, f.jump(chain))


def _direction_counters(b: _Builder, farm: FarmSpec) -> None:
    """A local farm's byte counters by direction, reached through ``traffic_dir`` by the connection's ct mark
    (in the input and output hooks: a local farm has no backend)."""
    directions = {d: traffic_counter_name(farm.name, d) for d in ("in", "out")}
    for name in directions.values():
        b.obj("counter", f.counter(name))
    b.element(TRAFFIC_DIR_MAP, f.concat(farm.mark, "original"), directions["in"])
    b.element(TRAFFIC_DIR_MAP, f.concat(farm.mark, "reply"), directions["out"])


def _traffic(b: _Builder, farm: FarmSpec) -> None:
    """The farm's byte counters, by backend and direction, and their entries in the forward hook's counter map
    (see the module's docstring).

    Disabled backends are counted too: their established connections still carry traffic. A farm that does
    not count its bytes (``count_bytes`` off) has neither counters nor entries: its packets find no element.
    """
    destinations = [(x.id, x.address) for x in sorted(farm.backends, key=lambda x: x.id)]
    if farm.fallback is not None:
        destinations.append(("fallback", farm.fallback.address))
    seen = set()
    for destination, address in destinations if farm.count_bytes else ():
        for direction in TRAFFIC_DIRECTIONS:
            name = backend_traffic_counter_name(farm.name, destination, direction)
            b.obj("counter", f.counter(name))
            if address not in seen:
                b.element(traffic_map(farm.family, direction), f.concat(address, farm.mark), name)
        seen.add(address)
    if farm.log_forward:  # nftlb's "forward": every forwarded packet of the farm, both ways
        chain = f"logfwd-{farm.name}"
        b.chain(chain)
        b.rule(chain, _log(farm, "FWD"))
        b.element(LOG_FORWARD_MAP, farm.mark, f.jump(chain))


def _fallback_chain(b: _Builder, farm: FarmSpec) -> str:
    """Where new connections go while no backend is active (the farm's fallback address)."""
    name = fallback_chain_name(farm)
    fallback = farm.fallback
    b.obj("counter", f.counter(name))
    b.chain(name)
    nat: Json = {"family": _l3(farm), "addr": fallback.address}
    expr: list[Json] = [f.counter_ref(name)]
    if fallback.port is not None:
        expr.append(f.match(f.meta("l4proto"), farm.protocol))
        nat["port"] = fallback.port
    b.rule(name, [*expr, {"dnat": nat}])
    return name


def _nat_farm(b: _Builder, farm: FarmSpec) -> None:
    chain = farm_chain_name(farm)
    backends = farm.active_backends
    counters = [chain]
    if farm.policies:
        counters.append(f"{chain}-policy")
    if farm.new_rtlimit or farm.est_connlimit or any(x.est_connlimit for x in farm.backends):
        counters.append(f"{chain}-limit")
    for name in counters:
        b.obj("counter", f.counter(name))
    lookups = _persistence_sets(b, farm) if farm.persistence else {}
    for backend in farm.sticky_backends if farm.persistence else backends:
        _backend_chain(b, farm, backend)
    b.chain(chain)
    b.rule(chain, [f.counter_ref(chain), f.set_ct_mark(farm.mark)])
    _farm_guards(b, farm, chain)
    _persistence_rules(b, farm, chain, lookups)
    if backends and keeps_reused_ports(farm):
        tail = _reuse_rules(b, farm, chain, backends)
    elif backends:
        tail = nat_scheduler(b, farm, chain, backends)
    elif farm.fallback is not None:
        tail = [f.jump(_fallback_chain(b, farm))]
    else:  # no active backend and no fallback: refuse at once rather than let the VIP fall through to the host
        tail = [{"reject": {"type": "tcp reset"}} if farm.protocol == "tcp" else {"reject": None}]
    b.rule(chain, tail)
    for map_name, key in _dispatch_keys(farm):
        _service_element(b, map_name, key, chain)
    if farm.intra_connect:
        for map_name, key in _dispatch_keys(farm, "local"):
            _service_element(b, map_name, key, chain)
    if farm.mode == "snat" or farm.log_output:
        _snat(b, farm)
    _traffic(b, farm)
    _guard_chain(b, farm)
    _route_marks(b, farm)
    if farm.flow_offload:
        table_ft = f"ft-{farm.name}"
        b.obj(
            "flowtable",
            {**f.counter(table_ft), "hook": "ingress", "prio": PRIO_FILTER, "dev": list(farm.offload_devices)},
        )
        offload = f"offload-{farm.name}"
        b.chain(offload)
        b.rule(
            offload,
            [f.match(f.meta("l4proto"), {"set": ["tcp", "udp"]}), {"flow": {"op": "add", "flowtable": "@" + table_ft}}],
        )
        b.element("offload_marks", farm.mark, f.jump(offload))


def _local_farm(b: _Builder, farm: FarmSpec) -> None:
    """nftlb's mode ``local``: the VIP's service runs on the appliance itself.

    Read in nftlb's code (``run_farm_local``): the farm's filter chain applies tcp-strict and the per-client
    limits, its policies drop listed sources at ingress, and nothing is translated: the packet goes on to
    the local socket. So the farm's chain here is a NAT farm's without the NAT: count, conntrack mark (the
    farm's connections are counted as a NAT farm's are), the per-client limits and the ``input`` log, then
    ``accept``; its guard chain (policies, tcp-strict, reset limit) sees every packet, as for NAT farms.
    nftlb also writes an SNAT map for a local farm's backends, keyed by the mark the local service puts on
    its own connections to them; lbweb's local farms have no backends (the import reports them).
    Bytes are counted where such packets pass: ``input`` (client to service), ``output`` (the replies)."""
    chain = farm_chain_name(farm)
    counters = [chain]
    if farm.policies:
        counters.append(f"{chain}-policy")
    if farm.new_rtlimit or farm.est_connlimit:
        counters.append(f"{chain}-limit")
    for name in counters:
        b.obj("counter", f.counter(name))
    b.chain(chain)
    b.rule(chain, [f.counter_ref(chain), f.set_ct_mark(farm.mark)])
    _farm_guards(b, farm, chain)
    b.rule(chain, [{"accept": None}])
    for map_name, key in _dispatch_keys(farm):
        _service_element(b, map_name, key, chain)
    if farm.intra_connect:  # nftlb's output chains: the appliance's own connections to the VIP are limited too
        for map_name, key in _dispatch_keys(farm, "local"):
            _service_element(b, map_name, key, chain)
    if farm.count_bytes:
        _direction_counters(b, farm)
    _guard_chain(b, farm)


def stateless_replies_map(family: int, protocol: str, ranged: bool = False) -> str:
    """Where a stateless farm's backends' answers are recognised: by source address and port, per protocol;
    single ports in a hash map, ranges in an interval map (see :func:`dispatch_map_name`)."""
    name = f"stateless_replies{family}" if protocol == "udp" else f"stateless_{protocol}_replies{family}"
    return f"{name}_ranges" if ranged else name


def _stateless_reply_keys(farm: FarmSpec, backend: BackendSpec) -> list[tuple[str, Any]]:
    """The (map, key) pairs by which one backend's answers are recognised."""
    sources = [(backend.port, backend.port)] if backend.port is not None else list(farm.ports or EVERY_PORT)
    return [
        (stateless_replies_map(farm.family, farm.protocol, lo != hi), f.concat(backend.address, f.port_value(lo, hi)))
        for lo, hi in sources
    ]


def _stateless_farm(b: _Builder, farm: FarmSpec) -> None:
    """UDP or TCP rewritten both ways in the raw hook: no conntrack entry, no NAT table.

    No counter: nothing reads a stateless farm's packets (the collector measures the farms conntrack
    sees; the dashboard and the API say a stateless farm is not measured), and a datagram paid about 1 %
    for the farm's and its backend's named counters (bench/RESULTS.md). When no backend has a port of
    its own, the pick rewrites the destination from a map of the backends' addresses in the farm chain's
    own rule, as one would write it by hand: a datagram meets no backend chain. A backend with a port
    needs two rewrites from one pick, so then the pick ``goto``-s the backend's chain (the farm chain's
    last rule: a packet has nothing to come back to), which rewrites both."""
    chain = farm_chain_name(farm)
    l3, l4 = _l3(farm), farm.protocol  # udp or tcp: both rewritten both ways, as nftlb does
    backends = farm.active_backends
    portless = all(backend.port is None for backend in backends)
    for backend in backends:
        if not portless:
            name = backend_chain_name(farm, backend.id)
            b.chain(name)
            expr = [{"mangle": {"key": f.payload(l3, "daddr"), "value": backend.address}}]
            if backend.port is not None:
                expr.append({"mangle": {"key": f.payload(l4, "dport"), "value": backend.port}})
            b.rule(name, expr)
        reply = f"reply-{farm.name}-{backend.id}"
        b.chain(reply)
        # The appliance's own conversations with the backend (a health check, say) keep their addresses:
        # the FIB test is the rule's first match, so an answer to a client costs one rule, not two.
        local = f.match({"fib": {"result": "type", "flags": ["daddr"]}}, "local", "!=")
        back = [local, {"notrack": None}, {"mangle": {"key": f.payload(l3, "saddr"), "value": farm.vip}}]
        if backend.port is not None:
            back.append({"mangle": {"key": f.payload(l4, "sport"), "value": (farm.ports or EVERY_PORT)[0][0]}})
        b.rule(reply, back)
        for map_name, key in _stateless_reply_keys(farm, backend):
            _service_element(b, map_name, key, reply)
    b.chain(chain)
    if not backends:
        pick = [{"drop": None}]
    elif portless:
        addresses = scheduler_map(farm, backends, lambda backend: backend.address)
        pick = [{"mangle": {"key": f.payload(l3, "daddr"), "value": _data_map(addresses)}}]
    else:
        pick = [_goto_backends(scheduler_map(farm, backends))]
    if farm.log:  # nftlb's "input": every packet to the VIP (a stateless farm has no connections)
        b.rule(chain, [{"notrack": None}])
        b.rule(chain, _log(farm, "IN"))
        b.rule(chain, pick)
    else:  # one rule: every packet of the farm pays for one rule's evaluation, not two
        b.rule(chain, [{"notrack": None}, *pick])
    for map_name, key in _dispatch_keys(farm, "stateless"):
        _service_element(b, map_name, key, chain)


def _goto_backends(pick: Json) -> Json:
    """A scheduler's verdict map whose elements ``goto`` their backend's chain instead of jumping to it."""
    data = pick["vmap"]["data"]
    elements = [[key, _goto(verdict["jump"]["target"])] for key, verdict in data["set"]]
    return f.vmap(pick["vmap"]["key"], {**data, "set": elements})


def _data_map(pick: Json) -> Json:
    """A scheduler's verdict map made with each backend's address as its "target": the same keys, mapped to
    the addresses themselves (an expression whose value a ``mangle`` writes)."""
    data = pick["vmap"]["data"]
    elements = [[key, verdict["jump"]["target"]] for key, verdict in data["set"]]
    return {"map": {"key": pick["vmap"]["key"], "data": {**data, "set": elements}}}


def compile_farm(farm: FarmSpec) -> UnitRuleset:
    """Compile one farm; a disabled farm owns nothing in the kernel."""
    key = farm_key(farm.id)
    if not farm.enabled:
        return UnitRuleset(key, farm.name, UnitObjects(digest=digest_of(["off", COMPILER_VERSION])))
    if farm.mode == "dsr":
        return dsr.compile_farm(farm, key)
    b = _Builder()
    build = {"stlsdnat": _stateless_farm, "local": _local_farm}.get(farm.mode, _nat_farm)
    build(b, farm)
    return b.finish(key, farm.name, digest_chain_name(farm.name))


def compile_policy(policy: PolicySpec) -> UnitRuleset:
    """A policy is two interval sets (IPv4, IPv6) that farms match against; its elements change alone."""
    b = _Builder()
    for family, key_type in ((4, "ipv4_addr"), (6, "ipv6_addr")):
        name = policy_set_name(policy, family)
        b.obj("set", {**f.named_set(name, key_type), "flags": ["interval"]}, volatile=True)
        elements = [_prefix(e) for e in sorted(policy.elements_of(family))]
        if elements:
            b.creates.append(f.add("element", f.element(name, elements)))
    return b.finish(policy_key(policy.id), policy.name, None)


def _prefix(network: str) -> Any:
    import ipaddress

    net = ipaddress.ip_network(network, strict=False)
    if net.prefixlen == net.max_prefixlen:
        return str(net.network_address)
    return {"prefix": {"addr": str(net.network_address), "len": net.prefixlen}}


def compile_units(farms: list[FarmSpec], policies: list[PolicySpec]) -> dict[str, UnitRuleset]:
    units = compile_hooks(farms)
    units.update({policy_key(p.id): compile_policy(p) for p in policies})
    units.update({farm_key(x.id): compile_farm(x) for x in farms})
    return units


# -- the skeleton -----------------------------------------------------------------------


def _dispatch_rules(prefix: str, wanted: Collection[tuple[int, bool]] | None = None) -> list[list[Json]]:
    """The lookups of one family of service maps: the (family, ranged) pairs of ``wanted``, or all four.
    The exact map comes first; a packet it finds goes to its farm and meets no further lookup."""
    rules = []
    for family, proto in ((4, "ip"), (6, "ip6")):
        key = f.concat(f.payload(proto, "daddr"), f.meta("l4proto"), f.payload("th", "dport"))
        for ranged in (False, True):
            if wanted is None or (family, ranged) in wanted:
                rules.append([f.vmap(key, "@" + dispatch_map_name(family, ranged, prefix))])
    return rules


def _service_maps(name: Callable[[int, bool], str], key_types: tuple[str, ...]) -> list[Json]:
    """The exact (hash) and the ranges (interval) map of one kind, for both families."""
    return [
        f.add("map", f.named_map(name(family, ranged), [addr, *key_types], "verdict", ["interval"] if ranged else None))
        for family, addr in ((4, "ipv4_addr"), (6, "ipv6_addr"))
        for ranged in (False, True)
    ]


def _services(prefix: str) -> list[Json]:
    return _service_maps(
        lambda family, ranged: dispatch_map_name(family, ranged, prefix), ("inet_proto", "inet_service")
    )


def _base_parts() -> tuple[list[Json], list[Json], str]:
    cmds: list[Json] = [*_services("dispatch"), *_services("local"), *_services("guard"), *_services("stateless")]
    for protocol in ("udp", "tcp"):
        replies = _service_maps(
            lambda family, ranged, p=protocol: stateless_replies_map(family, p, ranged), ("inet_service",)
        )
        cmds += replies
    cmds += [
        f.add("map", f.named_map("snat_farms", "mark", "verdict")),
        f.add("map", f.named_map("offload_marks", "mark", "verdict")),
        f.add("map", f.named_map(TRAFFIC_DIR_MAP, ["mark", "ct_dir"], "counter")),
        *(
            f.add("map", f.named_map(traffic_map(family, direction), [address, "mark"], "counter"))
            for family, address in ((4, "ipv4_addr"), (6, "ipv6_addr"))
            for direction in TRAFFIC_DIRECTIONS
        ),
        f.add("map", f.named_map(LOG_FORWARD_MAP, "mark", "verdict")),
        f.add("map", f.named_map(ROUTE_MARKS, "mark", "verdict")),
        *(f.add("map", f.named_map(schedules_map_name(n), "mark", "mark", ["interval"])) for n in _SHARDS),
        f.add("chain", f.chain(BASE_CHAIN)),
    ]
    rules = [f.rule(BASE_CHAIN, [{"return": None}])]
    return cmds, rules, digest_of([COMPILER_VERSION, cmds, rules])


def farm_needs(farm: FarmSpec) -> frozenset[tuple]:
    """What of the hook units one farm needs: the worker keeps this beside each compiled farm, so
    the hooks follow a change without every farm's specification at hand."""
    if not farm.enabled or farm.mode not in ("snat", "dnat", "stlsdnat", "local"):
        return frozenset()
    ranges = {_ranged(name) for name, _key in _dispatch_keys(farm)}  # which of the service maps it uses
    if farm.mode == "stlsdnat":
        needs = {("stateless", farm.family, ranged) for ranged in ranges}
        needs |= {("stateless_port", lo, hi) for lo, hi in farm.ports or EVERY_PORT}
        for backend in farm.active_backends:
            for name, _key in _stateless_reply_keys(farm, backend):
                needs.add(("stateless_replies", farm.family, farm.protocol, _ranged(name)))
        return frozenset(needs)
    # Somewhere the forward hook's counter map sends the farm's packets, unless the farm does not count its bytes.
    counted = farm.count_bytes and (bool(farm.backends) or farm.fallback is not None)
    if farm.mode == "local":
        needs = {("local_traffic",)} if farm.count_bytes else set()
    else:
        needs = {("forward", farm.family, counted)}
    needs.add(("prerouting",))  # the NAT hook and the shared schedule chains (see _schedule_chains)
    if farm.policies or farm.tcp_strict or farm.rst_rtlimit or (farm.persistence and farm.sticky_backends):
        needs |= {("guard", farm.family, ranged) for ranged in ranges}  # the farm has a guard chain (see _guard_chain)
    if farm.intra_connect:
        needs |= {("output", farm.family, ranged) for ranged in ranges}
    if farm.flow_offload:
        needs.add(("offload",))
    if farm.mode == "snat":
        needs.add(("postrouting",))
    if farm.fwmark or any(x.fwmark for x in farm.backends):
        needs.add(("route_marks",))
    if farm.log_forward:
        needs.add(("log_forward",))
    return frozenset(needs)


def compile_hooks(farms: list[FarmSpec]) -> dict[str, UnitRuleset]:
    """The base chains the farms need, each a unit of its own (see the module's docstring).

    A hook no farm needs is not there at all: packets do not traverse it.
    """
    return hooks_for(set().union(*(farm_needs(x) for x in farms)))


def hooks_for(needs: Collection[tuple]) -> dict[str, UnitRuleset]:
    """The hook units for the union of the farms' :func:`farm_needs`."""
    hooks: dict[str, tuple[str, str, int, list[list[Json]]]] = {}
    if ("prerouting",) in needs:
        hooks["prerouting"] = ("nat", "prerouting", PRIO_DSTNAT, _dispatch_rules("dispatch"))
    guard = {(n[1], n[2]) for n in needs if n[0] == "guard"}
    if guard or ("route_marks",) in needs:
        rules = []
        if ("route_marks",) in needs:  # nftlb's marks: every packet of a marked farm, before routing
            rules.append([f.vmap(f.ct("mark"), "@" + ROUTE_MARKS)])  # first: the guard lookups end the hook
        rules += _dispatch_rules("guard", guard)
        hooks["guard"] = ("filter", "prerouting", PRIO_GUARD, rules)
    stateless = {(n[1], n[2]) for n in needs if n[0] == "stateless"}
    if stateless:
        ports = _stateless_ports([n[1:] for n in needs if n[0] == "stateless_port"])
        rules = [[*ports, *rule] for rule in _dispatch_rules("stateless", stateless)]
        replies = {n[1:] for n in needs if n[0] == "stateless_replies"}
        for family, proto in ((4, "ip"), (6, "ip6")):
            for protocol in ("udp", "tcp"):
                for ranged in (False, True):
                    if (family, protocol, ranged) in replies:
                        key = f.concat(f.payload(proto, "saddr"), f.payload(protocol, "sport"))
                        protocol_match = f.match(f.meta("l4proto"), protocol)
                        rules.append(
                            [protocol_match, f.vmap(key, "@" + stateless_replies_map(family, protocol, ranged))]
                        )
        hooks["stateless"] = ("filter", "prerouting", PRIO_RAW, rules)
    local = {(n[1], n[2]) for n in needs if n[0] == "output"}
    if local:
        hooks["output"] = ("nat", "output", PRIO_DSTNAT, _dispatch_rules("local", local))
    rules = []
    if ("log_forward",) in needs:
        rules.append([f.vmap(f.ct("mark"), "@" + LOG_FORWARD_MAP)])  # nftlb's "forward" log
    if ("offload",) in needs:
        rules.append([f.vmap(f.ct("mark"), "@offload_marks")])  # offloaded flows leave the hook from here on
    for family, proto in ((4, "ip"), (6, "ip6")):
        if ("forward", family, True) in needs:
            for direction, (ct_direction, field) in TRAFFIC_DIRECTIONS.items():
                key = f.concat(f.payload(proto, field), f.ct("mark"))
                count = f.counter_map_ref(key, traffic_map(family, direction))
                rules.append([f.match(f.ct("direction"), ct_direction), count])
    if rules:
        hooks["forward"] = ("filter", "forward", PRIO_FILTER, rules)
    if ("postrouting",) in needs:
        hooks["postrouting"] = ("nat", "postrouting", PRIO_SRCNAT, [[f.vmap(f.ct("mark"), "@snat_farms")]])
    if ("local_traffic",) in needs:  # local farms' bytes: each packet counted once, where it meets its socket
        count = f.counter_map_ref(f.concat(f.ct("mark"), f.ct("direction")), TRAFFIC_DIR_MAP)
        hooks[LOCAL_IN] = ("filter", "input", PRIO_FILTER, [[f.match(f.ct("direction"), "original"), count]])
        hooks[LOCAL_OUT] = ("filter", "output", PRIO_FILTER, [[f.match(f.ct("direction"), "reply"), count]])
    units = {}
    for chain, (type_, hook, prio, rules) in hooks.items():
        b = _Builder()
        b.creates.append(f.add("chain", f.base_chain(chain, type_=type_, hook=hook, prio=prio)))
        b.chains.append(chain)
        for expr in rules:
            b.rule(chain, expr)
        if chain == "stateless":
            _defragment(b)
        if chain == "prerouting":
            _schedule_chains(b)
        units[hook_key(chain)] = b.finish(hook_key(chain), chain, None)
    return units


STATELESS_PORTS_MAX = 256  # port ranges of stateless farms the raw hook tests before its lookup, at most


def _stateless_ports(ranges: Collection[tuple[int, int]]) -> list[Json]:
    """The match that comes before the ``stateless`` hook's dispatch lookups: the destination port is one
    a stateless farm serves. Every answer of a backend meets the dispatch lookup before the lookup that
    finds it, and its destination is the client's port: this one comparison (a set of ports when farms
    serve several) ends that miss sooner than the concatenated key's hash. No match at all when the farms
    serve every port, or more ranges than ``STATELESS_PORTS_MAX`` (an anonymous set the hook unit would
    carry whole into every change of it): the lookup alone then decides, as it always does in the end."""
    merged = merge_ranges(ranges)
    if merged == list(EVERY_PORT) or len(merged) > STATELESS_PORTS_MAX:
        return []
    values = [f.port_value(lo, hi) for lo, hi in merged]
    return [f.match(f.payload("th", "dport"), values[0] if len(values) == 1 else {"set": values})]


def _schedule_chains(b: _Builder) -> None:
    """The chains ``schedule-<n>`` whose one rule looks up ``schedules-<n>`` (see shared_pick_base), in the
    ``prerouting`` hook unit rather than the skeleton: a ct expression anywhere in the table makes the
    kernel track every packet of the namespace, and a table of stateless farms alone needs none. Every
    farm that jumps to one is a NAT or local farm, which needs the hook unit."""
    for n in _SHARDS:
        b.chain(schedule_chain_name(n))
        pick = {"map": {"key": f.ct("mark"), "data": "@" + schedules_map_name(n)}}
        b.rule(schedule_chain_name(n), [f.set_ct_mark(pick)])


DEFRAG_CHAIN = "stateless-defrag"


def _defragment(b: _Builder) -> None:
    """A chain nothing jumps to, whose rules hold a ``tproxy`` statement per family: creating it makes the
    kernel register IP defragmentation in the namespace (``nf_defrag_ipv4_enable``, ``..._ipv6_``), so
    fragments are whole before the raw hook rewrites a stateless farm's datagrams (a fragment has no
    port to match). Not a ct expression, which registers conntrack too: every packet of the namespace
    would then pay for a conntrack lookup that a table of stateless farms alone never uses (the farms'
    datagrams are ``notrack``). NAT farms get both from their NAT statements. No packet ever evaluates
    these rules (tproxy is valid in prerouting only, and the chain is never reached)."""
    b.chain(DEFRAG_CHAIN)
    for family in ("ip", "ip6"):
        b.rule(DEFRAG_CHAIN, [f.match(f.meta("l4proto"), "udp"), {"tproxy": {"family": family, "port": 1}}])


def base_commands() -> list[Json]:
    """The skeleton every farm plugs into; its digest rides on the first rule."""
    cmds, rules, digest = _base_parts()
    rules[0]["comment"] = BASE_DIGEST_PREFIX + digest
    return cmds + [f.add("rule", r) for r in rules]


def base_digest() -> str:
    return _base_parts()[2]


def document(commands: list[Json]) -> Json:
    return {"nftables": commands}


def _element_target(command: Json) -> tuple[str, tuple] | None:
    """(verb, (family, table, set)) of a command on a set, a map or its elements; None for the others."""
    ((verb, body),) = command.items()
    ((kind, obj),) = body.items()
    if kind in ("element", "set", "map") and "table" in obj:
        return (verb if kind != "element" else f"{verb} element"), (obj["family"], obj["table"], obj["name"])
    return None


def merge_elements(doc: Json) -> Json:
    """The same document with each set's 'add element' commands as one, at the place of its last.

    A farm adds its entries to the shared maps one command at a time (its unit is self-contained); a
    10,000-farm document so carries 130,000 single-element commands, and libnftables pays for each
    command (its parse, evaluation and memory: a 10,000-farm load took 63 s and 2.9 GB one way, 49 s
    and 2.6 GB merged, in one run on a loaded machine). Same transaction, same result: every chain an
    element jumps to is created before the last command that adds to its map; a set whose elements are
    also deleted or flushed in the document is left as it is."""
    commands = doc.get("nftables", [])
    last: dict[tuple, int] = {}
    other: set[tuple] = set()
    for i, command in enumerate(commands):
        target = _element_target(command)
        if target is None:
            continue
        verb, where = target
        if verb == "add element":
            last[where] = i
        elif verb != "add" and where in last:  # removed or emptied after an addition: keep the order as it is
            other.add(where)
    merged: list[Json] = []
    pending: dict[tuple, list] = {}
    for i, command in enumerate(commands):
        target = _element_target(command)
        if target is None or target[0] != "add element" or target[1] in other:
            merged.append(command)
            continue
        body = command["add"]["element"]
        pending.setdefault(target[1], []).extend(body["elem"])
        if last[target[1]] == i:
            merged.append({"add": {"element": {**body, "elem": pending.pop(target[1])}}})
    return document(merged)


_KIND_ORDER = {"hook": 0, "policy": 1, "farm": 2}


def _order_key(key: str) -> tuple[int, int, str]:
    kind, _, ident = key.partition(":")
    return (_KIND_ORDER.get(kind, 3), int(ident) if ident.isdigit() else 0, ident)


def _ordered(units: dict[str, UnitRuleset]) -> list[UnitRuleset]:
    """Hooks, then policies before the farms that reference their sets; then by id."""
    return sorted(units.values(), key=lambda u: _order_key(u.key))


def skeleton_objects() -> tuple[list[str], list[str]]:
    """The skeleton's base chains and its maps, by name."""
    cmds = _base_parts()[0]
    chains = [c["add"]["chain"]["name"] for c in cmds if "chain" in c["add"]]
    maps = [c["add"]["map"]["name"] for c in cmds if "map" in c["add"]]
    return chains, maps


def ordered(units: dict[str, UnitRuleset]) -> list[UnitRuleset]:
    """The units in the order their creates must be sent (policies first)."""
    return _ordered(units)


def shared_maps() -> set[str]:
    """The skeleton's maps, where farms own elements."""
    return {c["add"]["map"]["name"] for c in _base_parts()[0] if "map" in c.get("add", {})}


def full_document(
    farms: list[FarmSpec], policies: list[PolicySpec] | None = None, stale_tables: list[tuple[str, str]] = ()
) -> Json:
    """Everything from nothing, in one transaction: boot and drift repair.

    ``stale_tables`` are lbweb's DSR tables the kernel has and no farm wants any more.
    """
    units = compile_units(farms, policies or [])
    cmds = [f.add("table", f.table()), f.delete("table", f.table()), f.add("table", f.table())]
    wanted = {t for u in units.values() for t in dsr.tables_of(u)}
    for family, name in sorted(set(stale_tables) - wanted):
        cmds += [f.add("table", {"family": family, "name": name}), f.delete("table", {"family": family, "name": name})]
    cmds += base_commands()
    for unit in _ordered(units):
        cmds += unit.creates
    return document(cmds)


def removal_commands(
    old: UnitObjects,
    keep: set[tuple[str, str]],
    kept_elements: set[tuple[str, str, str]] = frozenset(),
    same_chains: Collection[str] = frozenset(),
) -> list[Json]:
    """Unhook one unit's applied objects; those the new version still names are emptied, not deleted.

    Keeping a counter keeps its figures; keeping a persistence set keeps its clients.
    ``kept_elements`` (map, canonical key, canonical verdict) stay in their shared maps as they are,
    and ``same_chains`` (the new version holds them with the same rules) with their rules.
    """
    stay = {entry[:2] for entry in kept_elements}
    # The unit's own maps that go (a NAT farm's targets) are deleted whole, before the chains their
    # elements jump to; their elements are not deleted one by one.
    going = [name for kind, name in old.objects if kind == "map" and (kind, name) not in keep]
    cmds = [
        f.delete("element", f.element(name, [key]))
        for name, key in old.elements
        if (name, canonical(key)) not in stay and name not in going
    ]
    cmds += [f.flush("chain", f.chain(name)) for name in old.chains if name not in same_chains]
    cmds += [f.flush(kind, f.counter(name)) for kind, name in old.volatile]
    cmds += [f.delete("map", f.counter(name)) for name in going]
    cmds += [f.delete("chain", f.chain(name)) for name in old.chains if ("chain", name) not in keep]
    cmds += [f.delete(kind, f.counter(name)) for kind, name in old.volatile if (kind, name) not in keep]
    gone = [(kind, name) for kind, name in old.objects if (kind, name) not in keep and kind != "map"]  # maps: above
    cmds += [f.delete(kind, f.counter(name)) for kind, name in gone]
    for family, name in old.tables:
        if ("table", f"{family} {name}") not in keep:
            cmds.append(f.delete("table", {"family": family, "name": name}))
    return cmds


def _keep_set(unit: UnitRuleset) -> set[tuple[str, str]]:
    o = unit.objects
    keep = {("chain", c) for c in o.chains} | set(o.objects) | set(o.volatile)
    return keep | {("table", f"{family} {name}") for family, name in o.tables}


def changed_units(
    old: dict[str, UnitObjects], new: dict[str, UnitRuleset], among: Collection[str] | None = None
) -> list[str]:
    """The units whose digest differs (those of ``among`` alone, when given), sorted.

    The worker asks on every change with 10,000 farms on each side, so it stays a pass of plain
    lookups (~2 ms), not one of function calls (~11 ms measured with py-spy)."""
    if among is not None:
        return sorted(k for k in among if _digest(old.get(k)) != _digest(new.get(k)))
    changed = set(old.keys() ^ new.keys())
    for key, unit in new.items():
        applied = old.get(key)
        if applied is not None and applied.digest != unit.objects.digest:
            changed.add(key)
    return sorted(changed)


def _digest(unit: UnitObjects | UnitRuleset | None) -> str | None:
    return None if unit is None else unit.digest


def incremental_document(
    old: dict[str, UnitObjects], new: dict[str, UnitRuleset], only: Collection[str] | None = None
) -> tuple[Json, list[str]]:
    """Commands for the units whose digest changed (those of ``only``, when given), and those unit keys.

    Only the changed units' chains, sets, counters and map elements are
    named, so every other farm (and every established connection) is left
    alone. Farms are unhooked before the hooks and policies they use, and all removals
    come before all creations, so a renamed farm or a port moved between
    farms is re-added within the same transaction. ``only`` lets the applier
    send part of a change when the kernel refused the whole (to find which unit it refuses).
    """
    changed = changed_units(old, new, only)
    keep: set[tuple[str, str]] = set()
    for key in changed:
        if key in new:
            keep |= _keep_set(new[key])
    kept = {k: _kept_elements(old[k], new[k]) for k in changed if k in old and k in new}
    same_chains = {k: old[k].unchanged_chains(new[k].objects) for k in changed if k in old and k in new}
    cmds: list[Json] = []
    for key in sorted(changed, key=_removal_order):
        if key in old:
            cmds += removal_commands(old[key], keep, kept.get(key, frozenset()), same_chains.get(key, frozenset()))
    for unit in _ordered({k: new[k] for k in changed if k in new}):
        existing = set(old[unit.key].objects) if unit.key in old else set()
        same = kept.get(unit.key, frozenset())
        chains = same_chains.get(unit.key, frozenset())
        cmds += [
            c
            for c in unit.creates
            if not _creates_existing(c, existing) and not _element_kept(c, same) and not _in_chain(c, chains)
        ]
    return document(cmds), changed


def _removal_order(key: str) -> int:
    """Farms, then hooks (a NAT farm jumps to the ``prerouting`` hook's ``schedule-<n>`` chains), then
    policies (farms match their sets): the kernel refuses to delete what a rule still refers to."""
    return 2 if key.startswith("policy") else 1 if key.startswith(HOOK_PREFIX) else 0


def _in_chain(command: Json, chains: Collection[str]) -> bool:
    """True for the 'add chain' or 'add rule' of a chain that stays with the same rules."""
    if not chains:
        return False
    add = command.get("add", {})
    body = add.get("chain") or add.get("rule")
    if body is None:
        return False
    return (body["chain"] if "rule" in add else body["name"]) in chains


def incremental_context(new: dict[str, UnitRuleset], changed: list[str]) -> list[Json]:
    """What the commands for ``changed`` can refer to, for the applier's own netlink batch: the
    skeleton, the changed units' creates, every policy's definitions (farms match their sets) and the
    ``schedule-<n>`` chains of the ``prerouting`` hook unit, empty (NAT farms jump to them). Declarations
    only, for a unit not in ``changed``: a bulk transaction's context does not list the new units its
    document creates, and a rule added twice is two rules."""
    cmds = base_commands()
    referred = new.get(hook_key("prerouting"))
    if referred is not None and referred.key not in changed:
        cmds += [c for c in referred.creates if "chain" in c.get("add", {}) and "hook" not in c["add"]["chain"]]
    for unit in _ordered({k: u for k, u in new.items() if k in changed or k.startswith("policy")}):
        if unit.key in changed:
            cmds += unit.creates
        else:
            cmds += [c for c in unit.creates if "element" not in c.get("add", {})]
    return cmds


def _kept_elements(old: UnitObjects, new: UnitRuleset) -> set[tuple[str, str, str]]:
    """The unit's shared-map elements that stay as they are: same map, key and verdict, and the chain
    they jump to stays (it is flushed and refilled, not deleted). Leaving them alone keeps the
    transaction free of element commands for a change inside a farm (a weight, a backend's state):
    libnftables 1.0 answers any element command by first reading the elements of every interval
    set of the table, which costs time in proportion to the number of farms."""
    chains = set(old.chains) & set(new.objects.chains)
    kept = set()
    schedules = [{e for e in x.element_entries() if is_schedules_map(e[0])} for x in (old, new.objects)]
    for entry in old.element_entries() & new.objects.element_entries():
        if is_schedules_map(entry[0]) and schedules[0] != schedules[1]:
            # a range is a start and an end element, and a range's end may be its neighbour's start:
            # the farm's shares in the shared map are replaced together, or not at all
            continue
        target = json.loads(entry[2])
        if isinstance(target, dict) and len(target) == 1:
            ((verb, body),) = target.items()
            if verb in ("jump", "goto") and body.get("target") not in chains:
                continue
        kept.add(entry)
    return kept


def _element_kept(command: Json, kept: set[tuple[str, str, str]]) -> bool:
    """True for the 'add element' of one shared-map element that stays in the kernel as it is."""
    if not kept or "element" not in command.get("add", {}):
        return False
    body = command["add"]["element"]
    if len(body["elem"]) != 1 or not isinstance(body["elem"][0], list) or len(body["elem"][0]) != 2:
        return False
    key, value = body["elem"][0]
    return (body["name"], canonical(key), canonical(value)) in kept


def _creates_existing(command: Json, existing: set[tuple[str, str]]) -> bool:
    """Durable objects that stay are not re-added: the kernel keeps them, with flags it set itself
    (a set fed from the packet path becomes 'dynamic') that a second 'add' would contradict."""
    ((verb, body),) = command.items()
    if verb != "add":
        return False
    ((kind, obj),) = body.items()
    return (kind, obj.get("name")) in existing
