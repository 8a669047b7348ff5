"""A real backend for the namespace lab.

    lab_server.py NAME PORTS [--tls-port P --cert C --key K] [--udp-echo P]
    e.g. lab_server.py b1 80,8080

Answers every GET with JSON naming itself, the port it was reached on, the
client address it sees and the Host header it got, on IPv4 and IPv6, with
keep-alive; optionally the same over TLS, and a UDP echo (IPv4 and IPv6).
``GET /bytes/N`` answers N bytes instead (known traffic for the metrics tests); ``GET /sleep/MS/...`` answers
after MS milliseconds (a slow service). The JSON carries the request's path and headers too (the L7 tests).
"""

from __future__ import annotations

import argparse
import json
import socket
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class DualStackServer(ThreadingHTTPServer):
    address_family = socket.AF_INET6
    daemon_threads = True
    allow_reuse_address = True

    def server_bind(self) -> None:
        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()


def handler_for(name: str) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            client = self.client_address[0].removeprefix("::ffff:")
            if self.path.startswith("/sleep/"):
                time.sleep(int(self.path.split("/")[2]) / 1000)  # a slow service (the L7 capacity tests)
            if self.path.startswith("/bytes/"):
                body, kind = b"x" * int(self.path.removeprefix("/bytes/")), "application/octet-stream"
            else:
                answer = {"backend": name, "client": client, "port": self.server.server_address[1]}
                answer["client_port"] = self.client_address[1]
                answer["host"] = self.headers.get("Host", "")
                answer["path"] = self.path
                answer["headers"] = {k.lower(): v for k, v in self.headers.items()}
                body, kind = json.dumps(answer).encode(), "application/json"
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    return Handler


def udp_echo(port: int) -> None:
    sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    sock.bind(("::", port))
    while True:
        data, peer = sock.recvfrom(65535)
        sock.sendto(data, peer)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("name")
    parser.add_argument("ports", help="HTTP ports, comma separated (may be empty)")
    parser.add_argument("--tls-port", type=int)
    parser.add_argument("--cert")
    parser.add_argument("--key")
    parser.add_argument("--udp-echo", type=int)
    args = parser.parse_args()
    servers = [DualStackServer(("::", int(p)), handler_for(args.name)) for p in args.ports.split(",") if p]
    if args.tls_port:
        tls = DualStackServer(("::", args.tls_port), handler_for(args.name))
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(args.cert, args.key)
        tls.socket = context.wrap_socket(tls.socket, server_side=True)
        servers.append(tls)
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in servers]
    if args.udp_echo:
        threads.append(threading.Thread(target=udp_echo, args=(args.udp_echo,), daemon=True))
    for t in threads:
        t.start()
    for t in threads:
        t.join()


if __name__ == "__main__":
    main()
