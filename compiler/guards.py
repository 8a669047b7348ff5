"""What a connection meets before its backend is picked: per-client limits, access policies, tcp-strict, the
reset limit, logging and conntrack helpers. NAT and local farms run the same guards."""

from __future__ import annotations

from compiler.types import Json

from . import fragments as f
from .dispatch import dispatch_keys, service_element
from .limits import LOG_PREFIX_BYTES, truncate_utf8
from .logs import log_statements as _log
from .logs import rate as _rate
from .names import guard_chain_name, persist_set_name, policy_set_name
from .schedulers import hash_expr, l3_of
from .spec import HELPER_PROTOCOLS, FarmSpec
from .units import Builder, digest_of


def _verdict(farm: FarmSpec) -> Json:
    if farm.limit_verdict == "reject":
        return {"reject": {"type": "tcp reset"}} if farm.protocol == "tcp" else {"reject": None}
    return {"drop": None}


def refusal(b: Builder, farm: FarmSpec, tag: str, prefix: str, counter: str) -> list[Json]:
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


def _meter(b: Builder, farm: FarmSpec, kind: str, definition: list, *, timeout: int | None) -> str:
    """A per-client set a limit keeps its state in; its name changes with its definition."""
    name = f"{kind}-{farm.name}-{digest_of(definition)[:6]}"
    addr = "ipv4_addr" if farm.family == 4 else "ipv6_addr"
    body: Json = {**f.named_set(name, addr), "size": 65535}  # the kernel makes it dynamic (fed by packets)
    if timeout:
        body |= {"flags": ["timeout"], "timeout": timeout}
    b.obj("set", body)
    return name


def farm_guards(b: Builder, farm: FarmSpec, chain: str) -> None:
    """Limits, logging and helpers: evaluated once, on a connection's first packet (policies are
    checked on every packet, in the farm's guard chain)."""
    l3 = l3_of(farm)
    saddr = f.payload(l3, "saddr")
    if farm.new_rtlimit:
        definition = [farm.new_rtlimit, farm.new_rtlimit_unit, farm.new_rtlimit_burst, farm.limits_ttl]
        meter = _meter(b, farm, "rtlimit", definition, timeout=farm.limits_ttl)
        limit = _rate(farm.new_rtlimit, farm.new_rtlimit_unit, over=True, burst=farm.new_rtlimit_burst)
        over = {"set": {"op": "add", "elem": saddr, "set": "@" + meter, "stmt": [limit]}}
        b.rule(chain, [over, *refusal(b, farm, "new", f"new-rtlimit-{farm.name} ", f"{chain}-limit")])
    if farm.est_connlimit:  # per client address, as nftlb (a set of connection counts keyed by source)
        meter = _meter(b, farm, "estconn", [farm.est_connlimit], timeout=None)
        count = {"ct count": {"val": farm.est_connlimit, "inv": True}}
        over = {"set": {"op": "add", "elem": saddr, "set": "@" + meter, "stmt": [count]}}
        b.rule(chain, [over, *refusal(b, farm, "est", f"est-connlimit-{farm.name} ", f"{chain}-limit")])
    if farm.log:
        b.rule(chain, _log(farm, "IN"))
    if farm.helper:
        protocols = tuple(p for p in HELPER_PROTOCOLS[farm.helper] if farm.protocol in (p, "all"))
        for protocol in protocols:
            helper = f"helper-{farm.name}-{farm.helper}" + (f"-{protocol}" if len(protocols) > 1 else "")
            b.obj("ct helper", {**f.counter(helper), "type": farm.helper, "protocol": protocol, "l3proto": "inet"})
            match = [f.match(f.meta("l4proto"), protocol)] if len(protocols) > 1 else []
            b.rule(chain, [*match, {"ct helper": helper}])


def guard_chain(b: Builder, farm: FarmSpec) -> None:
    """Every packet from a client to the farm (not only a connection's first), before NAT: access
    policies (a denied source loses its established connections too, as in nftlb), tcp-strict, the
    per-client reset limit, and the refresh of the client's persistence entry (nftlb's ``update``:
    the TTL counts from the client's last packet, not from its first connection)."""
    refresh = farm.persistence and farm.sticky_backends
    if not (farm.policies or farm.tcp_strict or farm.rst_rtlimit or refresh):
        return
    guard = guard_chain_name(farm)
    l3 = l3_of(farm)
    b.chain(guard)
    for policy in farm.policies:
        members = "@" + policy_set_name(policy, farm.family)
        op, word = ("==", "BL") if policy.type == "deny" else ("!=", "WL")
        refuse = refusal(
            b, farm, f"policy-{policy.name}", f"policy-{word}-{policy.name}-{farm.name} ", f"farm-{farm.name}-policy"
        )
        b.rule(guard, [f.match(f.payload(l3, "saddr"), members, op), *refuse])
    if farm.tcp_strict or farm.rst_rtlimit:
        b.obj("counter", f.counter(guard))
    if farm.tcp_strict:
        refuse = refusal(b, farm, "strict", f"tcp-strict-{farm.name} ", guard)
        b.rule(guard, [f.match(f.ct("state"), "invalid"), *refuse])
    if farm.rst_rtlimit:
        definition = [farm.rst_rtlimit, farm.rst_rtlimit_unit, farm.rst_rtlimit_burst, farm.limits_ttl]
        meter = _meter(b, farm, "rstlimit", definition, timeout=farm.limits_ttl)
        rst = f.match({"&": [f.payload("tcp", "flags"), "rst"]}, 0, "!=")
        limit = _rate(farm.rst_rtlimit, farm.rst_rtlimit_unit, over=True, burst=farm.rst_rtlimit_burst)
        over = {"set": {"op": "add", "elem": f.payload(l3, "saddr"), "set": "@" + meter, "stmt": [limit]}}
        refuse = refusal(b, farm, "rst", f"rst-rtlimit-{farm.name} ", guard)
        b.rule(guard, [f.match(f.meta("l4proto"), "tcp"), rst, over, *refuse])
    if refresh:
        key = hash_expr(farm, farm.persistence)
        for backend in farm.sticky_backends:
            learnt = "@" + persist_set_name(farm, backend.id)
            b.rule(guard, [f.match(key, learnt), {"set": {"op": "update", "elem": key, "set": learnt}}])
    for map_name, key in dispatch_keys(farm, "guard"):
        service_element(b, map_name, key, guard)
