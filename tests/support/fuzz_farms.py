"""Random configurations over every field, kept to what validation accepts, compiled and applied for real.

One example: a few policies, farms (every option, unicode text included), their backends and static
sessions, each created through the services (so the models' ``clean()`` decides what exists: whatever
it refuses is simply not created), then the whole configuration compiled by the pure compiler and
applied by libnftables in a throwaway network namespace (:class:`tests.support.apply_sandbox.Sandbox`). The
property: the kernel refuses nothing validation accepted, and libnftables never crashes.

The strategies lean towards valid values (a mode's usual scheduler, addresses of the VIP's family, ports
in range) so most examples get far, but every field also draws from its whole domain and beyond (huge
numbers, any unicode text, special addresses), which validation must refuse.

Used by ``tests/dataplane/test_fuzz_apply.py`` (a short run in the suite) and ``bench/fuzz_apply.py`` (a long one).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import time
from dataclasses import dataclass, field

from hypothesis import strategies as st

from compiler.spec import HELPER_PROTOCOL
from farms.choices import (
    BackendStateChoices,
    FarmAllDownChoices,
    FarmModeChoices,
    FarmProtocolChoices,
    FarmSchedulerChoices,
    FarmStateChoices,
    HashFieldChoices,
    HelperChoices,
    LimitVerdictChoices,
    PersistenceChoices,
    PolicyTypeChoices,
)

SLUG = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_"
INTERFACES = ("eth1", "fz0", "a.b", "x@y", "veth-lb_1")
DSR_MAC = "02:00:00:00:00:aa"


def mostly(valid: st.SearchStrategy, odd: st.SearchStrategy, one_in: int = 20) -> st.SearchStrategy:
    """``valid`` most of the time, ``odd`` (what validation must refuse, or edges) one time in ``one_in``."""
    return st.integers(1, one_in).flatmap(lambda n: odd if n == 1 else valid)


def _big_or(small: st.SearchStrategy) -> st.SearchStrategy:
    """Mostly ``small``; sometimes the edges of the kernel's 32-bit fields and beyond."""
    edges = st.sampled_from([0, 1, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**63 - 1])
    return mostly(small, st.one_of(edges, st.integers(min_value=0, max_value=2**64)))


def _addresses(version: int) -> st.SearchStrategy[str]:
    """Lab addresses (so farms and backends meet), any address of the family, and a few special ones."""
    if version == 4:
        lab = st.integers(0, 2**17 - 1).map(lambda n: f"198.{18 + (n >> 16)}.{(n >> 8) & 255}.{n & 255}")
        special = st.sampled_from(["0.0.0.0", "127.0.0.1", "224.0.0.1", "169.254.1.1", "255.255.255.255"])
    else:
        lab = st.integers(0, 2**16 - 1).map(lambda n: f"2001:2::{n:x}")
        special = st.sampled_from(["::", "::1", "ff02::1", "fe80::1", "fe80::1%lo", "::ffff:198.18.0.1"])
    return mostly(st.one_of(lab, lab, st.ip_addresses(v=version).map(str)), special)


def _ports(protocol: str) -> st.SearchStrategy[str]:
    if protocol == FarmProtocolChoices.ALL:
        return mostly(st.just(""), st.just("80"))
    port = st.integers(1, 65535)
    one = st.one_of(port.map(str), st.tuples(port, port).map(lambda p: f"{min(p)}-{max(p)}"))
    odd = st.sampled_from(["0", "65536", "٨٠", "8_0", " 80", "80-", "1-65535"])
    return mostly(st.lists(one, min_size=1, max_size=4).map(",".join), odd)


def _text(max_size: int) -> st.SearchStrategy[str]:
    return st.one_of(
        st.text(max_size=max_size),
        st.text(alphabet=st.characters(min_codepoint=0x1F300, max_codepoint=0x1FAFF), max_size=max_size),
        st.text(alphabet=st.characters(codec="ascii"), max_size=max_size),
    )


@st.composite
def farm_values(draw, index: int, *, flowtables: bool = True) -> dict:
    """Field values of one farm, leaning towards what its mode takes (and flow offload only where the kernel
    has flowtables: elsewhere validation refuses it, which tests/farms/test_kernel_bounds_validation.py proves)."""
    mode = draw(st.sampled_from(FarmModeChoices.values))
    version = draw(st.sampled_from([4, 6]))
    protocols = FarmProtocolChoices.values
    l7, local = mode in ("http", "https"), mode == "local"
    leaning = {"stlsdnat": "udp", "http": "tcp", "https": "tcp"}
    protocol = draw(
        mostly(st.just(leaning[mode]), st.sampled_from(protocols)) if mode in leaning else st.sampled_from(protocols)
    )
    hashed = st.sampled_from([FarmSchedulerChoices.HASH, FarmSchedulerChoices.SYMHASH])
    any_scheduler = st.sampled_from(FarmSchedulerChoices.values)
    if mode == "dsr":
        scheduler = draw(mostly(hashed, any_scheduler))
    elif l7 or local:  # HAProxy schedules per service; a local farm schedules nothing
        scheduler = draw(mostly(st.just(FarmSchedulerChoices.ROUND_ROBIN), any_scheduler))
    else:
        scheduler = draw(any_scheduler)
    fields = [x for x in HashFieldChoices.values if protocol != "all" or "port" not in x]
    sched_param = (
        " ".join(draw(st.lists(st.sampled_from(fields), min_size=1, max_size=3, unique=True)))
        if scheduler == FarmSchedulerChoices.HASH
        else draw(mostly(st.just(""), st.just("srcip")))
    )
    plain = mode in ("snat", "dnat")
    persistence = ""
    if plain and scheduler in ("weight", "leastconn"):
        persistence = draw(st.sampled_from(PersistenceChoices.values))
    elif plain:
        persistence = draw(mostly(st.just(""), st.sampled_from(PersistenceChoices.values)))
    helpers = [h for h, tracked in HELPER_PROTOCOL.items() if tracked == protocol]
    values = {
        "name": draw(
            mostly(st.one_of(st.text(alphabet=SLUG, min_size=1, max_size=48), st.just(f"f{index}")), _text(50))
        ),
        "description": draw(_text(200)),
        "vip": draw(_addresses(version)),
        "protocol": protocol,
        "ports": draw(_ports(protocol)),
        "mode": mode,
        "scheduler": scheduler,
        "state": draw(mostly(st.just(FarmStateChoices.UP), st.just(FarmStateChoices.OFF), 5)),
        "sched_param": sched_param,
        "persistence": persistence,
        "persist_ttl": draw(_big_or(st.integers(1, 7 * 86400))),
        "new_rtlimit": draw(_big_or(st.integers(0, 1000))) if plain else 0,
        "new_rtlimit_burst": draw(_big_or(st.integers(0, 1000))),
        "rst_rtlimit": draw(_big_or(st.integers(0, 1000))) if protocol == "tcp" and mode != "dsr" else 0,
        "est_connlimit": draw(_big_or(st.integers(0, 10000))) if plain else 0,
        "limit_verdict": draw(st.sampled_from(LimitVerdictChoices.values)),
        "log": draw(st.booleans()) if mode != "dsr" else False,
        "log_prefix": draw(
            mostly(
                st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cc", "Cs"]), max_size=30), _text(60)
            )
        ),
        "log_rtlimit": draw(_big_or(st.integers(1, 100))),
        "helper": draw(mostly(st.sampled_from(["", *helpers]), st.sampled_from(HelperChoices.values))) if plain else "",
        "tcp_strict": draw(st.booleans()) if mode in ("snat", "dnat") else False,
        "intra_connect": draw(st.booleans()) if plain and persistence != "srcmac" else False,
        "flow_offload": draw(mostly(st.just(False), st.just(True), 6)) if plain and flowtables else False,
        "interface": draw(mostly(st.sampled_from(INTERFACES), _text(16))) if mode == "dsr" else "",
        "when_all_down": draw(
            mostly(st.just(FarmAllDownChoices.REJECT), st.sampled_from(FarmAllDownChoices.values))
            if l7 or local
            else st.sampled_from(FarmAllDownChoices.values)
        ),
        "source_addr": "",
        "source_ports": "",
    }
    if mode == "snat" and draw(st.booleans()):
        low, high = draw(_addresses(version)), draw(_addresses(version))
        if ipaddress.ip_address(low.split("%")[0]) > ipaddress.ip_address(high.split("%")[0]):
            low, high = high, low
        values["source_addr"] = draw(st.sampled_from([low, f"{low}-{high}"]))
    if mode == "snat" and protocol != "all" and draw(st.booleans()):
        a, b = draw(st.integers(1, 65535)), draw(st.integers(1, 65535))
        values["source_ports"] = f"{min(a, b)}-{max(a, b)}"
    if values["when_all_down"] == FarmAllDownChoices.FALLBACK:
        values["fallback_address"] = draw(_addresses(version))
        values["fallback_port"] = None if protocol == "all" else draw(st.one_of(st.none(), st.integers(1, 65535)))
    return values


@st.composite
def backend_values(draw, version: int, mode: str, protocol: str) -> dict:
    port = None if mode == "dsr" or protocol == "all" else draw(st.one_of(st.none(), _big_or(st.integers(1, 65535))))
    mac = mostly(st.sampled_from(["", "02:00:00:00:01:01", "02-00-00-00-01-02"]), st.just("nonsense"))
    return {
        "address": draw(_addresses(version)),
        "port": port,
        "weight": draw(mostly(st.integers(1, 10000), st.sampled_from([0, 10001]))),
        "state": draw(st.sampled_from(BackendStateChoices.values)),
        "priority": draw(st.integers(1, 3)),
        "est_connlimit": draw(_big_or(st.integers(0, 100))) if mode in ("snat", "dnat") else 0,
        "mac": draw(mac),
    }


@st.composite
def policy_values(draw, index: int) -> dict:
    networks = st.one_of(
        st.ip_addresses().map(str),
        st.tuples(st.ip_addresses(v=4), st.integers(0, 32)).map(lambda t: f"{t[0]}/{t[1]}"),
        st.tuples(st.ip_addresses(v=6), st.integers(0, 128)).map(lambda t: f"{t[0]}/{t[1]}"),
    )
    return {
        "name": draw(st.one_of(st.text(alphabet=SLUG, min_size=1, max_size=40), st.just(f"p{index}"))),
        "type": draw(st.sampled_from(PolicyTypeChoices.values)),
        "description": draw(_text(200)),
        "elements": "\n".join(draw(st.lists(networks, max_size=6))),
    }


def _session_client(draw, farm, version: int) -> str:
    fields = farm.persistence.split()
    address = draw(_addresses(version))
    if fields == ["srcmac"]:
        return draw(st.sampled_from(["02:00:00:00:02:01", "02:00:00:00:02:02"]))
    if fields == ["srcip", "srcport"]:
        port = draw(st.integers(0, 70000))
        return f"[{address}]:{port}" if version == 6 else f"{address}:{port}"
    return address


@dataclass
class Stats:
    """What a run saw: examples, objects validation accepted and refused, kernel refusals and crashes."""

    examples: int = 0
    farms: int = 0
    backends: int = 0
    sessions: int = 0
    policies: int = 0
    refused_by_validation: int = 0
    kernel_refusals: int = 0
    crashes: int = 0
    failures: list[dict] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)

    def as_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out["seconds"] = round(time.monotonic() - self.started, 1)
        out["failures"] = len(self.failures)
        del out["started"]
        return out


def _attempt(stats: Stats, write):
    from django.core.exceptions import ValidationError
    from django.db import transaction

    try:
        with transaction.atomic():
            return write()
    except ValidationError:
        stats.refused_by_validation += 1
        return None


def build_and_apply(draw, sandbox, stats: Stats, *, keep_failures: int = 20) -> str | None:
    """One example: create what validation accepts, compile it, apply it. Returns the failure, or None.

    Runs inside the caller's transaction, which the caller rolls back.
    """
    import compiler
    from farms import capabilities, services
    from farms.models import Policy
    from farms.specs import farm_spec, farms_queryset, policy_spec

    stats.examples += 1
    flowtables = (capabilities.published() or {}).get("flowtable") is not False
    policies = []
    for i in range(draw(st.integers(0, 2))):
        values = draw(policy_values(i))
        policy = _attempt(stats, lambda v=values: services.policy_create(**v))
        if policy is not None:
            policies.append(policy)
            stats.policies += 1
    for i in range(draw(st.integers(1, 3))):
        values = draw(farm_values(i, flowtables=flowtables))
        chosen = draw(st.lists(st.sampled_from(policies), unique=True)) if policies else []
        farm = _attempt(stats, lambda v=values, p=chosen: services.farm_create(policies=p, **v))
        if farm is None:
            continue
        stats.farms += 1
        version = 6 if ":" in farm.vip else 4
        backends = []
        for _ in range(draw(st.integers(0, 4))):
            values = draw(backend_values(version, farm.mode, farm.protocol))
            backend = _attempt(stats, lambda v=values, f=farm: services.backend_create(farm=f, **v))
            if backend is not None:
                backends.append(backend)
                stats.backends += 1
        if farm.persistence and backends:
            for _ in range(draw(st.integers(0, 2))):
                client, backend = _session_client(draw, farm, version), draw(st.sampled_from(backends))
                if _attempt(
                    stats, lambda c=client, b=backend, f=farm: services.session_create(farm=f, client=c, backend=b)
                ):
                    stats.sessions += 1
    specs, links = [], {"fz0"}
    for farm in farms_queryset():
        spec = farm_spec(farm)
        if spec.mode == "dsr":  # what the worker resolves in its namespace (links.resolve_dsr)
            spec = dataclasses.replace(
                spec,
                interface_mac=DSR_MAC,
                backends=tuple(b if b.mac else dataclasses.replace(b, mac=DSR_MAC) for b in spec.backends),
            )
            links.add(spec.interface)
        if spec.flow_offload:
            spec = dataclasses.replace(spec, offload_devices=("fz0",))
        specs.append(spec)
    document = compiler.full_document(specs, [policy_spec(p) for p in Policy.objects.order_by("id")])
    outcome = sandbox.apply(document, tuple(sorted(links)))
    if outcome.ok:
        return None
    if outcome.crashed:
        stats.crashes += 1
    else:
        stats.kernel_refusals += 1
    if len(stats.failures) < keep_failures:
        from farms.config_io import export_config

        stats.failures.append({"error": outcome.error, "crashed": outcome.crashed, "configuration": export_config()})
    return outcome.error


def dumps_failure(failure: dict) -> str:
    return json.dumps(failure, indent=1, default=str, ensure_ascii=False)
