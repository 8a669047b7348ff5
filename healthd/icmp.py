"""ICMP echo for every ICMP check through one socket per address family.

A raw socket needs CAP_NET_RAW (the capability healthd gets for this); a
datagram "ping socket" works without it where ``net.ipv4.ping_group_range``
includes healthd's group. Replies are matched to their request by address and
sequence number, so a thousand backends share two sockets.
"""

from __future__ import annotations

import asyncio
import ipaddress
import itertools
import os
import socket
import struct
import time

ECHO_REQUEST = {socket.AF_INET: 8, socket.AF_INET6: 128}
ECHO_REPLY = {socket.AF_INET: 0, socket.AF_INET6: 129}
PROTOCOL = {socket.AF_INET: socket.IPPROTO_ICMP, socket.AF_INET6: socket.IPPROTO_ICMPV6}


def checksum(data: bytes) -> int:
    """The Internet checksum (RFC 1071)."""
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    total += total >> 16
    return ~total & 0xFFFF


class Pinger:
    """Sends echo requests and wakes the waiting probe when its reply comes back."""

    def __init__(self) -> None:
        self._sockets: dict[int, tuple[socket.socket, bool]] = {}  # family -> (socket, is_raw)
        self._waiting: dict[tuple[str, int], asyncio.Future[float]] = {}
        self._sequence = itertools.count(1)
        self._ident = os.getpid() & 0xFFFF

    def _socket(self, family: int) -> tuple[socket.socket, bool]:
        if family not in self._sockets:
            try:
                sock, raw = socket.socket(family, socket.SOCK_RAW, PROTOCOL[family]), True
            except PermissionError:
                try:
                    sock, raw = socket.socket(family, socket.SOCK_DGRAM, PROTOCOL[family]), False
                except PermissionError:
                    raise PermissionError("healthd needs CAP_NET_RAW (or net.ipv4.ping_group_range) to ping") from None
            sock.setblocking(False)
            asyncio.get_running_loop().add_reader(sock.fileno(), self._receive, family)
            self._sockets[family] = (sock, raw)
        return self._sockets[family]

    async def ping(self, address: str, timeout: float) -> float:
        """One echo request; returns the round-trip time, raises TimeoutError without a reply."""
        family = socket.AF_INET if ipaddress.ip_address(address).version == 4 else socket.AF_INET6
        sock, _raw = self._socket(family)
        sequence = next(self._sequence) & 0xFFFF
        key = (address, sequence)
        header = struct.pack("!BBHHH", ECHO_REQUEST[family], 0, 0, self._ident, sequence)
        payload = b"lbweb-healthd"
        packet = header + payload
        if family == socket.AF_INET:  # the kernel computes ICMPv6 checksums itself
            packet = struct.pack("!BBHHH", ECHO_REQUEST[family], 0, checksum(packet), self._ident, sequence) + payload
        future = asyncio.get_running_loop().create_future()
        self._waiting[key] = future
        started = time.monotonic()
        try:
            sock.sendto(packet, (address, 0))
            async with asyncio.timeout(timeout):
                await future
            return time.monotonic() - started
        finally:
            self._waiting.pop(key, None)

    def _receive(self, family: int) -> None:
        sock, raw = self._sockets[family]
        while True:
            try:
                data, peer = sock.recvfrom(2048)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # an ICMP error about some earlier request: the waiting probe times out
                continue
            if raw and family == socket.AF_INET:
                data = data[(data[0] & 0x0F) * 4 :]  # a raw IPv4 socket hands over the IP header too
            if len(data) < 8:
                continue
            kind, _code, _sum, ident, sequence = struct.unpack("!BBHHH", data[:8])
            if kind != ECHO_REPLY[family] or (raw and ident != self._ident):
                continue
            future = self._waiting.get((str(ipaddress.ip_address(peer[0])), sequence))
            if future is not None and not future.done():
                future.set_result(0.0)

    def close(self) -> None:
        for sock, _raw in self._sockets.values():
            asyncio.get_running_loop().remove_reader(sock.fileno())
            sock.close()
        self._sockets.clear()
