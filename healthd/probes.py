"""One probe of one backend, for each check type: plain asyncio, no Django.

Every probe returns a :class:`ProbeResult`. ``local=True`` means healthd
itself could not probe (no permission for ICMP, a command that does not
exist, a command prober that does not answer, no route of its own, no
descriptors left): that says nothing about the backend, so it never counts
as a failure.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import os
import shlex
import socket
import ssl
import struct
from dataclasses import dataclass

import h11

from . import prober
from .icmp import Pinger

BODY_LIMIT = 64 * 1024
USER_AGENT = "lbweb-healthd"
# Errors of this appliance, not of the backend: no route of its own, no source address, out of descriptors or
# buffers, its own firewall refusing the probe. They never count against a backend.
LOCAL_ERRNOS = frozenset(
    {errno.ENETUNREACH, errno.EADDRNOTAVAIL, errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM, errno.EPERM}
)
NETWORK_ERRNOS = frozenset({errno.ENETUNREACH, errno.EADDRNOTAVAIL})  # its own network: other probes are spoilt too


@dataclass(frozen=True)
class CheckSpec:
    """A farm's health check settings, as healthd uses them."""

    type: str
    interval: float = 2.0
    timeout: float = 1.0
    rise: int = 2
    fall: int = 3
    http_method: str = "GET"
    http_path: str = "/"
    http_statuses: tuple[tuple[int, int], ...] = ((200, 399),)
    http_body: str = ""
    http_host: str = ""
    tls_verify: bool = False
    udp_send: str = ""
    udp_expect: str = ""
    command: str = ""


@dataclass(frozen=True)
class Target:
    """One backend to probe: where, and with which check."""

    backend_id: int
    farm_id: int
    address: str
    port: int | None
    check: CheckSpec


@dataclass(frozen=True)
class ProbeResult:
    ok: bool
    reason: str
    local: bool = False
    # healthd's own trouble that also spoils every other probe in flight: its network, a stalled event loop
    widespread: bool = False
    # timed by the command prober on its own clock (from when it got the request): healthd's lateness is not its
    prober_timed: bool = False


def _family(address: str) -> int:
    return socket.AF_INET if ipaddress.ip_address(address).version == 4 else socket.AF_INET6


def _failure(exc: BaseException, what: str, timeout: float) -> ProbeResult:
    if isinstance(exc, TimeoutError):
        return ProbeResult(False, f"{what}: no answer within {timeout:g}s")
    if isinstance(exc, ssl.SSLCertVerificationError):
        return ProbeResult(False, f"{what}: TLS certificate verify failed ({exc.verify_message})")
    if isinstance(exc, ssl.SSLError):
        return ProbeResult(False, f"{what}: TLS {(exc.reason or str(exc)).lower().replace('_', ' ')}")
    if isinstance(exc, OSError) and exc.errno in LOCAL_ERRNOS:
        reason = f"{what}: healthd's own error: {os.strerror(exc.errno).lower()}"
        return ProbeResult(False, reason, local=True, widespread=exc.errno in NETWORK_ERRNOS)
    if isinstance(exc, OSError) and exc.errno:
        return ProbeResult(False, f"{what}: {os.strerror(exc.errno).lower()}")
    return ProbeResult(False, f"{what}: {exc!r}")


async def tcp(target: Target) -> ProbeResult:
    """Healthy when the backend completes a TCP handshake; the socket is then reset (no TIME_WAIT)."""
    loop = asyncio.get_running_loop()
    sock = socket.socket(_family(target.address), socket.SOCK_STREAM)
    sock.setblocking(False)
    try:
        async with asyncio.timeout(target.check.timeout):
            await loop.sock_connect(sock, (target.address, target.port))
        return ProbeResult(True, f"TCP port {target.port} open")
    except (OSError, TimeoutError) as exc:
        return _failure(exc, f"TCP connect to port {target.port}", target.check.timeout)
    finally:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()


def _host_header(target: Target) -> str:
    if target.check.http_host:
        return target.check.http_host
    host = f"[{target.address}]" if ":" in target.address else target.address
    default = 443 if target.check.type == "https" else 80
    return host if target.port == default else f"{host}:{target.port}"


def _tls_context(check: CheckSpec) -> ssl.SSLContext:
    context = ssl.create_default_context()
    if not check.tls_verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


async def http(target: Target) -> ProbeResult:
    """One HTTP/1.1 request (Connection: close); healthy on an expected status and, if asked, body text."""
    check = target.check
    what = f"{check.type.upper()} {check.http_method} {check.http_path}"
    writer = None
    try:
        async with asyncio.timeout(check.timeout):
            tls = _tls_context(check) if check.type == "https" else None
            server_name = check.http_host.rsplit(":", 1)[0] if check.http_host else None
            reader, writer = await asyncio.open_connection(
                target.address, target.port, ssl=tls, server_hostname=server_name if tls else None
            )
            status, body = await _exchange(reader, writer, check, _host_header(target))
    except (OSError, TimeoutError, ssl.SSLError, h11.ProtocolError) as exc:
        return _failure(exc, what, check.timeout)
    finally:
        if writer is not None:
            writer.transport.abort()
    if not any(low <= status <= high for low, high in check.http_statuses):
        return ProbeResult(False, f"{what}: status {status}")
    if check.http_body and check.http_body.encode() not in body:
        return ProbeResult(False, f"{what}: status {status} but the body lacks {check.http_body!r}")
    return ProbeResult(True, f"{what}: status {status}")


async def _exchange(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, check: CheckSpec, host: str
) -> tuple[int, bytes]:
    conn = h11.Connection(h11.CLIENT)
    headers = [("Host", host), ("User-Agent", USER_AGENT), ("Connection", "close"), ("Content-Length", "0")]
    writer.write(conn.send(h11.Request(method=check.http_method, target=check.http_path, headers=headers)))
    writer.write(conn.send(h11.EndOfMessage()))
    status, body = 0, bytearray()
    needle = check.http_body.encode()
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await reader.read(BODY_LIMIT))
        elif isinstance(event, h11.Response):
            status = event.status_code
            if not needle:
                return status, b""
        elif isinstance(event, h11.Data):
            body += event.data
            if needle in body or len(body) >= BODY_LIMIT:
                return status, bytes(body)
        elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
            return status, bytes(body)


async def udp(target: Target) -> ProbeResult:
    """Send the payload; healthy on a reply (containing the expected text, if any) within the timeout."""
    check = target.check
    loop = asyncio.get_running_loop()
    what = f"UDP port {target.port}"
    with socket.socket(_family(target.address), socket.SOCK_DGRAM) as sock:
        sock.setblocking(False)
        try:
            async with asyncio.timeout(check.timeout):
                await loop.sock_connect(sock, (target.address, target.port))
                await loop.sock_sendall(sock, check.udp_send.encode())
                reply = await loop.sock_recv(sock, 65535)
        except (OSError, TimeoutError) as exc:
            return _failure(exc, what, check.timeout)
    if check.udp_expect and check.udp_expect.encode() not in reply:
        return ProbeResult(False, f"{what}: the reply lacks {check.udp_expect!r}")
    return ProbeResult(True, f"{what}: {len(reply)}-byte reply")


async def command(target: Target) -> ProbeResult:
    """Have the prober run the command (no shell; {address} and {port} replaced); exit status 0 means healthy.

    healthd never spawns it itself: the prober runs it as ``lbweb-probe`` with an empty environment
    and kills its process group at the timeout (see ``prober``). A prober that does not answer is
    healthd's own trouble: the backend keeps its health and health-status says "impaired".
    """
    check = target.check
    port = "" if target.port is None else str(target.port)
    argv = [arg.replace("{address}", target.address).replace("{port}", port) for arg in shlex.split(check.command)]
    try:
        answer = await prober.ask(argv, check.timeout)
    except prober.ProberUnavailable as exc:
        return ProbeResult(False, str(exc), local=True)
    if answer.error:
        return ProbeResult(False, answer.error, local=answer.local)
    if answer.timed_out and answer.late > prober.STALL_GRACE:  # the command may have been starved of its time
        reason = f"the command prober stalled: a {check.timeout:g}s timeout fired {answer.late:.2f}s late"
        return ProbeResult(False, reason, local=True)
    if answer.timed_out:
        return ProbeResult(False, f"command still running after {check.timeout:g}s: killed", prober_timed=True)
    if answer.exit == 0:
        return ProbeResult(True, "command exited 0", prober_timed=True)
    return ProbeResult(False, f"command exited {answer.exit} {answer.stderr}".strip()[:200], prober_timed=True)


async def icmp(target: Target, pinger: Pinger) -> ProbeResult:
    """Healthy on an ICMP echo reply within the timeout."""
    try:
        rtt = await pinger.ping(target.address, target.check.timeout)
    except PermissionError as exc:
        return ProbeResult(False, f"ICMP: {exc}", local=True)
    except (OSError, TimeoutError) as exc:
        return _failure(exc, "ICMP echo", target.check.timeout)
    return ProbeResult(True, f"ICMP echo reply in {rtt * 1000:.1f} ms")


async def probe(target: Target, pinger: Pinger) -> ProbeResult:
    """Probe one backend once with its farm's check."""
    kind = target.check.type
    try:
        if kind == "icmp":
            return await icmp(target, pinger)
        if kind in ("http", "https"):
            return await http(target)
        return await {"tcp": tcp, "udp": udp, "command": command}[kind](target)
    except OSError as exc:  # the probe could not even start: no socket, no descriptor left
        return ProbeResult(False, f"healthd cannot probe: {os.strerror(exc.errno or 0).lower()}", local=True)
