"""The database read as an ``EngineSpec``: what HAProxy should serve. No I/O beyond the database, so the web
process uses it too (the preview), and the worker's ``dataplane/l7/applier.py`` applies it."""

from __future__ import annotations

from django.db import transaction

from compiler.haproxy.spec import (
    CertificateSpec,
    EngineSpec,
    FarmSpec,
    HeaderRule,
    RedirectRule,
    ServerSpec,
    ServiceSpec,
)
from compiler.ports import format_ports, parse_ports
from farms.choices import L7_MODES, BackendHealthChoices
from farms.models import ConfigGeneration, Farm

from .validation import MAX_PORTS  # one limit: what validation admits is what the generator binds


def _ports(text: str) -> tuple[tuple[int, ...], str]:
    """(the first MAX_PORTS ports of ``text``, which HAProxy binds; the others as a port list, which it does not).

    Validation refuses more at save time; a row from before it (an old import) still says what it does not bind.
    """
    bound: list[int] = []
    beyond: list[tuple[int, int]] = []
    for low, high in parse_ports(text) if text else ():
        take = max(0, min(high - low + 1, MAX_PORTS - len(bound)))
        bound.extend(range(low, low + take))
        if low + take <= high:
            beyond.append((low + take, high))
    return tuple(bound), format_ports(beyond)


def _not_bound(ports: str, redirect_ports: str = "") -> str:
    """What :func:`_ports` left out of a farm's lists, in words: "ports 9065-9100 and redirect ports 8001"."""
    named = (("ports", ports), ("redirect ports", redirect_ports))
    return " and ".join(f"{kind} {text}" for kind, text in named if text)


def _headers(rules: list[dict]) -> tuple[HeaderRule, ...]:
    return tuple(HeaderRule(r["direction"], r["name"], r.get("value")) for r in rules or [])


def _options(backend):
    """The backend's HTTP options (none for a backend not saved yet: a preview's candidate)."""
    return None if backend._state.adding else getattr(backend, "l7", None)


def _server(backend) -> ServerSpec:
    options = _options(backend)
    return ServerSpec(
        id=backend.id,
        address=str(backend.address),
        port=backend.port or 80,
        weight=backend.weight,
        priority=backend.priority,
        state=backend.state,
        healthy=backend.health != BackendHealthChoices.DOWN,
        capacity=options.capacity if options else None,
        tls=options.tls if options else False,
        tls_verify=options.tls_verify if options else False,
        tls_sni=options.tls_sni if options else "",
        slowstart=options.slowstart if options else 0,
        passive_errors=options.passive_errors if options else 0,
        send_proxy=options.send_proxy if options else False,
    )


def farm_spec(farm: Farm) -> FarmSpec:
    """One HTTP farm as the generator takes it (the farm's rows read with their relations)."""
    options = getattr(farm, "l7", None) if farm.pk else None
    backends = list(farm.backends.all())
    services = []
    for service in farm.http_services.all() if farm.pk else ():
        servers = tuple(_server(b) for b in backends if _options(b) and b.l7.service_id == service.id)
        services.append(
            ServiceSpec(
                id=service.id,
                name=service.name,
                hosts=tuple(service.hosts.split()),
                host_regex=service.host_regex,
                path_prefix=service.path_prefix,
                scheduler=service.scheduler,
                persistence=service.persistence,
                persistence_ttl=service.persistence_ttl,
                persistence_header=service.persistence_header,
                cookie_name=service.cookie_name,
                queue_timeout=service.queue_timeout,
                reuse=service.reuse,
                servers=servers,
                headers=_headers(service.headers),
            )
        )
    unassigned = tuple(_server(b) for b in backends if not _options(b) or b.l7.service_id is None)
    if unassigned or not services:
        services.append(ServiceSpec(id=-farm.id, name="default", servers=unassigned))
    certificates = ()
    if options is not None:
        certs = sorted(options.certificates.all(), key=lambda c: (c.id != options.default_certificate_id, c.name))
        certificates = tuple(CertificateSpec(c.id, c.name, c.pem, tuple(c.names)) for c in certs)
    ports, unbound = _ports(farm.ports)
    common = {"id": farm.id, "name": farm.name, "mode": farm.mode, "vip": str(farm.vip), "ports": ports}
    if options is None:
        return FarmSpec(
            **common,
            unbound_ports=_not_bound(unbound),
            services=tuple(services),
            enabled=farm.state == "up" and farm.mode == "http",
        )
    redirect_ports, unbound_redirects = _ports(options.redirect_ports)
    return FarmSpec(
        **common,
        unbound_ports=_not_bound(unbound, unbound_redirects),
        services=tuple(services),
        certificates=certificates,
        redirect_ports=redirect_ports,
        http2=options.http2,
        hsts_max_age=options.hsts_max_age,
        forwarded_headers=options.forwarded_headers,
        timeout_client=options.timeout_client,
        timeout_server=options.timeout_server,
        timeout_connect=options.timeout_connect,
        timeout_http_request=options.timeout_http_request,
        timeout_keep_alive=options.timeout_keep_alive,
        timeout_tunnel=options.timeout_tunnel,
        redirects=tuple(
            RedirectRule(r["path_prefix"], r["target"], r.get("code", 302), r.get("keep_path", False))
            for r in options.redirects or []
        ),
        headers=_headers(options.headers),
        error_pages=tuple(sorted((int(k), v) for k, v in (options.error_pages or {}).items())),
        retry_on=tuple(options.retry_on.split()),
        retries=options.retries,
        redispatch=options.redispatch,
        accept_proxy=options.accept_proxy,
        proxy_trusted=tuple(options.proxy_trusted.split()),
        enabled=farm.state == "up" and (farm.mode == "http" or bool(certificates)),
    )


def l7_farms():
    return (
        Farm.objects.filter(mode__in=L7_MODES)
        .select_related("l7", "l7__default_certificate")
        .prefetch_related("backends__l7", "http_services", "l7__certificates")
        .order_by("id")
    )


def snapshot() -> tuple[int, EngineSpec, dict[int, int]]:
    """(generation, the whole engine spec, farm id -> its configuration generation), read consistently."""
    with transaction.atomic():
        generation = ConfigGeneration.current()
        farms = list(l7_farms())
        spec = EngineSpec(farms=tuple(farm_spec(f) for f in farms))
    return generation, spec, {f.id: f.config_generation for f in farms}


def preview(conf_dir) -> dict:
    """What the next apply changes in HAProxy's configuration: a unified diff of ``lbweb.cfg`` as HAProxy has it
    (the file the worker wrote) and as the database would write it. Certificates show as their file names."""
    import difflib
    from pathlib import Path

    from compiler.haproxy.config import CONFIG_NAME, render

    generation, spec, _farms = snapshot()
    new = render(spec, str(conf_dir)).config
    try:
        old = (Path(conf_dir) / CONFIG_NAME).read_text()
    except OSError:
        old = ""
    diff = difflib.unified_diff(old.splitlines(True), new.splitlines(True), "haproxy (applied)", "database")
    return {"generation": generation, "diff": "".join(diff), "configuration": new}


def change_diff(farm_id: int, new: Farm | None, conf_dir) -> tuple[str, bool]:
    """The difference an edit of HTTP farm ``farm_id`` makes to HAProxy's configuration, before it is saved:
    (unified diff of lbweb.cfg, whether anything changes). ``new`` is the farm as it would be (with its
    backends prefetched as they would be), None when it is deleted."""
    import dataclasses
    import difflib

    from compiler.haproxy.config import render

    _generation, spec, _farms = snapshot()
    farms = [f for f in spec.farms if f.id != farm_id]
    if new is not None and new.mode in L7_MODES:
        farms.append(farm_spec(new))
    after = dataclasses.replace(spec, farms=tuple(sorted(farms, key=lambda f: f.id)))
    old_text, new_text = render(spec, str(conf_dir)).config, render(after, str(conf_dir)).config
    diff = difflib.unified_diff(old_text.splitlines(True), new_text.splitlines(True), "now", "after this change")
    return "".join(diff), old_text != new_text
