"""The plan as systemd-networkd, -resolved and -timesyncd files, so the network holds across a reboot.

Pure: a plan in, ``{relative path: text}`` out. The worker writes them under ``LBWEB_NETWORK_DIR`` in
the layout of ``/etc`` (``systemd/network/50-lbweb-<name>.network`` and ``.netdev``,
``systemd/resolved.conf.d/50-lbweb.conf``, ``systemd/timesyncd.conf.d/50-lbweb.conf``): on the
appliance that directory is ``/etc``, in development and tests a directory of lbweb's. Only files named
``50-lbweb*`` are lbweb's; :func:`write` replaces them and removes the ones no longer wanted.
"""

from __future__ import annotations

import ipaddress
import os
import tempfile
from pathlib import Path

from .plan import InterfacePlan, Plan, RoutePlan

PREFIX = "50-lbweb"
NETWORK_DIR = Path("systemd/network")
RESOLVED = Path("systemd/resolved.conf.d") / f"{PREFIX}.conf"
TIMESYNCD = Path("systemd/timesyncd.conf.d") / f"{PREFIX}.conf"
HEADER = "# Written by lbweb (System > Network); changes made here are replaced.\n"


def _section(name: str, lines: list[str]) -> str:
    return f"[{name}]\n" + "".join(f"{line}\n" for line in lines)


def netdev(interface: InterfacePlan) -> str | None:
    if interface.kind == "vlan":
        return (
            HEADER
            + _section("NetDev", [f"Name={interface.name}", "Kind=vlan"])
            + "\n"
            + _section("VLAN", [f"Id={interface.vlan_id}"])
        )
    if interface.kind == "bond":
        return (
            HEADER
            + _section("NetDev", [f"Name={interface.name}", "Kind=bond"])
            + "\n"
            + _section("Bond", [f"Mode={interface.bond_mode}"])
        )
    return None


def route_home(route: RoutePlan, plan: Plan) -> str | None:
    """The interface whose file carries a route: its own, or the one whose subnet holds the gateway."""
    if route.interface:
        return route.interface
    if route.gateway:
        gateway = ipaddress.ip_address(route.gateway)
        for interface in plan.interfaces:
            if any(gateway in ipaddress.ip_interface(a).network for a in interface.addresses):
                return interface.name
    return None


def network(interface: InterfacePlan, plan: Plan) -> str:
    parts = [HEADER + _section("Match", [f"Name={interface.name}"])]
    link = [] if interface.mtu is None else [f"MTUBytes={interface.mtu}"]
    link.append("ActivationPolicy=" + ("up" if interface.enabled else "down"))
    parts.append(_section("Link", link))
    lines = [f"Address={a}" for a in interface.addresses]
    lines += [f"VLAN={v.name}" for v in plan.interfaces if v.kind == "vlan" and v.parent == interface.name]
    if interface.bond:
        lines.append(f"Bond={interface.bond}")
    lines += ["DHCP=no", "IPv6AcceptRA=no"] if not interface.bond else []
    if interface.kind == "bond" or any(v.parent == interface.name for v in plan.interfaces) or interface.bond:
        lines.append("ConfigureWithoutCarrier=yes")
    parts.append(_section("Network", lines))
    for route in plan.routes:
        if route_home(route, plan) == interface.name:
            entry = [f"Destination={route.destination}"]
            entry += [f"Gateway={route.gateway}"] if route.gateway else ["Scope=link"]
            entry += [f"Metric={route.metric}"] if route.metric else []
            parts.append(_section("Route", entry))
    return "\n".join(parts)


def files(plan: Plan) -> dict[Path, str]:
    out: dict[Path, str] = {}
    for interface in plan.interfaces:
        text = netdev(interface)
        if text:
            out[NETWORK_DIR / f"{PREFIX}-{interface.name}.netdev"] = text
        out[NETWORK_DIR / f"{PREFIX}-{interface.name}.network"] = network(interface, plan)
    if plan.dns or plan.domains:
        lines = [f"DNS={' '.join(plan.dns)}"] if plan.dns else []
        lines += [f"Domains={' '.join(plan.domains)}"] if plan.domains else []
        out[RESOLVED] = HEADER + _section("Resolve", lines)
    if plan.ntp:
        out[TIMESYNCD] = HEADER + _section("Time", [f"NTP={' '.join(plan.ntp)}"])
    return out


def write(root: Path, plan: Plan) -> list[Path]:
    """Write the plan's files under ``root`` (each replaced atomically) and remove lbweb's stale ones."""
    wanted = files(plan)
    for relative, text in wanted.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, staged = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "w") as file:
            file.write(text)
        os.chmod(staged, 0o644)  # systemd-networkd reads them as its own user
        os.replace(staged, path)
    for directory in {NETWORK_DIR, RESOLVED.parent, TIMESYNCD.parent}:
        for path in (root / directory).glob(f"{PREFIX}*") if (root / directory).is_dir() else ():
            if path.relative_to(root) not in wanted:
                path.unlink()
    return sorted(root / r for r in wanted)
