"""The worker's side of System > Network: make the kernel's links, addresses and routes match a plan.

Only the worker imports this (pyroute2, CAP_NET_ADMIN); the web process writes the database and never
touches the kernel. It works in the network namespace of the calling thread, so the tests run it in
namespaces of their own.

lbweb owns what it declared: the interfaces of the plan; the VLANs and bonds it created; the addresses
and routes it added (the previous plan says which). Removing an address or a route lbweb never added,
or a device it did not create, is never done. Each object is applied on its own: one the kernel refuses
is reported by name with the kernel's words (and what they mean when the kernel lacks the feature),
and the others are still applied.
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from network.plan import InterfacePlan, Plan, RoutePlan

log = logging.getLogger("lbweb.network")

BOND_MODES = {
    "balance-rr": 0,
    "active-backup": 1,
    "balance-xor": 2,
    "broadcast": 3,
    "802.3ad": 4,
    "balance-tlb": 5,
    "balance-alb": 6,
}
MISSING_FEATURE = {
    "vlan": "this kernel cannot make VLAN devices (CONFIG_VLAN_8021Q, module 8021q)",
    "bond": "this kernel cannot make bonds (CONFIG_BONDING, module bonding)",
}
RTPROT_STATIC = 4
IFF_UP = 1


@dataclass
class Report:
    """What an apply did, and what the kernel refused (one line per object, by name)."""

    done: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


def _words(exc: Exception, kind: str | None = None) -> str:
    if isinstance(exc, NetlinkError) and exc.code == errno.EOPNOTSUPP and kind in MISSING_FEATURE:
        return f"{MISSING_FEATURE[kind]}. Kernel said: {exc.args[1] if len(exc.args) > 1 else exc}"
    if isinstance(exc, NetlinkError) and len(exc.args) > 1:
        return f"{exc.args[1]} (errno {exc.code})"
    return str(exc)


class NetworkKernel:
    """One apply, on one IPRoute socket."""

    def __init__(self, ipr: IPRoute):
        self.ipr = ipr
        self.report = Report()

    # -- helpers ------------------------------------------------------------------------------

    def index(self, name: str) -> int | None:
        found = self.ipr.link_lookup(ifname=name)
        return found[0] if found else None

    def link(self, name: str) -> Any | None:
        index = self.index(name)
        return self.ipr.get_links(index)[0] if index is not None else None

    @staticmethod
    def kind_of(link: Any) -> str | None:
        info = link.get_attr("IFLA_LINKINFO")
        return info.get_attr("IFLA_INFO_KIND") if info else None

    def attempt(self, what: str, action: Callable[[], object], kind: str | None = None) -> bool:
        try:
            action()
            self.report.done.append(what)
            return True
        except (NetlinkError, OSError, ValueError) as exc:
            self.report.errors.append(f"{what}: {_words(exc, kind)}")
            log.warning("network: %s refused: %s", what, exc)
            return False

    # -- the apply ----------------------------------------------------------------------------

    def apply(self, plan: Plan, previous: Plan) -> Report:
        self.remove_devices(plan, previous)
        for interface in plan.ordered():
            self.device(interface)
        for interface in plan.ordered():
            self.settings(interface, previous.interface(interface.name))
        self.addresses(plan, previous)
        self.routes(plan, previous)
        return self.report

    def remove_devices(self, plan: Plan, previous: Plan) -> None:
        """VLANs and bonds lbweb made that the plan no longer has (or has as something else); members
        lbweb put in a bond that leave it."""
        for old in sorted(previous.interfaces, key=lambda i: i.kind != "vlan"):  # VLANs before bonds
            new = plan.interface(old.name)
            if old.bond and (new is None or new.bond != old.bond):
                index = self.index(old.name)
                if index is not None:
                    self.attempt(
                        f"{old.name} leaves bond {old.bond}", lambda i=index: self.ipr.link("set", index=i, master=0)
                    )
            if old.created_by_lbweb and (new is None or _device_changed(old, new)):
                index = self.index(old.name)
                if index is not None:
                    self.attempt(f"delete {old.kind} {old.name}", lambda i=index: self.ipr.link("del", index=i))

    def device(self, interface: InterfacePlan) -> None:
        link = self.link(interface.name)
        if interface.kind == "ethernet":
            if link is None:
                self.report.errors.append(f"{interface.name}: no such interface on this machine")
            return
        if link is not None:
            if self.kind_of(link) != interface.kind:
                self.report.errors.append(
                    f"{interface.name}: a {self.kind_of(link) or 'device'} of that name exists, "
                    f"not lbweb's {interface.kind}"
                )
            return
        if interface.kind == "bond":
            mode = BOND_MODES[interface.bond_mode]
            self.attempt(
                f"create bond {interface.name}",
                lambda: self.ipr.link("add", ifname=interface.name, kind="bond", bond_mode=mode),
                kind="bond",
            )
        elif interface.kind == "vlan":
            parent = self.index(interface.parent or "")
            if parent is None:
                self.report.errors.append(f"create vlan {interface.name}: its parent {interface.parent} does not exist")
                return
            self.attempt(
                f"create vlan {interface.name}",
                lambda: self.ipr.link(
                    "add", ifname=interface.name, kind="vlan", link=parent, vlan_id=interface.vlan_id
                ),
                kind="vlan",
            )

    def settings(self, interface: InterfacePlan, before: InterfacePlan | None) -> None:
        link = self.link(interface.name)
        if link is None:
            return
        index = link["index"]
        if interface.bond:
            bond = self.index(interface.bond)
            if bond is not None and link.get_attr("IFLA_MASTER") != bond:
                self.attempt(f"{interface.name} joins bond {interface.bond}", lambda: self._enslave(index, bond))
                link = self.ipr.get_links(index)[0]
        if interface.mtu is not None and link.get_attr("IFLA_MTU") != interface.mtu:
            self.attempt(
                f"{interface.name} mtu {interface.mtu}", lambda: self.ipr.link("set", index=index, mtu=interface.mtu)
            )
        up = bool(link["flags"] & IFF_UP)
        if up != interface.enabled:
            state = "up" if interface.enabled else "down"
            self.attempt(f"{interface.name} {state}", lambda: self.ipr.link("set", index=index, state=state))

    def _enslave(self, index: int, bond: int) -> None:
        self.ipr.link("set", index=index, state="down")  # the kernel enslaves only a link that is down
        self.ipr.link("set", index=index, master=bond)

    def addresses(self, plan: Plan, previous: Plan) -> None:
        before = {(i.name, a) for i in previous.interfaces for a in i.addresses}
        wanted = {(i.name, a) for i in plan.interfaces for a in i.addresses}
        for name, address in sorted(before - wanted):
            index = self.index(name)
            if index is not None and address in self.present(index):
                value = ipaddress.ip_interface(address)
                self.attempt(
                    f"remove {address} from {name}",
                    lambda i=index, v=value: self.ipr.addr(
                        "del", index=i, address=str(v.ip), prefixlen=v.network.prefixlen
                    ),
                )
        for name, address in sorted(wanted):
            index = self.index(name)
            if index is None:
                continue  # reported with its interface
            if address not in self.present(index):
                value = ipaddress.ip_interface(address)
                self.attempt(
                    f"add {address} to {name}",
                    lambda i=index, v=value: self.ipr.addr(
                        "add", index=i, address=str(v.ip), prefixlen=v.network.prefixlen
                    ),
                )

    def present(self, index: int) -> set[str]:
        return {f"{a.get_attr('IFA_ADDRESS')}/{a['prefixlen']}" for a in self.ipr.get_addr(index=index)}

    def routes(self, plan: Plan, previous: Plan) -> None:
        for route in sorted(set(previous.routes) - set(plan.routes), key=str):
            self.attempt(f"remove route {_route_name(route)}", lambda r=route: self._route("del", r), kind=None)
        for route in sorted(plan.routes, key=str):
            self.attempt(f"route {_route_name(route)}", lambda r=route: self._route("replace", r))

    def _route(self, command: str, route: RoutePlan) -> None:
        spec: dict[str, Any] = {
            "dst": route.destination,
            "family": socket.AF_INET6 if route.family == 6 else socket.AF_INET,
            "priority": route.metric,
            "proto": RTPROT_STATIC,
        }
        if route.gateway:
            spec["gateway"] = route.gateway
        if route.interface:
            index = self.index(route.interface)
            if index is None:
                raise ValueError(f"interface {route.interface} does not exist")
            spec["oif"] = index
        try:
            self.ipr.route(command, **spec)
        except NetlinkError as exc:
            if command == "del" and exc.code in (errno.ESRCH, errno.ENOENT):
                return  # gone already (its address went, or someone removed it)
            raise


def _device_changed(old: InterfacePlan, new: InterfacePlan) -> bool:
    return (old.kind, old.parent, old.vlan_id, old.bond_mode) != (new.kind, new.parent, new.vlan_id, new.bond_mode)


def _route_name(route: RoutePlan) -> str:
    text = "default" if route.destination in ("0.0.0.0/0", "::/0") else route.destination
    via = f" via {route.gateway}" if route.gateway else ""
    dev = f" dev {route.interface}" if route.interface else ""
    return f"{text}{via}{dev}"


def apply(plan: Plan, previous: Plan) -> Report:
    with IPRoute() as ipr:
        return NetworkKernel(ipr).apply(plan, previous)


def observe() -> dict[str, Any]:
    """Every link with its kind, state, MTU, master and addresses, and the main table's routes."""
    with IPRoute() as ipr:
        names = {link["index"]: link.get_attr("IFLA_IFNAME") for link in ipr.get_links()}
        links = []
        for link in ipr.get_links():
            index = link["index"]
            addresses = [
                f"{a.get_attr('IFA_ADDRESS')}/{a['prefixlen']}"
                for a in ipr.get_addr(index=index)
                if not ipaddress.ip_address(a.get_attr("IFA_ADDRESS")).is_link_local
            ]
            links.append(
                {
                    "name": names[index],
                    "kind": NetworkKernel.kind_of(link) or ("loopback" if names[index] == "lo" else "ethernet"),
                    "up": bool(link["flags"] & IFF_UP),
                    "state": link.get_attr("IFLA_OPERSTATE"),
                    "mtu": link.get_attr("IFLA_MTU"),
                    "mac": link.get_attr("IFLA_ADDRESS"),
                    "master": names.get(link.get_attr("IFLA_MASTER")),
                    "addresses": addresses,
                }
            )
        routes = []
        for family in (socket.AF_INET, socket.AF_INET6):
            for r in ipr.get_routes(table=254, family=family):
                dst = r.get_attr("RTA_DST")
                routes.append(
                    {
                        "destination": f"{dst}/{r['dst_len']}"
                        if dst
                        else ("0.0.0.0/0" if family == socket.AF_INET else "::/0"),
                        "gateway": r.get_attr("RTA_GATEWAY"),
                        "interface": names.get(r.get_attr("RTA_OIF")),
                        "metric": r.get_attr("RTA_PRIORITY") or 0,
                        "proto": r["proto"],
                    }
                )
    return {"links": sorted(links, key=lambda link: link["name"]), "routes": routes}
