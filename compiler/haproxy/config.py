"""The HAProxy configuration generator: ``EngineSpec`` in, the files HAProxy reads out. Pure (no Django, no I/O).

Deterministic: the same spec gives byte-identical files, so they are golden-tested and a preview can show the
difference between the configuration HAProxy runs and the one a change would give. The engine's static part
(``global``, ``defaults``) lives in ``deploy/haproxy.cfg``; this module writes ``lbweb.cfg`` (one ``frontend`` per
farm, one ``backend`` per service), the certificate lists, certificates and error pages beside it. Names carry
database ids (``f<farm>``, ``s<service>``, ``b<backend>``) so the runtime API and the stats socket map back to rows
whatever an operator renames.

No value an operator typed can become a directive or change meaning on its way (HAProxy's configuration manual,
section 2.2, "Quoting and escaping"): text is written in double quotes with backslash, quote and ``$`` escaped
(``quote``), so a ``#`` or a ``'`` inside is a character, not a comment or a quote; where HAProxy reads a log-format
string (header values, redirect targets) ``%`` is doubled (``log_format``), so ``%[...]`` is text, not a sample
expression; a name (header, cookie, host) is bare when it holds only letters, digits and ``-_.`` and quoted
otherwise (``word``); a sample fetch's argument (a persistence header, an SNI) gets its own level of quotes
(``fetch``); a regex comes after ``--``, so one starting with ``-`` is not read as an ACL flag. Validation
(``l7/validation.py``) keeps what HAProxy cannot take out of every value (control characters among them); the
escaping holds on its own, so a row written past validation still cannot break a line or add a word.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from ..syslog.grammar import path_problem
from .spec import EngineSpec, FarmSpec, HeaderRule, ServerSpec, ServiceSpec

CONFIG_NAME = "lbweb.cfg"
BARE = re.compile(r"[A-Za-z0-9_.-]+")  # characters HAProxy's parser gives no meaning to, outside quotes
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
TRUSTED = re.compile(r"[0-9A-Fa-f.:]+/[0-9]{1,3}")  # a network as l7/validation.py writes it (ipaddress's form)
RETRY_WORDS = re.compile(r"conn-failure|empty-response|junk-response|response-timeout|50[0-4]")
# Requests a response-level retry may send again (RFC 9110 9.2.2: idempotent methods); a connection failure is
# retried for any method (the request never left).
IDEMPOTENT = "GET HEAD OPTIONS PUT DELETE TRACE"
PATTERNS_PER_LINE = 32  # HAProxy reads at most 64 words a line: longer host lists go on more acl lines (an OR)
ACME_BACKEND = "lbweb-acme"
ERROR_REASONS = {
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}


@dataclass(frozen=True)
class Bundle:
    """The files of one configuration, by path relative to the engine's configuration directory.

    ``secret`` names the files holding private keys: the writer makes them 0600 (or 0640 to the engine's group).
    """

    files: dict[str, str]
    secret: frozenset[str]

    @property
    def config(self) -> str:
        return self.files[CONFIG_NAME]

    def digest(self) -> str:
        h = hashlib.sha256()
        for name in sorted(self.files):
            h.update(name.encode() + b"\0" + self.files[name].encode() + b"\0")
        return h.hexdigest()[:32]


def quote(text: str) -> str:
    """``text`` as one HAProxy word in double quotes (backslash, quote and ``$``, which names a variable there,
    escaped; a control character as ``\\xNN``: validation refuses them, and even a row written past it stays on
    its line)."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
    return '"' + CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", escaped) + '"'


def log_format(text: str) -> str:
    """A literal string where HAProxy expects a log-format expression (``%`` starts a variable there)."""
    return quote(text.replace("%", "%%"))


def word(text: str) -> str:
    """``text`` as one word: bare when nothing in it means anything to HAProxy, quoted otherwise."""
    return text if BARE.fullmatch(text) else quote(text)


def fetch(name: str, argument: str) -> str:
    """A sample fetch with one literal argument, ``req.hdr(X-Session)``. HAProxy reads the word twice: the
    argument's own double quotes (backslash and quote escaped in them) keep ``,`` and ``)`` in it, and the whole word
    goes in quotes when the argument holds anything but letters, digits and ``-_.``."""
    if BARE.fullmatch(argument):
        return f"{name}({argument})"
    inner = argument.replace("\\", "\\\\").replace('"', '\\"')
    return quote(f'{name}("{inner}")')


def address(host: str, port: int) -> str:
    return f"ipv6@{host}:{port}" if ":" in host else f"{host}:{port}"


def render(spec: EngineSpec, base_dir: str, access_log: str = "") -> Bundle:
    """Every file of the configuration; paths inside the configuration are absolute under ``base_dir``.

    ``access_log``: the unix socket where rsyslog reads HAProxy's access log (remote syslog,
    ``compiler/syslog/``), given by the worker; each frontend sends its log lines there in RFC 5424."""
    if access_log and path_problem(access_log):
        raise ValueError(f"access log socket {access_log!r}: {path_problem(access_log)}")
    files: dict[str, str] = {}
    secret: set[str] = set()
    lines = [
        "# Written by lbweb's worker from its database; edits here are lost at the next apply.",
        "# Static settings (global, defaults) are in deploy/haproxy.cfg.",
    ]
    serving = [farm for farm in sorted(spec.farms, key=lambda f: f.id) if farm.enabled]
    for farm in sorted(spec.farms, key=lambda f: f.id):
        if not farm.enabled:
            lines += ["", f"# farm {farm.name} (f{farm.id}) is stopped"]
            continue
        lines += ["", *_frontend(farm, base_dir, files, secret, spec.acme_port, access_log)]
        for service in farm.services:
            lines += ["", *_backend(farm, service, base_dir)]
    if spec.acme_port and serving:
        lines += [
            "",
            "# ACME HTTP-01 challenges: certbot's own server while it asks for a certificate (dataplane/l7/acme.py)",
            f"backend {ACME_BACKEND}",
            "    mode http",
            "    timeout connect 2s",
            "    timeout server 10s",
            f"    server certbot 127.0.0.1:{spec.acme_port}",
        ]
    files[CONFIG_NAME] = "\n".join(lines) + "\n"
    return Bundle(files=dict(sorted(files.items())), secret=frozenset(secret))


def _frontend(
    farm: FarmSpec, base: str, files: dict[str, str], secret: set[str], acme_port: int | None, access_log: str = ""
) -> list[str]:
    f = farm.frontend_name
    out = [f"# farm {farm.name}", f"frontend {f}", "    mode http"]
    if access_log:  # the defaults' log (global), and the access log to rsyslog for remote syslog
        out += ["    log global", f"    log {access_log} format rfc5424 local0 info"]
    tls = farm.mode == "https" and farm.certificates
    proxy = " accept-proxy" if farm.accept_proxy else ""
    if tls:
        crt_list = f"crt-lists/{f}.list"
        entries = []
        for cert in farm.certificates:
            files[cert.filename] = cert.pem if cert.pem.endswith("\n") else cert.pem + "\n"
            secret.add(cert.filename)
            entries.append(f"{base}/{cert.filename}")
        files[crt_list] = "\n".join(entries) + "\n"
        alpn = " alpn h2,http/1.1" if farm.http2 else " alpn http/1.1"
        for port in farm.ports:
            out.append(f"    bind {address(farm.vip, port)}{proxy} ssl crt-list {base}/{crt_list}{alpn}")
        for port in farm.redirect_ports:
            out.append(f"    bind {address(farm.vip, port)}{proxy}")
    else:
        for port in farm.ports:
            out.append(f"    bind {address(farm.vip, port)}{proxy}")
    if farm.unbound_ports:
        out.append(f"    # not bound, beyond the ports an HTTP farm binds: {farm.unbound_ports}")
    if farm.accept_proxy:
        # tcp-request connection rules see the connection's own source, not the PROXY header's: only the load
        # balancers in front may connect, and only they choose the address the farm sees.
        trusted = " ".join(network for network in farm.proxy_trusted if TRUSTED.fullmatch(network))
        out.append("    tcp-request connection reject" + (f" unless {{ src {trusted} }}" if trusted else ""))
    out += [
        f"    timeout client {farm.timeout_client}s",
        f"    timeout http-request {farm.timeout_http_request}s",
        f"    timeout http-keep-alive {farm.timeout_keep_alive}s",
    ]
    if farm.error_pages:
        out.append(f"    errorfiles {f}-errors")
    if acme_port:
        out.append(f"    acl {ACME_BACKEND} path_beg /.well-known/acme-challenge/")
    for i, service in enumerate(farm.services):
        out += _service_acls(service, i)
    if tls and farm.redirect_ports:
        unless = f" || {ACME_BACKEND}" if acme_port else ""
        out.append(f"    http-request redirect scheme https code 301 unless {{ ssl_fc }}{unless}")
    for rule in farm.redirects:
        # "prefix" puts the request's whole path after the target; "location" answers the target as it is.
        kind = "prefix" if rule.keep_path else "location"
        cond = f"if {{ path -m beg {quote(rule.path_prefix)} }}"
        out.append(f"    http-request redirect {kind} {log_format(rule.target)} code {rule.code} {cond}")
    if farm.forwarded_headers:
        out += [
            "    option forwardfor",
            "    http-request set-header X-Forwarded-Proto https if { ssl_fc }",
            "    http-request set-header X-Forwarded-Proto http if !{ ssl_fc }",
            "    http-request set-header X-Forwarded-Host %[req.hdr(host)]",
        ]
    out += _headers(farm.headers)
    if farm.hsts_max_age:
        out.append(
            f'    http-response set-header Strict-Transport-Security "max-age={farm.hsts_max_age}; includeSubDomains"'
            " if { ssl_fc }"
        )
    if acme_port:
        out.append(f"    use_backend {ACME_BACKEND} if {ACME_BACKEND}")
    for i, service in enumerate(farm.services):
        condition = _service_condition(service, i)
        out.append(f"    use_backend {service.backend_name}" + (f" if {condition}" if condition else ""))
    if farm.error_pages:
        out += ["", f"http-errors {f}-errors"]
        for status, body in farm.error_pages:
            name = f"errors/{f}-{status}.http"
            reason = ERROR_REASONS.get(status, "Error")
            files[name] = (
                f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/html; charset=utf-8\r\nCache-Control: no-cache\r\n"
                f"Connection: close\r\n\r\n{body}"
            )
            out.append(f"    errorfile {status} {base}/{name}")
    return out


def _service_acls(service: ServiceSpec, i: int) -> list[str]:
    out = []
    exact = sorted(h.lower() for h in service.hosts if not h.startswith("*."))
    wild = sorted(h[1:].lower() for h in service.hosts if h.startswith("*."))
    n = service.backend_name
    for match, names in (("str", exact), ("end", wild)):
        for start in range(0, len(names), PATTERNS_PER_LINE):
            chunk = " ".join(word(name) for name in names[start : start + PATTERNS_PER_LINE])
            out.append(f"    acl {n}_host req.hdr(host),host_only,lower -m {match} {chunk}")
    if service.host_regex:
        out.append(f"    acl {n}_host req.hdr(host),host_only -m reg -i -- {quote(service.host_regex)}")
    if service.path_prefix and service.path_prefix != "/":
        out.append(f"    acl {n}_path path -m beg {quote(service.path_prefix)}")
    return out


def _service_condition(service: ServiceSpec, i: int) -> str:
    parts = []
    n = service.backend_name
    if service.hosts or service.host_regex:
        parts.append(f"{n}_host")
    if service.path_prefix and service.path_prefix != "/":
        parts.append(f"{n}_path")
    return " ".join(parts)


def _headers(rules: tuple[HeaderRule, ...]) -> list[str]:
    out = []
    for rule in rules:
        side = "http-request" if rule.direction == "request" else "http-response"
        if rule.value is None:
            out.append(f"    {side} del-header {word(rule.name)}")
        else:
            out.append(f"    {side} set-header {word(rule.name)} {log_format(rule.value)}")
    return out


def _backend(farm: FarmSpec, service: ServiceSpec, base: str) -> list[str]:
    out = [
        f"# farm {farm.name}, service {service.name}",
        f"backend {service.backend_name}",
        "    mode http",
        f"    balance {service.scheduler}",
        f"    timeout server {farm.timeout_server}s",
        f"    timeout connect {farm.timeout_connect}s",
        f"    timeout tunnel {farm.timeout_tunnel}s",
        f"    timeout queue {service.queue_timeout}s",
        "    option allbackups",
        # "always": an idle backend connection serves any client's next request, so the proxy does not
        # connect() per request (the seed's point); "safe" would keep the first request of each client off them.
        f"    http-reuse {'always' if service.reuse else 'never'}",
    ]
    if service.scheduler in ("source", "uri"):
        out.append("    hash-type consistent")
    out += _retries(farm)
    if farm.error_pages:
        out.append(f"    errorfiles {farm.frontend_name}-errors")
    ttl = service.persistence_ttl
    if service.persistence == "cookie":
        idle = f" maxidle {ttl}s" if ttl else ""
        out.append(f"    cookie {word(service.cookie_name)} insert indirect nocache httponly{idle}")
    elif service.persistence == "source":
        out += [f"    stick-table type ipv6 size 1m expire {ttl or 1800}s", "    stick on src"]
    elif service.persistence == "header":
        out += [
            f"    stick-table type string len 128 size 1m expire {ttl or 1800}s",
            f"    stick on {fetch('req.hdr', service.persistence_header)}",
        ]
    out += _headers(service.headers)
    for server in service.servers:
        out.append("    " + server_line(server, service))
    return out


def _retries(farm: FarmSpec) -> list[str]:
    """The farm's retry policy in one of its backends: nothing at all with HAProxy's defaults."""
    out = []
    words = [w for w in farm.retry_on if RETRY_WORDS.fullmatch(w)]
    if farm.retries != 3:
        out.append(f"    retries {int(farm.retries)}")
    if words:
        out.append(f"    retry-on {' '.join(words)}")
        if words != ["conn-failure"]:
            out.append(f"    http-request disable-l7-retry unless {{ method {IDEMPOTENT} }}")
    if farm.redispatch:
        out.append("    option redispatch 1")
    return out


def server_line(server: ServerSpec, service: ServiceSpec) -> str:
    """One ``server`` line: address, weight, state, capacity, TLS, persistence cookie."""
    parts = [f"server {server.name} {address(server.address, server.port)}", f"weight {server_weight(server)}"]
    if server.priority > 1:
        parts.append("backup")
    if server_state(server) == "maint":
        parts.append("disabled")
    if server.capacity is not None:
        # The declared capacity: at most this many connections (so requests) at once; the rest wait in the
        # backend's queue. Idle connections kept for reuse are among these, so the pool is sized by it too.
        parts.append(f"maxconn {server.capacity}")
    if service.persistence == "cookie":
        parts.append(f"cookie {server.name}")
    if server.tls:
        parts.append("ssl " + ("verify required ca-file @system-ca" if server.tls_verify else "verify none"))
        if server.tls_sni:
            parts.append(f"sni {fetch('str', server.tls_sni)}")
    if server.send_proxy:
        parts.append("send-proxy-v2")
    if server.slowstart:
        parts.append(f"slowstart {int(server.slowstart)}s")
    if server.passive_errors:
        # HAProxy observes only servers it checks: its own check runs hourly while the server is up (healthd's
        # checks are the active ones), every 10 s while it is out, so it comes back by itself if healthd is away.
        check = "check inter 1h downinter 10s rise 2" + (" check-send-proxy" if server.send_proxy else "")
        parts.append(f"{check} observe layer7 error-limit {int(server.passive_errors)} on-error mark-down")
    return " ".join(parts)


def server_state(server: ServerSpec) -> str:
    """HAProxy's administrative state for the backend: ``ready``, ``drain`` or ``maint``.

    healthd's verdict counts as the operator's ``disabled``: one truth about health, from healthd.
    """
    if server.state == "disabled" or not server.healthy:
        return "maint"
    return "drain" if server.state == "drain" else "ready"


def server_weight(server: ServerSpec) -> int:
    """Drain is weight 0 in the file (HAProxy has no draining start state); persistence still reaches it."""
    return 0 if server.state == "drain" else server.weight
