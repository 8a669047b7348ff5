"""A real UDP echo backend for the namespace labs.

    lab_udp_server.py NAME PORTS     e.g. lab_udp_server.py b1 514,5514

Answers every datagram with JSON naming itself, the address and port the
datagram was sent to, the client address it came from and the datagram's
size (a datagram that arrived in fragments is reassembled), on IPv4 and IPv6.
The answer leaves FROM the address the datagram was sent to (IP_PKTINFO /
IPV6_PKTINFO): a DSR backend holds the VIP on loopback and must answer from
the VIP, not from its interface's own address.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import selectors
import socket
import struct
import sys

IN_PKTINFO = struct.Struct("=i4s4s")  # ifindex, spec_dst, addr
IN6_PKTINFO = struct.Struct("=16si")  # addr, ifindex
IP_PKTINFO = getattr(socket, "IP_PKTINFO", 8)  # Linux value; the constant is missing before Python 3.12


def open_sockets(port: int) -> list[socket.socket]:
    v4 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    v4.setsockopt(socket.IPPROTO_IP, IP_PKTINFO, 1)
    v4.bind(("0.0.0.0", port))
    v6 = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    v6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    v6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RECVPKTINFO, 1)
    v6.bind(("::", port))
    return [v4, v6]


def answer(sock: socket.socket, name: str) -> None:
    data, ancillary, _flags, client = sock.recvmsg(65535, 256)
    local, reply_info = None, []
    for level, kind, raw in ancillary:
        if level == socket.IPPROTO_IP and kind == IP_PKTINFO:
            _ifindex, _spec, addr = IN_PKTINFO.unpack(raw[: IN_PKTINFO.size])
            local = str(ipaddress.IPv4Address(addr))
            reply_info = [(socket.IPPROTO_IP, IP_PKTINFO, IN_PKTINFO.pack(0, addr, bytes(4)))]
        elif level == socket.IPPROTO_IPV6 and kind == socket.IPV6_PKTINFO:
            addr, _ifindex = IN6_PKTINFO.unpack(raw[: IN6_PKTINFO.size])
            local = str(ipaddress.IPv6Address(addr))
            reply_info = [(socket.IPPROTO_IPV6, socket.IPV6_PKTINFO, IN6_PKTINFO.pack(addr, 0))]
    body = {
        "backend": name,
        "client": client[0],
        "to": local,
        "port": sock.getsockname()[1],
        "size": len(data),
        "echo": data[:64].decode(errors="replace"),
    }
    sock.sendmsg([json.dumps(body).encode()], reply_info, 0, client)


def main() -> None:
    name, ports = sys.argv[1], [int(p) for p in sys.argv[2].split(",")]
    selector = selectors.DefaultSelector()
    for port in ports:
        for sock in open_sockets(port):
            selector.register(sock, selectors.EVENT_READ)
    print("ready", flush=True)
    while True:
        for key, _ in selector.select():
            with contextlib.suppress(OSError):  # a client gone away (ICMP error queued): serve the others
                answer(key.fileobj, name)


if __name__ == "__main__":
    main()
