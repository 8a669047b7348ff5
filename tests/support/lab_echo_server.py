"""A real UDP backend for the namespace lab.

    lab_echo_server.py NAME PORTS     e.g. lab_echo_server.py b1 53,514,5514

Answers every datagram with JSON naming itself, the port it was reached on and the
client address and port it sees, on IPv4 and IPv6.
"""

from __future__ import annotations

import json
import selectors
import socket
import sys


def main() -> None:
    name, ports = sys.argv[1], [int(p) for p in sys.argv[2].split(",")]
    selector = selectors.DefaultSelector()
    for port in ports:
        sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(("::", port))
        selector.register(sock, selectors.EVENT_READ, port)
    while True:
        for key, _ in selector.select():
            data, peer = key.fileobj.recvfrom(2048)
            answer = {"backend": name, "port": key.data, "client": peer[0].removeprefix("::ffff:"), "sport": peer[1]}
            key.fileobj.sendto(json.dumps(answer).encode(), peer)


if __name__ == "__main__":
    main()
