"""A real HTTP/1.1 backend for the namespace lab.

    lab_server.py NAME PORTS     e.g. lab_server.py b1 80,8080

Answers every GET with JSON naming itself, the port it was reached on and
the client address it sees, on IPv4 and IPv6, with keep-alive.
``GET /bytes/N`` answers N bytes instead (known traffic for the metrics tests).
"""

from __future__ import annotations

import json
import socket
import sys
import threading
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
            if self.path.startswith("/bytes/"):
                body, kind = b"x" * int(self.path.removeprefix("/bytes/")), "application/octet-stream"
            else:
                answer = {"backend": name, "client": client, "port": self.server.server_address[1]}
                answer["client_port"] = self.client_address[1]
                body, kind = json.dumps(answer).encode(), "application/json"
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    return Handler


def main() -> None:
    name, ports = sys.argv[1], [int(p) for p in sys.argv[2].split(",")]
    servers = [DualStackServer(("::", port), handler_for(name)) for port in ports]
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in servers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


if __name__ == "__main__":
    main()
