"""A preview in plain words: what an edit does to a farm, one line per change, above the nftables JSON.

A 233-line transaction tells an operator little; "+ VIP 198.18.50.1 tcp/80,443" and "weights 5/3/1 →
56/33/11 %" tell what the kernel will do with new connections. The lines are read off the compiler's own
view of the farm before and after (two :class:`FarmSpec`), so they cannot say something the rules do not:
the shares are those of the backends the scheduler picks from (``FarmSpec.active_backends``: enabled,
not down, within nftlb's priority level), over the weights the compiler uses (round robin is weighted too).
"""

from __future__ import annotations

from compiler.spec import BackendSpec, FarmSpec

from .choices import FarmModeChoices, FarmSchedulerChoices

# Options shown as "name: before → after" when they change (the lines above cover the rest).
OPTION_NAMES = (
    ("persistence", "persistence"),
    ("persist_ttl", "persistence timeout"),
    ("sched_param", "hash fields"),
    ("source_addr", "SNAT source"),
    ("source_ports", "SNAT ports"),
    ("new_rtlimit", "new connections per client"),
    ("new_rtlimit_unit", "new connections counted per"),
    ("new_rtlimit_burst", "burst"),
    ("rst_rtlimit", "TCP resets per client"),
    ("rst_rtlimit_unit", "TCP resets counted per"),
    ("rst_rtlimit_burst", "reset burst"),
    ("limits_ttl", "a client stays in a limit's meter (s)"),
    ("est_connlimit", "established connections per client"),
    ("limit_verdict", "beyond a limit"),
    ("log_drops", "log what limits and policies drop"),
    ("log", "log new connections (input)"),
    ("log_forward", "log forwarded packets"),
    ("log_output", "log new connections leaving (output)"),
    ("log_prefix", "log prefix"),
    ("log_rtlimit", "log lines"),
    ("log_rtlimit_unit", "log lines counted per"),
    ("fwmark", "packet mark"),
    ("helper", "conntrack helper"),
    ("tcp_strict", "TCP strict"),
    ("intra_connect", "intra-connect"),
    ("flow_offload", "flow offload"),
    ("interface", "DSR interface"),
    ("oface", "DSR output interface"),
    ("ether_addr", "DSR source MAC"),
)
LOCAL = FarmModeChoices.LOCAL.value
SCHEDULER_WORDS = {value: label.lower() for value, label in FarmSchedulerChoices.choices}  # "weighted"


def ports_text(spec: FarmSpec) -> str:
    if spec.protocol == "all":
        return "all protocols"
    ports = ",".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in spec.ports)
    return f"{spec.protocol}/{ports}"


def service_text(spec: FarmSpec) -> str:
    """'VIP 198.18.50.1 tcp/80,443'."""
    return f"VIP {spec.vip} {ports_text(spec)}"


def backend_text(backend: BackendSpec) -> str:
    if backend.port is None:
        return backend.address
    return f"[{backend.address}]:{backend.port}" if ":" in backend.address else f"{backend.address}:{backend.port}"


def shares(spec: FarmSpec | None) -> dict[int, tuple[int, int]]:
    """Backend id -> (weight the scheduler uses, % of new connections) for the backends it picks from."""
    if spec is None or not spec.enabled:
        return {}
    active = spec.active_backends
    weights = {b.id: b.weight for b in active}  # round robin too: nftlb's is weighted
    total = sum(weights.values())
    return {b.id: (weights[b.id], round(100 * weights[b.id] / total)) for b in active} if total else {}


def _how(spec: FarmSpec) -> str:
    """How the farm serves: its scheduler's name, or for a local farm where its connections end."""
    if spec.mode == LOCAL:
        return "served by the appliance itself"
    return SCHEDULER_WORDS.get(spec.scheduler, spec.scheduler)


def traffic_text(spec: FarmSpec | None) -> str:
    if spec is None:
        return "gone"
    if not spec.enabled:
        return "off (the VIP is not served)"
    if spec.mode == LOCAL:
        return "to the service listening on the VIP on the appliance (filtered, not forwarded)"
    count = len(spec.active_backends)
    if count:
        return f"balanced over {count} backend{'s' if count != 1 else ''}"
    if spec.fallback is not None:
        return f"sent to the fallback {backend_text(spec.fallback)}"
    return "rejected" + (" (TCP reset)" if spec.protocol == "tcp" else " (ICMP port unreachable)")


def _shown(value) -> str:
    if value in ((), "", None):
        return "—"
    if value is True or value is False:
        return "on" if value else "off"
    if isinstance(value, tuple):
        return " ".join(map(str, value)) if all(isinstance(v, str) for v in value) else "-".join(map(str, value))
    return str(value)


def summarise(old: FarmSpec | None, new: FarmSpec | None) -> list[str]:
    """One line per change from ``old`` to ``new`` (None: the farm does not exist on that side)."""
    if old is None and new is None:
        return []
    if old is None:
        lines = [f"+ farm {new.name}: {service_text(new)}, {new.mode.upper()}, {_how(new)}"]
        lines += [f"+ backend {backend_text(b)}" for b in new.backends]
    elif new is None:
        count = len(old.backends)
        backends = f"{count} backend{'s' if count != 1 else ''}"
        return [f"− farm {old.name}: {service_text(old)} and its {backends} leave the kernel"]
    else:
        lines = _farm_lines(old, new) + _backend_lines(old, new)
    lines += _share_lines(old, new)
    before, after = traffic_text(old), traffic_text(new)
    if old is None or before != after:
        lines.append(f"new connections: {before} → {after}" if old is not None else f"new connections: {after}")
    return lines


def _farm_lines(old: FarmSpec, new: FarmSpec) -> list[str]:
    lines = []
    if service_text(old) != service_text(new):
        lines += [f"− {service_text(old)}", f"+ {service_text(new)}"]
    if old.enabled != new.enabled:
        lines.append(f"farm {'up' if new.enabled else 'off'}")
    if old.mode != new.mode:
        lines.append(f"mode {old.mode.upper()} → {new.mode.upper()}")
    if old.scheduler != new.scheduler and LOCAL not in (old.mode, new.mode):
        before, after = (SCHEDULER_WORDS.get(x, x) for x in (old.scheduler, new.scheduler))
        lines.append(f"scheduler {before} → {after}")
    old_fallback = backend_text(old.fallback) if old.fallback else "—"
    new_fallback = backend_text(new.fallback) if new.fallback else "—"
    if old_fallback != new_fallback:
        lines.append(f"fallback {old_fallback} → {new_fallback}")
    for name, words in OPTION_NAMES:
        before, after = getattr(old, name), getattr(new, name)
        if before != after:
            lines.append(f"{words}: {_shown(before)} → {_shown(after)}")
    old_policies = sorted(p.name for p in old.policies)
    new_policies = sorted(p.name for p in new.policies)
    if old_policies != new_policies:
        lines.append(f"policies: {', '.join(old_policies) or '—'} → {', '.join(new_policies) or '—'}")
    return lines


def _backend_lines(old: FarmSpec, new: FarmSpec) -> list[str]:
    lines = []
    before = {b.id: b for b in old.backends}
    after = {b.id: b for b in new.backends}
    for backend in new.backends:
        was = before.get(backend.id)
        if was is None:
            lines.append(
                f"+ backend {backend_text(backend)}" + ("" if backend.state == "enabled" else f" ({backend.state})")
            )
            continue
        changes = [
            f"{name} {getattr(was, name) if getattr(was, name) is not None else '—'} → "
            f"{getattr(backend, name) if getattr(backend, name) is not None else '—'}"
            for name in ("address", "port", "state", "weight", "priority", "est_connlimit", "mac")
            if getattr(was, name) != getattr(backend, name)
        ]
        if changes:
            lines.append(f"backend {backend_text(was)}: " + ", ".join(changes))
    lines += [f"− backend {backend_text(b)}" for b in old.backends if b.id not in after]
    return lines


def _share_lines(old: FarmSpec | None, new: FarmSpec | None) -> list[str]:
    """'weights 5/3/1 → 56/33/11 %': the share of new connections each active backend gets after the edit."""
    before, after = shares(old), shares(new)
    if not after or before == after:
        return []
    ids = list(after)
    label = "weights " + "/".join(str(after[i][0]) for i in ids)
    names = ", ".join(backend_text(b) for b in new.active_backends)
    return [f"{label} → {'/'.join(str(after[i][1]) for i in ids)} % of new connections ({names})"]
