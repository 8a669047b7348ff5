"""Specs to units: which builder compiles which kind of farm, a policy's sets, and a configuration's units."""

from __future__ import annotations

from typing import Any

from . import dsr
from . import fragments as f
from .hooks import compile_hooks
from .local import local_farm
from .names import digest_chain_name, farm_key, policy_key, policy_set_name
from .nat import nat_farm
from .spec import FarmSpec, PolicySpec
from .stateless import stateless_farm
from .units import COMPILER_VERSION, Builder, UnitObjects, UnitRuleset, digest_of


def compile_farm(farm: FarmSpec) -> UnitRuleset:
    """Compile one farm; a disabled farm owns nothing in the kernel."""
    key = farm_key(farm.id)
    if not farm.enabled:
        return UnitRuleset(key, farm.name, UnitObjects(digest=digest_of(["off", COMPILER_VERSION])))
    if farm.mode == "dsr":
        return dsr.compile_farm(farm, key)
    b = Builder()
    build = {"stlsdnat": stateless_farm, "local": local_farm}.get(farm.mode, nat_farm)
    build(b, farm)
    return b.finish(key, farm.name, digest_chain_name(farm.name))


def compile_policy(policy: PolicySpec) -> UnitRuleset:
    """A policy is two interval sets (IPv4, IPv6) that farms match against; its elements change alone."""
    b = Builder()
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
