"""What the HAProxy configuration is made from: plain frozen dataclasses, no Django.

The worker builds these from the database (``dataplane/l7/applier.py``); the generator (``config.py``) turns them into
HAProxy's text. Keeping them plain lets the generator be golden-tested and diffed for the preview, as the
nftables compiler is (docs/how-a-change-reaches-the-kernel.md).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass


@dataclass(frozen=True)
class ServerSpec:
    """One backend (an HAProxy ``server``), named ``b<id>`` so the runtime API can address it by id."""

    id: int
    address: str
    port: int
    weight: int = 1
    priority: int = 1  # 2 and more: serves only when every 1 is unavailable (HAProxy ``backup``)
    state: str = "enabled"  # enabled | drain | disabled (as the L4 backends)
    healthy: bool = True  # healthd's verdict: a backend healthd marks down is put in maintenance
    capacity: int | None = None  # declared concurrent sessions: HAProxy ``maxconn``, with a queue beyond it
    tls: bool = False
    tls_verify: bool = False
    tls_sni: str = ""
    slowstart: int = 0  # seconds over which a backend back from down or maintenance ramps up to its weight
    passive_errors: int = 0  # consecutive failed requests that take it out (observe layer7 ... on-error mark-down)
    send_proxy: bool = False  # PROXY protocol v2 header to the backend, with the client's address

    @property
    def name(self) -> str:
        return f"b{self.id}"


@dataclass(frozen=True)
class HeaderRule:
    """Set (``value`` given) or delete (``value`` None) one header, on requests or responses."""

    direction: str  # request | response
    name: str
    value: str | None = None


@dataclass(frozen=True)
class RedirectRule:
    """Answer requests whose path starts with ``path_prefix`` with a redirect (``prefix`` keeps the path)."""

    path_prefix: str
    target: str
    code: int = 302
    keep_path: bool = False


@dataclass(frozen=True)
class ServiceSpec:
    """A set of backends chosen by host (exact, ``*.wildcard`` or a regular expression) and path prefix."""

    id: int
    name: str
    hosts: tuple[str, ...] = ()  # "www.example.com" exact, "*.example.com" any subdomain
    host_regex: str = ""
    path_prefix: str = ""
    scheduler: str = "roundrobin"  # roundrobin | leastconn | source | uri
    persistence: str = ""  # "" | cookie | source | header
    persistence_ttl: int = 0  # seconds; 0 keeps cookie persistence for the browser session
    persistence_header: str = ""
    cookie_name: str = "LBWEBSRV"
    queue_timeout: int = 5  # seconds a request waits at the LB for a free session of a full backend
    reuse: bool = True  # keep backend connections open and reuse them across requests (http-reuse always)
    servers: tuple[ServerSpec, ...] = ()
    headers: tuple[HeaderRule, ...] = ()

    @property
    def backend_name(self) -> str:
        """``s<id>``; a farm's implicit default service (backends in no service) has id -farm and is
        ``f<farm>-default``."""
        return f"s{self.id}" if self.id > 0 else f"f{-self.id}-default"


@dataclass(frozen=True)
class CertificateSpec:
    """A certificate the farm offers; ``pem`` is certificate, chain and key in that order (HAProxy's format)."""

    id: int
    name: str
    pem: str
    names: tuple[str, ...] = ()  # the SNI names it answers (empty: every name, when it is the default)

    @property
    def filename(self) -> str:
        return f"certs/c{self.id}.pem"


@dataclass(frozen=True)
class FarmSpec:
    """An HTTP or HTTPS farm: one HAProxy ``frontend`` on the VIP's ports."""

    id: int
    name: str
    mode: str  # http | https
    vip: str
    ports: tuple[int, ...]
    services: tuple[ServiceSpec, ...] = ()
    certificates: tuple[CertificateSpec, ...] = ()  # the first one is the default (no SNI match)
    redirect_ports: tuple[int, ...] = ()  # plain HTTP ports of an https farm that redirect to HTTPS
    # Ports the farm declares beyond those it binds (``l7/specs.py`` MAX_PORTS), said in words ("ports
    # 9065-9100"): not served, and said so (the configuration's comment, the farm's status).
    unbound_ports: str = ""
    http2: bool = True  # ALPN h2 on TLS ports
    hsts_max_age: int = 0  # seconds; 0: no Strict-Transport-Security
    forwarded_headers: bool = True  # X-Forwarded-For/Proto/Host
    timeout_client: int = 30
    timeout_server: int = 30
    timeout_connect: int = 5
    timeout_http_request: int = 10
    timeout_keep_alive: int = 10
    timeout_tunnel: int = 3600  # WebSockets and other upgraded connections
    redirects: tuple[RedirectRule, ...] = ()
    headers: tuple[HeaderRule, ...] = ()
    error_pages: tuple[tuple[int, str], ...] = ()  # (status, HTML body)
    retry_on: tuple[str, ...] = ()  # HAProxy retry-on keywords (l7/validation.py RETRY_ON); (): its default
    retries: int = 3  # HAProxy's default
    redispatch: bool = False  # each retry to another server (option redispatch 1)
    accept_proxy: bool = False  # read the PROXY protocol on every bind line
    proxy_trusted: tuple[str, ...] = ()  # networks allowed to connect when accept_proxy (canonical ipaddress text)
    enabled: bool = True

    @property
    def frontend_name(self) -> str:
        return f"f{self.id}"


@dataclass(frozen=True)
class EngineSpec:
    """Everything HAProxy serves: the whole configuration (one file plus its certificates and error pages)."""

    farms: tuple[FarmSpec, ...] = ()
    # ACME HTTP-01: /.well-known/acme-challenge/ on every farm goes to certbot's own server on this local port
    # (dataplane/l7/acme.py), so certificates are issued and renewed while HAProxy keeps ports 80 and 443.
    acme_port: int | None = 8402


def as_json(spec: EngineSpec) -> dict:
    """``spec`` as plain JSON data (the worker remembers what HAProxy serves across its own restarts)."""
    return dataclasses.asdict(spec)


def from_json(data: dict) -> EngineSpec:
    """The ``EngineSpec`` :func:`as_json` gave; ``TypeError``/``KeyError``/``ValueError`` for anything else."""
    return _decode(EngineSpec, data)


def _decode(kind, value):
    if dataclasses.is_dataclass(kind):
        if not isinstance(value, dict) or set(value) != {f.name for f in dataclasses.fields(kind)}:
            raise ValueError(f"not a {kind.__name__}: {str(value)[:80]}")
        hints = typing.get_type_hints(kind)
        return kind(**{name: _decode(hints[name], item) for name, item in value.items()})
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is tuple:
        kinds = [args[0]] * len(value) if args[1:] == (Ellipsis,) else list(args)
        if len(kinds) != len(value):
            raise ValueError(f"expected {len(kinds)} items: {value!r}")
        return tuple(_decode(k, item) for k, item in zip(kinds, value, strict=True))
    if origin in (types.UnionType, typing.Union):
        if value is None:
            return None
        (kind,) = [a for a in args if a is not type(None)]
        return _decode(kind, value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ValueError(f"not a {kind.__name__}: {value!r}")
    return value
