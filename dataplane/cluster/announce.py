"""Tell the segment that a floating address moved: gratuitous ARP (IPv4) and unsolicited neighbour
advertisement (IPv6), sent by the new master right after it adds the address, so routers and backends
update their neighbour caches at once instead of after their entries age out.

keepalived would send these for its own ``virtual_ipaddress``; lbweb adds the addresses itself (after the
conntrack commit, see ``compiler.cluster.render``), so it announces them itself. Packets only, no protocol logic.
"""

from __future__ import annotations

import ipaddress
import socket
import struct

ETH_P_ARP = 0x0806
BROADCAST = b"\xff" * 6


def _mac(interface: str) -> bytes:
    with open(f"/sys/class/net/{interface}/address") as f:
        return bytes.fromhex(f.read().strip().replace(":", ""))


def gratuitous_arp(interface: str, address: str) -> None:
    """An ARP request for ``address`` from ``address`` (RFC 5227's announcement), broadcast on ``interface``."""
    mac, ip = _mac(interface), socket.inet_aton(address)
    arp = struct.pack("!HHBBH6s4s6s4s", 1, 0x0800, 6, 4, 1, mac, ip, b"\x00" * 6, ip)
    frame = BROADCAST + mac + struct.pack("!H", ETH_P_ARP) + arp
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as sock:
        sock.bind((interface, ETH_P_ARP))
        sock.send(frame)


def unsolicited_na(interface: str, address: str) -> None:
    """A neighbour advertisement for ``address`` to all nodes (ff02::1), override flag set (RFC 4861 7.2.6)."""
    mac = _mac(interface)
    target = ipaddress.IPv6Address(address).packed
    # type 136, code 0, checksum (the kernel fills it), flags: override; target; option 2 (target link-layer)
    message = struct.pack("!BBHI16sBB6s", 136, 0, 0, 0x20000000, target, 2, 1, mac)
    with socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, interface.encode())
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_HOPS, 255)
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_UNICAST_HOPS, 255)
        sock.bind((address, 0, 0, socket.if_nametoindex(interface)))
        sock.sendto(message, ("ff02::1", 0, 0, socket.if_nametoindex(interface)))


def announce(interface: str, address: str) -> None:
    if ipaddress.ip_address(address).version == 6:
        unsolicited_na(interface, address)
    else:
        gratuitous_arp(interface, address)
