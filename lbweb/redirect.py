"""Plain HTTP's only answer: 301 to the same path over HTTPS (a WSGI app, no Django).

Served by its own gunicorn (``lbweb/gunicorn_redirect_conf.py``) on ``LBWEB_HTTP_BIND`` (default
``0.0.0.0:8080``; port 80 on the appliance). ``https://<host>:<port><path>``: the host the client asked
for, without its port; the port is ``LBWEB_HTTPS_PORT``, by default the port of ``LBWEB_BIND`` (8000), and
left out when it is 443. Nothing else is served over plain HTTP, so no password or cookie ever crosses the
network in clear text because of lbweb (the session cookie is Secure: a browser never sends it here).
"""

from __future__ import annotations

import os
import re
from urllib.parse import quote

# A DNS name, an IPv4 address or a bracketed IPv6 address, then an optional port: anything else is refused
# (the Location header must carry nothing the client did not plainly ask for).
HOST = re.compile(r"^(?P<name>[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])(?::\d{1,5})?$")


def https_port() -> int:
    if os.environ.get("LBWEB_HTTPS_PORT"):
        return int(os.environ["LBWEB_HTTPS_PORT"])
    bind = os.environ.get("LBWEB_BIND", "0.0.0.0:8000")
    return int(bind.rsplit(":", 1)[1]) if ":" in bind else 8000


PORT = https_port()


def location(host: str, path: str, query: str) -> str | None:
    """The HTTPS URL for a request to ``host`` (the Host header) and ``path``; None for an invalid host."""
    match = HOST.match(host)
    if not match:
        return None
    authority = match["name"].lower() + ("" if PORT == 443 else f":{PORT}")
    # PEP 3333: PATH_INFO is the request's bytes read as latin-1; quote them back to a valid URL path.
    target = quote(path.encode("latin-1"), safe="/:@!$&'()*+,;=-._~%") or "/"
    query = quote(query.encode("latin-1"), safe="/:@!$&'()*+,;=-._~%?")
    return f"https://{authority}{target}" + (f"?{query}" if query else "")


def application(environ, start_response):
    url = location(environ.get("HTTP_HOST", ""), environ.get("PATH_INFO", "/"), environ.get("QUERY_STRING", ""))
    if url is None:
        body = b"Bad Request: a Host header naming this appliance is required.\n"
        start_response("400 Bad Request", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
        return [body]
    body = f"Moved to {url}\n".encode()
    start_response(
        "301 Moved Permanently",
        [("Location", url), ("Content-Type", "text/plain"), ("Content-Length", str(len(body)))],
    )
    return [body]
