"""A backend for the namespace lab that can start failing mid-run (issue 43, part 3).

    lab_flaky_server.py NAME ADDRESS PORT

Answers every GET with JSON naming itself, the client address it sees and the request's headers; while failing,
with 503. A POST answers the same way, with the count of POSTs received. ``PUT /lbweb-fail`` starts failing,
``DELETE /lbweb-fail`` stops (the tests send them straight to the backend, not through the load balancer).
"""

from __future__ import annotations

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    failing = False
    posts = 0  # POST requests received (a request sent twice counts twice)


def handler_for(name: str) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def answer(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            headers = {k.lower(): v for k, v in self.headers.items()}
            body = {"backend": name, "client": self.client_address[0], "headers": headers}
            self.answer(503 if self.server.failing else 200, body)

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.server.posts += 1
            self.answer(503 if self.server.failing else 200, {"backend": name, "posts": self.server.posts})

        def do_PUT(self) -> None:
            self.server.failing = True
            self.answer(200, {"backend": name, "failing": True})

        def do_DELETE(self) -> None:
            self.server.failing = False
            self.answer(200, {"backend": name, "failing": False})

        def log_message(self, *args) -> None:
            pass

    return Handler


if __name__ == "__main__":
    name, address, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    Server((address, port), handler_for(name)).serve_forever()
