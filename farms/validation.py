"""Validation helpers shared by the models: option combinations, addresses, MACs, session keys.

Every message names what is wrong and what to do, and is keyed by the field to fix.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata

from compiler.limits import LOG_PREFIX_BYTES, utf8_length
from compiler.ports import PortSyntaxError, overlaps, parse_port_number, parse_ports
from compiler.spec import HELPER_PROTOCOLS

from . import capabilities
from .choices import L7_MODES, FarmAllDownChoices, HashFieldChoices, LimitVerdictChoices
from .choices import FarmModeChoices as Mode
from .choices import FarmProtocolChoices as Proto
from .choices import FarmSchedulerChoices as Sched

MAC_RE = re.compile(r"^([0-9a-f]{2}[:-]){5}[0-9a-f]{2}$", re.I)
# Linux's dev_valid_name(): at most 15 bytes, no '/', ':' or white space, not "." or "..".
INTERFACE_RE = re.compile(r"[A-Za-z0-9_.@-]{1,15}", re.ASCII)
# Counters a farm owns besides its own "farm-<name>": a farm named "<other>-limit" would share one.
COUNTER_SUFFIXES = ("-limit", "-policy")


def parse_mac(text: str) -> str:
    if not MAC_RE.match(text.strip()):
        raise ValueError(f"'{text}' is not a MAC address like 02:00:00:00:00:01")
    return text.strip().lower().replace("-", ":")


def parse_address(text) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """An IPv4 or IPv6 address as the kernel takes it: ASCII, no zone id (``fe80::1%lo``: nftables
    matches addresses, not interfaces, so the zone would be dropped in silence)."""
    if not isinstance(text, str) or not text.isascii():
        raise ValueError(f"'{text}' is not an IPv4 or IPv6 address")
    if "%" in text:
        raise ValueError(f"'{text}' has a zone id (%...): nftables matches the address alone; remove it")
    try:
        return ipaddress.ip_address(text.strip())
    except ValueError:
        raise ValueError(f"'{text}' is not an IPv4 or IPv6 address") from None


def _special(address) -> str | None:
    """Why no packet is ever balanced to or from ``address``, or None."""
    if address.is_unspecified:
        return "is the unspecified address (it means 'any address', never a destination)"
    if address.is_multicast:
        return "is a multicast address (one packet to many receivers: conntrack and NAT cannot balance it)"
    if address.version == 4 and address == ipaddress.IPv4Address("255.255.255.255"):
        return "is the limited broadcast address"
    if address.version == 6 and address.ipv4_mapped is not None:
        return f"is an IPv4-mapped IPv6 address (such packets arrive as IPv4: use {address.ipv4_mapped})"
    return None


def vip_problem(address) -> str | None:
    """Why ``address`` cannot be a VIP, or None. Loopback and link-local VIPs are refused too: a loopback
    VIP with intra-connect takes over the appliance's own local services (its API among them) and is never
    reached from outside, and a link-local address is valid on one link only, which a VIP cannot say."""
    reason = _special(address)
    if reason:
        return f"{address} {reason}."
    if address.is_loopback:
        return (
            f"{address} is a loopback address: clients never reach it from the network, and with intra-connect "
            "it would take over the appliance's own local services."
        )
    if address.is_link_local:
        return f"{address} is link-local: valid on one link only, it cannot be a VIP."
    return None


def management_errors(farm) -> dict[str, str]:
    """Why ``farm`` (its VIP valid) would cut the appliance's own management off, keyed by the field to change.

    As a loopback VIP with intra-connect takes over the appliance's local services, a farm on one of the
    appliance's own addresses (network/appliance.py: its interfaces' as the worker read them, a cluster's
    management and node addresses) takes what reaches that address on its ports: on a port lbweb's UI and
    API listen on (settings.LBWEB_MANAGEMENT_PORTS, TCP, every address) the UI at that address would be gone,
    and with intra-connect the appliance's own connections to that address (its UI and API among them) would
    be balanced to the backends. Both are refused; a farm on an address that is not the appliance's own, or
    on other ports without intra-connect, is not concerned."""
    from django.conf import settings

    from network import appliance

    tcp = farm.protocol in (Proto.TCP, Proto.ALL)
    try:
        ranges = parse_ports(farm.ports) if farm.ports else [(1, 65535)]
    except PortSyntaxError:
        return {}  # reported on the field itself
    taken = [p for p in settings.LBWEB_MANAGEMENT_PORTS if tcp and any(lo <= p <= hi for lo, hi in ranges)]
    if not taken and not farm.intra_connect:
        return {}
    where = appliance.own_addresses().get(farm.vip)
    if where is None:
        return {}
    own = f"{farm.vip} is one of this appliance's own addresses ({where})"
    if taken:
        ports = " and ".join(str(p) for p in taken)
        return {
            "ports": f"{own}, and lbweb's UI and API listen on TCP port {ports} of every address: this farm would "
            f"take their connections to {farm.vip}, and whoever manages the appliance through it would be cut "
            "off. Use other ports, or an address that is not the appliance's own."
        }
    return {
        "intra_connect": f"{own}: with intra-connect, the appliance's own connections to it (its UI and API among "
        "them) would be balanced to the backends. Turn intra-connect off, or use an address that is not the "
        "appliance's own."
    }


def interface_errors(values: dict[str, str], before: dict[str, str]) -> dict[str, str]:
    """Interface names (field -> name; empty: none) that are not names Linux takes (checked always) or that the
    appliance has not (checked when the name is new or changed, so an edit elsewhere is never refused because
    an interface went away; network/appliance.py says what is known, and what is done while nothing is)."""
    from network import appliance

    errors: dict[str, str] = {}
    for field, name in values.items():
        if not name:
            continue
        if not INTERFACE_RE.fullmatch(name) or name in (".", ".."):
            errors[field] = (
                f"'{name}' is not an interface name: 1-15 letters, digits or _.@- (no '/', no white space; not "
                "'.' or '..')."
            )
        elif name != before.get(field):
            problem = appliance.missing_interface(name)
            if problem:
                errors[field] = problem
    return errors


def target_problem(address) -> str | None:
    """Why new connections cannot be sent (DNAT) to ``address`` (a backend, a fallback), or None."""
    reason = _special(address)
    return f"{address} {reason}." if reason else None


def parse_networks(text: str) -> list[str]:
    """Addresses and CIDRs separated by commas, spaces or lines; normalised, sorted, without duplicates."""
    out = set()
    for token in re.split(r"[\s,]+", text or ""):
        if not token:
            continue
        if not token.isascii() or "%" in token:
            raise ValueError(f"'{token}' is not an address or a network like 198.18.5.0/24 (no zone id)")
        try:
            net = ipaddress.ip_network(token, strict=False)
        except ValueError:
            raise ValueError(f"'{token}' is not an address or a network like 198.18.5.0/24") from None
        out.add(str(net.network_address) if net.prefixlen == net.max_prefixlen else str(net))
    networks = sorted(out, key=lambda n: (ipaddress.ip_network(n).version, ipaddress.ip_network(n)))
    _refuse_overlaps([ipaddress.ip_network(n) for n in networks])
    return networks


def _refuse_overlaps(networks: list) -> None:
    """The kernel's interval sets refuse overlapping elements ("conflicting intervals specified"):
    say which two overlap rather than let the apply fail. ``networks`` are sorted (family, address)."""
    previous = None
    for net in networks:
        if previous is not None and previous.version == net.version and previous.overlaps(net):
            raise ValueError(
                f"'{_shown(net)}' lies inside '{_shown(previous)}': the kernel refuses overlapping entries; "
                "keep only one of them"
            )
        if previous is None or previous.version != net.version or net.broadcast_address > previous.broadcast_address:
            previous = net


def _shown(net) -> str:
    return str(net.network_address) if net.prefixlen == net.max_prefixlen else str(net)


def parse_address_range(text: str, version: int) -> tuple[str, str]:
    low, _, high = text.strip().partition("-")
    try:
        a = parse_address(low.strip())
        b = parse_address(high.strip()) if high else a
    except ValueError:
        raise ValueError(f"'{text}' is not an address or a range like 198.18.1.1-198.18.1.4") from None
    if a.version != version or b.version != version:
        raise ValueError(f"the SNAT source must be IPv{version}, like the VIP")
    for address in (a, b):
        reason = _special(address) or ("is a loopback address" if address.is_loopback else None)
        if reason:
            raise ValueError(f"{address} {reason}; it cannot be a source address")
    if int(b) < int(a):
        raise ValueError(f"range '{text}' ends before it starts")
    return str(a), str(b)


def parse_port_range(text: str) -> tuple[int, int]:
    low, _, high = text.strip().partition("-")
    try:
        a, b = parse_port_number(low.strip()), parse_port_number((high or low).strip())
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
        match = re.match(r"^\[?([0-9a-fA-F:.]+?)\]?:([0-9]+)$", text)
        if not match:
            raise ValueError(f"'{client}' must be address:port ([v6]:port) for persistence by address and port")
        addr, port = match.group(1), int(match.group(2))
        if not 1 <= port <= 65535:
            raise ValueError(f"port {port} is out of range")
    else:
        addr, port = text, None
    try:
        parsed = parse_address(addr)
    except ValueError as exc:
        raise ValueError(str(exc)) from None
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
    elif fields and sched not in (Sched.HASH, Sched.MAGLEV):
        e["sched_param"] = "Hash fields apply only to the hash and maglev schedulers."
    elif proto == Proto.ALL and any(x in ("srcport", "dstport") for x in fields):
        e["sched_param"] = "A farm for all protocols has no ports to hash."
    if farm.persistence:
        # With any scheduler, as nftlb: a client bound by persistence goes back to its backend first.
        if proto == Proto.ALL and "srcport" in farm.persistence:
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
    if farm.helper and proto != Proto.ALL and proto not in HELPER_PROTOCOLS[farm.helper]:
        tracked = " and ".join(HELPER_PROTOCOLS[farm.helper])
        e["helper"] = f"The {farm.helper} helper tracks {tracked}; this farm is {proto}."
    if farm.rst_rtlimit and proto != Proto.TCP:
        e["rst_rtlimit"] = "Reset limits apply to TCP farms only."
    if farm.interface and mode != Mode.DSR:
        e["interface"] = "An interface is needed only by DSR farms."
    if not farm.count_bytes and mode not in (Mode.SNAT, Mode.DNAT, Mode.LOCAL):
        e["count_bytes"] = (
            "lbweb counts bytes only for NAT and local farms (DSR and stateless farms bypass conntrack; HTTP "
            "farms' figures are HAProxy's): there is no counting to turn off."
        )
    if mode == Mode.DSR:
        _dsr_errors(farm, e)
    if mode == Mode.STATELESS_DNAT:
        _stateless_errors(farm, e)
    if mode == Mode.LOCAL:
        _local_errors(farm, e)
    if mode in L7_MODES:
        from l7.validation import l7_farm_errors  # pure: HTTP farms run on HAProxy, other rules apply

        l7_farm_errors(farm, e)
        return e
    _text_errors(farm, e)
    _capability_errors(farm, e)
    return e


def _text_errors(farm, e: dict[str, str]) -> None:
    """Text that reaches the kernel, counted as the kernel counts it (see compiler.limits)."""
    prefix = farm.log_prefix or ""
    if utf8_length(prefix) > LOG_PREFIX_BYTES:
        e["log_prefix"] = (
            f"The kernel keeps at most {LOG_PREFIX_BYTES} bytes of a log prefix; this one is "
            f"{utf8_length(prefix)} bytes in UTF-8 (a character outside ASCII takes 2 to 4)."
        )
    elif any(unicodedata.category(c) in ("Cc", "Cs") for c in prefix):
        e["log_prefix"] = (
            "A log prefix cannot hold control characters (line breaks, tabs, NUL): they would forge or break log lines."
        )
    name = farm.name or ""
    for suffix in COUNTER_SUFFIXES:
        if name.endswith(suffix):
            e.setdefault(
                "name",
                f"A farm name cannot end with '{suffix}': the kernel counter 'farm-{name}' is the {suffix[1:]} "
                f"counter of a farm named '{name.removesuffix(suffix)}'.",
            )


def _capability_errors(farm, e: dict[str, str]) -> None:
    """What this kernel cannot do, as the worker probed it (GET /api/v1/capabilities/).

    Before the worker has published anything (it never ran, or Redis is down) nothing is refused here:
    the web process cannot probe the kernel itself, and refusing every flow offload or helper on a
    kernel that may well have them would be wrong more often than right. The apply then reports the
    kernel's refusal on the farm, with the same explanation.
    """
    wanted = farm.flow_offload or farm.helper or farm.limit_verdict == LimitVerdictChoices.REJECT
    wanted = wanted or farm.when_all_down == FarmAllDownChoices.REJECT
    known = capabilities.published() if wanted else None
    if not known:
        return
    for name, message in capabilities.missing(farm, known).items():
        e.setdefault(name, message)


def _dsr_errors(farm, e: dict[str, str]) -> None:
    if not farm.interface:
        e["interface"] = "DSR needs the interface facing the backends (they share its layer-2 segment)."
    elif not INTERFACE_RE.fullmatch(farm.interface) or farm.interface in (".", ".."):
        e["interface"] = f"'{farm.interface}' is not an interface name (1-15 letters, digits or _.@-; not '.' or '..')."
    if farm.protocol in (Proto.TCP, Proto.SCTP, Proto.ALL) and farm.scheduler not in (Sched.HASH, Sched.SYMHASH):
        carried = (
            "a farm for all protocols carries TCP, whose flows" if farm.protocol == Proto.ALL else "a TCP/SCTP flow"
        )
        e["scheduler"] = f"DSR keeps no connection state: {carried} must be hashed (hash or symhash)."
    if farm.scheduler == Sched.MAGLEV:
        e["scheduler"] = "DSR farms hash with hash or symhash; Maglev is for NAT farms."
    if farm.scheduler == Sched.LEASTCONN:
        e["scheduler"] = "DSR sees only one direction of a flow: least connections cannot be counted."
    for name, words in (
        ("helper", "conntrack helpers"),
        ("new_rtlimit", "rate limits"),
        ("est_connlimit", "connection limits"),
        ("rst_rtlimit", "reset limits"),
        ("tcp_strict", "tcp-strict"),
        ("intra_connect", "intra-connect"),
        ("flow_offload", "flow offload"),
    ):
        if getattr(farm, name):
            e.setdefault(name, f"DSR runs before conntrack at layer 2: {words} cannot apply.")
    if farm.log_forward or farm.log_output:  # 'log' (input) is logged at ingress, as nftlb does
        e.setdefault(
            "log_forward" if farm.log_forward else "log_output",
            "A DSR farm's frames are neither routed nor answered through the LB: log them as they arrive (log).",
        )
    if farm.source_addr:
        e.setdefault("source_addr", "DSR does not translate addresses: no SNAT source or pool.")


def _local_errors(farm, e: dict[str, str]) -> None:
    """nftlb's mode local: the VIP's service runs on the appliance itself. Its packets are filtered (policies,
    tcp-strict, limits) and logged on their way in, then delivered to the local socket: nothing is translated,
    scheduled or forwarded, so what only means something for a forwarded connection is refused here."""
    service = "a local farm hands every connection to the service listening on the VIP on the appliance"
    if farm.scheduler != Sched.ROUND_ROBIN or farm.sched_param:
        e.setdefault("scheduler", f"There is nothing to schedule: {service}; leave the scheduler at round robin.")
    if farm.persistence:
        e.setdefault("persistence", f"There is no backend to persist on: {service}.")
    if farm.when_all_down == FarmAllDownChoices.FALLBACK:
        e.setdefault("when_all_down", f"There is no backend to be down: {service}; leave it at 'reject'.")
    if farm.helper:
        e.setdefault(
            "helper", "A local farm sets no conntrack helper (nftlb neither): the service on the appliance answers."
        )
    if farm.mark:
        e.setdefault("mark", "A local farm's connections end on the appliance: no forwarded packet to route by mark.")
    if farm.log_forward or farm.log_output:
        e.setdefault(
            "log_forward" if farm.log_forward else "log_output",
            "A local farm's packets are neither forwarded nor sent on to a backend: log them as they arrive (log).",
        )
    if farm.flow_offload:
        e.setdefault("flow_offload", "Flow offload speeds up forwarded flows; a local farm's end on the appliance.")


def _stateless_errors(farm, e: dict[str, str]) -> None:
    if farm.protocol not in (Proto.UDP, Proto.TCP):
        e["protocol"] = "lbweb's stateless DNAT rewrites UDP or TCP (both ways); make one farm per protocol."
    if farm.scheduler == Sched.LEASTCONN:
        e["scheduler"] = "Stateless DNAT keeps no connection to count: least connections cannot apply."
    elif farm.protocol == Proto.TCP and farm.scheduler not in (Sched.HASH, Sched.SYMHASH, Sched.MAGLEV):
        e["scheduler"] = (
            "Stateless DNAT picks a backend for every packet: a TCP connection stays on one backend only "
            "with a hash (hash, symhash or maglev); nftlb would spread its packets over the backends."
        )
    if farm.persistence:
        e["persistence"] = (
            "lbweb does not keep persistence for stateless farms yet (nftlb keeps it in netdev maps); "
            "use a hash scheduler, or a dnat farm."
        )
    if farm.rst_rtlimit:
        e["rst_rtlimit"] = "lbweb does not limit the resets of stateless farms yet; use a dnat farm for that."
    for name, words in (
        ("helper", "conntrack helpers"),
        ("est_connlimit", "connection limits"),
        ("new_rtlimit", "per-client rate limits"),
        ("tcp_strict", "tcp-strict"),
        ("intra_connect", "intra-connect"),
        ("flow_offload", "flow offload"),
    ):
        if getattr(farm, name):
            e.setdefault(name, f"Stateless DNAT bypasses conntrack: {words} cannot apply.")


def reply_ports(farm, backend_port: int | None) -> dict[str, list[tuple[int, int]]]:
    """The ports, per protocol, a backend answers ``farm``'s clients from through the LB (none for DSR)."""
    if farm.mode == Mode.DSR:
        return {}
    if backend_port is not None:
        ranges = [(backend_port, backend_port)]
    elif not farm.ports:
        ranges = [(1, 65535)]
    else:
        try:
            ranges = parse_ports(farm.ports)
        except PortSyntaxError:
            return {}  # reported on the field itself
    protocols = (Proto.TCP, Proto.UDP, Proto.SCTP) if farm.protocol == Proto.ALL else (farm.protocol,)
    return {protocol: ranges for protocol in protocols}


def stateless_reply_clash(farm, address: str, port: int | None, elsewhere) -> str | None:
    """Stateless DNAT knows its replies only by backend address, protocol and source port: no other farm may
    share them.

    ``elsewhere`` holds the (farm, port) of every backend with the same address in another farm.
    """
    mine = reply_ports(farm, port)
    for other_farm, other_port in elsewhere:
        if Mode.STATELESS_DNAT not in (farm.mode, other_farm.mode):
            continue
        theirs = reply_ports(other_farm, other_port)
        for protocol in set(mine) & set(theirs):
            common = overlaps(mine[protocol], theirs[protocol])
            if common:
                return (
                    f"{address} {protocol.upper()} port {common[0][0]} already answers farm '{other_farm.name}'; "
                    "stateless DNAT recognises replies by backend address and port alone, so the two farms "
                    "would take each other's replies. Give one of them another backend port."
                )
    return None
