"""A local farm (nftlb's mode ``local``: the service runs on the appliance): a NAT farm's chain without the
NAT, and its bytes counted where its packets meet the local socket."""

from __future__ import annotations

from . import fragments as f
from .dispatch import dispatch_keys, service_element
from .guards import farm_guards, guard_chain
from .names import TRAFFIC_DIR_MAP, farm_chain_name, traffic_counter_name
from .spec import FarmSpec
from .units import Builder


def _direction_counters(b: Builder, farm: FarmSpec) -> None:
    """A local farm's byte counters by direction, reached through ``traffic_dir`` by the connection's ct mark
    (in the input and output hooks: a local farm has no backend)."""
    directions = {d: traffic_counter_name(farm.name, d) for d in ("in", "out")}
    for name in directions.values():
        b.obj("counter", f.counter(name))
    b.element(TRAFFIC_DIR_MAP, f.concat(farm.mark, "original"), directions["in"])
    b.element(TRAFFIC_DIR_MAP, f.concat(farm.mark, "reply"), directions["out"])


def local_farm(b: Builder, farm: FarmSpec) -> None:
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
    farm_guards(b, farm, chain)
    b.rule(chain, [{"accept": None}])
    for map_name, key in dispatch_keys(farm):
        service_element(b, map_name, key, chain)
    if farm.intra_connect:  # nftlb's output chains: the appliance's own connections to the VIP are limited too
        for map_name, key in dispatch_keys(farm, "local"):
            service_element(b, map_name, key, chain)
    if farm.count_bytes:
        _direction_counters(b, farm)
    guard_chain(b, farm)
