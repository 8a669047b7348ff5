"""One RADIUS question, asked with pyrad: is this name and password good, and with which attributes?

Every request carries a Message-Authenticator (pyrad adds it: the BlastRADIUS countermeasure, CVE-2024-3596); a
reply is accepted only when it verifies with the shared secret, and, unless the settings allow an older server,
only when it carries a Message-Authenticator too (``enforce_ma``). The password is sent as RFC 2865's
User-Password hides it, the only way PAP sends one.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from pathlib import Path

from pyrad import packet
from pyrad.client import Client, Timeout
from pyrad.dictionary import Dictionary

from .models import RadiusSettings

DICTIONARY = Path(__file__).with_name("radius_dictionary")


class RadiusUnreachable(Exception):
    """No server gave a reply that verifies with the secret (down, unreachable, lbweb not a client, wrong secret)."""


@dataclass
class RadiusAnswer:
    accepted: bool
    server: str
    attributes: dict[str, list[str]] = field(default_factory=dict)

    @property
    def reply_message(self) -> str:
        return " ".join(self.attributes.get("Reply-Message", []))


def _text(value) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def client_for(row: RadiusSettings, server: str) -> Client:
    client = Client(
        server=server,
        authport=row.port,
        secret=row.secret.encode(),
        dict=Dictionary(str(DICTIONARY)),
        retries=row.retries,
        timeout=row.timeout,
        enforce_ma=row.require_message_authenticator,
    )
    return client


def access_request(row: RadiusSettings, client: Client, username: str, password: str):
    request = client.CreateAuthPacket(code=packet.AccessRequest, User_Name=username)
    request["User-Password"] = request.PwCrypt(password)
    request["NAS-Identifier"] = row.nas_identifier
    request["Service-Type"] = "Administrative-User"
    return request


def authenticate(row: RadiusSettings, username: str, password: str) -> RadiusAnswer:
    """Ask the first server, then the secondary when the first gives no verified reply."""
    for server in row.servers():
        client = client_for(row, server)
        try:
            reply = client.SendPacket(access_request(row, client, username, password))
        except (Timeout, OSError):
            continue
        finally:
            client._CloseSocket()
        names = [name for name in reply.keys() if isinstance(name, str)]  # noqa: SIM118 (iterating gives codes)
        attributes = {name: [_text(value) for value in reply[name]] for name in names}
        return RadiusAnswer(accepted=reply.code == packet.AccessAccept, server=server, attributes=attributes)
    raise RadiusUnreachable(", ".join(f"{server}:{row.port}" for server in row.servers()))


def probe(row: RadiusSettings, server: str) -> str:
    """What a connected UDP socket learns from one Status-Server (RFC 5997): "refused" (an ICMP port
    unreachable: nothing listens there), "verified" (a reply that verifies with the secret), "no-authenticator" (it
    verifies, but carries no Message-Authenticator while the settings require one), "unverified" (a reply that
    does not verify: the secret differs), or "silent" (no reply: down, filtered, not a client, or wrong secret)."""
    client = client_for(row, server)
    status = client.CreateAuthPacket(code=packet.StatusServer)
    raw = status.RequestPacket()
    try:
        family, _, _, _, address = socket.getaddrinfo(server, row.port, type=socket.SOCK_DGRAM)[0]
    except socket.gaierror:
        return "silent"
    with socket.socket(family, socket.SOCK_DGRAM) as sock:
        sock.settimeout(row.timeout)
        try:
            sock.connect(address)
            sock.send(raw)
            data = sock.recv(4096)
        except ConnectionRefusedError:
            return "refused"
        except (TimeoutError, OSError):
            return "silent"
    try:
        reply = status.CreateReply(packet=data)
        if status.VerifyReply(reply, data, enforce_ma=row.require_message_authenticator):
            return "verified"
        return "no-authenticator" if status.VerifyReply(reply, data, enforce_ma=False) else "unverified"
    except packet.PacketError:
        return "unverified"
