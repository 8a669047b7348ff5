"""What the worker's network namespace knows about its links and neighbours (pyroute2), for DSR and offload.

Only the worker calls this: it runs where the rules apply.
"""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import socket
import time

from pyroute2 import IPRoute

from compiler.spec import FarmSpec


class LinkError(Exception):
    """A farm needs something this namespace cannot provide (an interface, a neighbour's MAC)."""


def interface_mac(name: str) -> str:
    with IPRoute() as ipr:
        links = ipr.link_lookup(ifname=name)
        if not links:
            raise LinkError(f"interface '{name}' does not exist on this appliance")
        return ipr.get_links(links[0])[0].get_attr("IFLA_ADDRESS")


def _neighbour_mac(ipr: IPRoute, address: str, ifindex: int) -> str | None:
    family = socket.AF_INET6 if ipaddress.ip_address(address).version == 6 else socket.AF_INET
    for entry in ipr.get_neighbours(family=family, dst=address, ifindex=ifindex):
        mac = entry.get_attr("NDA_LLADDR")
        if mac and entry["state"] not in (0x20, 0x01):  # NUD_FAILED, NUD_INCOMPLETE
            return mac
    return None


def _provoke_resolution(address: str) -> None:
    family = socket.AF_INET6 if ipaddress.ip_address(address).version == 6 else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as sock, contextlib.suppress(OSError):
        sock.sendto(b"", (address, 9))  # discard port: the kernel resolves the neighbour to send it


def neighbour_mac(address: str, interface: str, wait: float = 1.0) -> str:
    """The MAC of a backend on the DSR interface, from the neighbour table (resolving it if needed)."""
    with IPRoute() as ipr:
        links = ipr.link_lookup(ifname=interface)
        if not links:
            raise LinkError(f"interface '{interface}' does not exist on this appliance")
        mac = _neighbour_mac(ipr, address, links[0])
        deadline = time.monotonic() + wait
        while mac is None and time.monotonic() < deadline:
            _provoke_resolution(address)
            time.sleep(0.05)
            mac = _neighbour_mac(ipr, address, links[0])
    if mac is None:
        raise LinkError(
            f"cannot resolve the MAC of backend {address} on {interface} (no ARP/ND answer); "
            "check it is on that layer-2 segment or set its MAC"
        )
    return mac


def resolve_dsr(spec: FarmSpec) -> FarmSpec:
    """Fill in the interface's MAC and every backend's MAC that was not configured."""
    backends = tuple(
        b
        if b.mac or not (b.sticky if spec.persistence else b.eligible)
        else dataclasses.replace(b, mac=neighbour_mac(b.address, b.oface or spec.oface or spec.interface))
        for b in spec.backends
    )
    return dataclasses.replace(spec, interface_mac=interface_mac(spec.interface), backends=backends)


def forwarding_devices() -> tuple[str, ...]:
    """Every interface that is up, except loopback: where a flowtable hooks."""
    with IPRoute() as ipr:
        names = [
            link.get_attr("IFLA_IFNAME")
            for link in ipr.get_links()
            if link.get_attr("IFLA_OPERSTATE") in ("UP", "UNKNOWN") and link.get_attr("IFLA_IFNAME") != "lo"
        ]
    return tuple(sorted(names))
