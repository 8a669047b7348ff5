"""Validation helpers shared by the models: option combinations, addresses, MACs, session keys.

Every message names what is wrong and what to do, and is keyed by the field to fix.
"""

from __future__ import annotations

import ipaddress
import re

from .choices import FarmModeChoices as Mode
from .choices import FarmProtocolChoices as Proto
from .choices import FarmSchedulerChoices as Sched
from .choices import HashFieldChoices
from .ports import PortSyntaxError, overlaps, parse_ports

MAC_RE = re.compile(r"^([0-9a-f]{2}[:-]){5}[0-9a-f]{2}$", re.I)
HELPER_PROTOCOL = {"ftp": "tcp", "pptp": "tcp", "irc": "tcp", "h323": "tcp", "tftp": "udp", "snmp": "udp",
                   "amanda": "udp", "sip": "udp"}  # fmt: skip


def parse_mac(text: str) -> str:
    if not MAC_RE.match(text.strip()):
        raise ValueError(f"'{text}' is not a MAC address like 02:00:00:00:00:01")
    return text.strip().lower().replace("-", ":")


def parse_networks(text: str) -> list[str]:
    """Addresses and CIDRs separated by commas, spaces or lines; normalised, sorted, without duplicates."""
    out = set()
    for token in re.split(r"[\s,]+", text or ""):
        if not token:
            continue
        try:
            net = ipaddress.ip_network(token, strict=False)
        except ValueError:
            raise ValueError(f"'{token}' is not an address or a network like 198.18.5.0/24") from None
        out.add(str(net.network_address) if net.prefixlen == net.max_prefixlen else str(net))
    return sorted(out, key=lambda n: (ipaddress.ip_network(n).version, ipaddress.ip_network(n)))


def parse_address_range(text: str, version: int) -> tuple[str, str]:
    low, _, high = text.strip().partition("-")
    try:
        a = ipaddress.ip_address(low.strip())
        b = ipaddress.ip_address(high.strip()) if high else a
    except ValueError:
        raise ValueError(f"'{text}' is not an address or a range like 198.18.1.1-198.18.1.4") from None
    if a.version != version or b.version != version:
        raise ValueError(f"the SNAT source must be IPv{version}, like the VIP")
    if int(b) < int(a):
        raise ValueError(f"range '{text}' ends before it starts")
    return str(a), str(b)


def parse_port_range(text: str) -> tuple[int, int]:
    low, _, high = text.strip().partition("-")
    try:
        a, b = int(low), int(high or low)
    except ValueError:
        raise ValueError(f"'{text}' is not a port range like 1024-65535") from None
    if not (1 <= a <= b <= 65535):
        raise ValueError(f"'{text}' is not a port range within 1-65535")
    return a, b


def session_key_parts(client: str, farm) -> tuple:
    """The persistence key of a static session, checked against the farm's persistence."""
    fields = farm.persistence.split()
    text = client.strip()
    if fields == ["srcmac"]:
        return (parse_mac(text),)
    version = ipaddress.ip_address(farm.vip).version
    if fields == ["srcip", "srcport"]:
        match = re.match(r"^\[?([0-9a-fA-F:.]+?)\]?:(\d+)$", text)
        if not match:
            raise ValueError(f"'{client}' must be address:port ([v6]:port) for persistence by address and port")
        addr, port = match.group(1), int(match.group(2))
        if not 1 <= port <= 65535:
            raise ValueError(f"port {port} is out of range")
    else:
        addr, port = text, None
    try:
        parsed = ipaddress.ip_address(addr)
    except ValueError:
        raise ValueError(f"'{addr}' is not an IP address") from None
    if parsed.version != version:
        raise ValueError(f"the farm's VIP is IPv{version}; the client must be too")
    return (str(parsed),) if port is None else (str(parsed), port)


def farm_option_errors(farm) -> dict[str, str]:
    """Combinations of options the kernel data plane cannot honour, keyed by the field to change."""
    e: dict[str, str] = {}
    mode, sched, proto = farm.mode, farm.scheduler, farm.protocol
    fields = farm.sched_param.split()
    unknown = [x for x in fields if x not in HashFieldChoices.values]
    if unknown:
        e["sched_param"] = f"Unknown hash field(s) {', '.join(unknown)}; use {', '.join(HashFieldChoices.values)}."
    elif sched == Sched.HASH and not fields:
        e["sched_param"] = "The hash scheduler needs the fields to hash, e.g. 'srcip' or 'srcip srcport'."
    elif fields and sched != Sched.HASH:
        e["sched_param"] = "Hash fields apply only to the hash scheduler."
    elif proto == Proto.ALL and any(x in ("srcport", "dstport") for x in fields):
        e["sched_param"] = "A farm for all protocols has no ports to hash."
    if farm.persistence:
        if sched == Sched.ROUND_ROBIN:
            e["persistence"] = (
                "Persistence cannot be combined with round robin (as in nftlb); use the weight scheduler."
            )
        elif sched in (Sched.HASH, Sched.SYMHASH):
            e["persistence"] = "A hash scheduler already sends a client to the same backend; persistence is not needed."
        elif proto == Proto.ALL and "srcport" in farm.persistence:
            e["persistence"] = "A farm for all protocols has no source port to persist on."
        elif farm.intra_connect and farm.persistence == "srcmac":
            e["persistence"] = "Connections from the appliance itself carry no source MAC."
    if (farm.source_addr or farm.source_ports) and mode != Mode.SNAT:
        e["source_addr" if farm.source_addr else "source_ports"] = "A SNAT source applies only to mode snat."
    if farm.source_ports and not e.get("source_ports"):
        try:
            parse_port_range(farm.source_ports)
        except ValueError as exc:
            e["source_ports"] = str(exc)
        if proto == Proto.ALL:
            e["source_ports"] = "A farm for all protocols has no ports to translate."
    if farm.source_addr and "source_addr" not in e and farm.vip:
        try:
            parse_address_range(farm.source_addr, ipaddress.ip_address(farm.vip).version)
        except ValueError as exc:
            e["source_addr"] = str(exc)
    if farm.helper and HELPER_PROTOCOL[farm.helper] != proto:
        e["helper"] = f"The {farm.helper} helper tracks {HELPER_PROTOCOL[farm.helper]}; this farm is {proto}."
    if farm.rst_rtlimit and proto != Proto.TCP:
        e["rst_rtlimit"] = "Reset limits apply to TCP farms only."
    if farm.interface and mode != Mode.DSR:
        e["interface"] = "An interface is needed only by DSR farms."
    if mode == Mode.DSR:
        _dsr_errors(farm, e)
    if mode == Mode.STATELESS_DNAT:
        _stateless_errors(farm, e)
    return e


def _dsr_errors(farm, e: dict[str, str]) -> None:
    if not farm.interface:
        e["interface"] = "DSR needs the interface facing the backends (they share its layer-2 segment)."
    elif not re.match(r"^[A-Za-z0-9_.:@-]{1,15}$", farm.interface):
        e["interface"] = f"'{farm.interface}' is not an interface name."
    if farm.protocol in (Proto.TCP, Proto.SCTP, Proto.ALL) and farm.scheduler not in (Sched.HASH, Sched.SYMHASH):
        carried = (
            "a farm for all protocols carries TCP, whose flows" if farm.protocol == Proto.ALL else "a TCP/SCTP flow"
        )
        e["scheduler"] = f"DSR keeps no connection state: {carried} must be hashed (hash or symhash)."
    if farm.scheduler == Sched.LEASTCONN:
        e["scheduler"] = "DSR sees only one direction of a flow: least connections cannot be counted."
    for name, words in (
        ("persistence", "persistence"),
        ("helper", "conntrack helpers"),
        ("new_rtlimit", "rate limits"),
        ("est_connlimit", "connection limits"),
        ("rst_rtlimit", "reset limits"),
        ("tcp_strict", "tcp-strict"),
        ("intra_connect", "intra-connect"),
        ("flow_offload", "flow offload"),
        ("log", "connection logging"),
    ):
        if getattr(farm, name):
            e.setdefault(name, f"DSR runs before conntrack at layer 2: {words} cannot apply.")
    if farm.source_addr:
        e.setdefault("source_addr", "DSR does not translate addresses: no SNAT source or pool.")


def _stateless_errors(farm, e: dict[str, str]) -> None:
    if farm.protocol != Proto.UDP:
        e["protocol"] = "Stateless DNAT is for UDP only: TCP needs conntrack to translate replies."
    if farm.scheduler == Sched.LEASTCONN:
        e["scheduler"] = "Stateless DNAT keeps no connection to count: least connections cannot apply."
    for name, words in (
        ("persistence", "persistence"),
        ("helper", "conntrack helpers"),
        ("est_connlimit", "connection limits"),
        ("new_rtlimit", "per-client rate limits"),
        ("tcp_strict", "tcp-strict"),
        ("intra_connect", "intra-connect"),
        ("flow_offload", "flow offload"),
    ):
        if getattr(farm, name):
            e.setdefault(name, f"Stateless DNAT bypasses conntrack: {words} cannot apply.")


def udp_reply_ports(farm, backend_port: int | None) -> list[tuple[int, int]]:
    """The UDP ports a backend answers ``farm``'s clients from, through the LB (none for DSR or TCP farms)."""
    if farm.protocol not in (Proto.UDP, Proto.ALL) or farm.mode == Mode.DSR:
        return []
    if backend_port is not None:
        return [(backend_port, backend_port)]
    if farm.protocol == Proto.ALL:
        return [(1, 65535)]
    try:
        return parse_ports(farm.ports)
    except PortSyntaxError:
        return []  # reported on the field itself


def stateless_reply_clash(farm, address: str, port: int | None, elsewhere) -> str | None:
    """Stateless DNAT knows its replies only by backend address and source port: no other farm may share them.

    ``elsewhere`` holds the (farm, port) of every backend with the same address in another farm.
    """
    mine = udp_reply_ports(farm, port)
    for other_farm, other_port in elsewhere:
        if Mode.STATELESS_DNAT not in (farm.mode, other_farm.mode):
            continue
        common = overlaps(mine, udp_reply_ports(other_farm, other_port))
        if common:
            return (
                f"{address} UDP port {common[0][0]} already answers farm '{other_farm.name}'; stateless DNAT "
                "recognises replies by backend address and port alone, so the two farms would take each "
                "other's replies. Give one of them another backend port."
            )
    return None
