"""HTTP farms' writes are audited like every other write: who, what, which object (the farm's or the backend's name
for their HTTP options), which farm, the state before and after, and never a private key or a token's secret."""

from __future__ import annotations

import json

import pytest

from farms import services
from farms.models import AuditEvent
from l7 import services as l7
from l7.models import CapacityToken
from tests.support import certs

pytestmark = pytest.mark.django_db

OPTIONS = {
    "redirect_ports": "", "http2": True, "hsts_max_age": 0, "forwarded_headers": True, "timeout_client": 30,
    "timeout_server": 30, "timeout_connect": 5, "timeout_http_request": 10, "timeout_keep_alive": 10,
    "timeout_tunnel": 3600, "headers": [], "redirects": [], "error_pages": {}, "retry_on": "", "retries": 3,
    "redispatch": False, "accept_proxy": False, "proxy_trusted": "", "default_certificate": None,
    "certificates": [],
}  # fmt: skip
SERVICE = {
    "name": "api", "position": 1, "hosts": "", "host_regex": "", "path_prefix": "/api", "scheduler": "roundrobin",
    "persistence": "", "persistence_ttl": 0, "persistence_header": "", "cookie_name": "LBWEBSRV", "queue_timeout": 5,
    "reuse": True, "headers": [],
}  # fmt: skip
BACKEND = {
    "service": None, "capacity": None, "tls": False, "tls_verify": False, "tls_sni": "", "slowstart": 0,
    "passive_errors": 0, "send_proxy": False,
}  # fmt: skip


def entries(since: int) -> list[tuple]:
    fields = ("actor_name", "action", "object_type", "object_id", "object_name", "farm_ref", "before", "after")
    rows = AuditEvent.objects.filter(id__gt=since).order_by("id")
    return [tuple(json.loads(json.dumps(getattr(e, name), default=str)) for name in fields) for e in rows]


def test_every_http_write_records_one_entry_with_its_object_farm_and_states(admin_user):
    farm = services.farm_create(name="shop", vip="198.18.100.10", ports="443", mode="https")
    backend = services.backend_create(farm=farm, address="198.18.1.11", port=8080)
    since = AuditEvent.objects.order_by("-id").first().id

    cert = l7.certificate_self_signed(name="shop-cert", names=["shop.example.com"], actor=admin_user)
    made = {"name": "shop-cert", "source": "selfsigned", "names": ["shop.example.com"], "issuer": "CN=shop.example.com",
            "not_after": cert.not_after.isoformat()}  # fmt: skip
    renewed = certs.issue("shop.example.com", names=("shop.example.com",))
    l7.certificate_update(target=cert, certificate=renewed.pem, private_key=renewed.key_pem, actor=admin_user)
    replaced = {**made, "issuer": "CN=shop.example.com", "not_after": cert.not_after.isoformat()}
    l7.farm_options_update(farm=farm, certificates=[cert], default_certificate=cert, hsts_max_age=600, actor=admin_user)
    offered = {**OPTIONS, "hsts_max_age": 600, "default_certificate": cert.pk, "certificates": ["shop-cert"]}
    l7.farm_options_update(farm=farm, hsts_max_age=60, actor=admin_user)
    api = l7.service_create(farm=farm, name="api", position=1, path_prefix="/api", actor=admin_user)
    l7.service_update(service=api, hosts="API.example.com", actor=admin_user)
    l7.backend_options_update(backend=backend, service=api, capacity=40, actor=admin_user)
    l7.capacity_token_create(backend=backend, actor=admin_user)
    token = CapacityToken.objects.get()
    l7.capacity_set(backend=backend, capacity=12, token=token)
    l7.capacity_set(backend=backend, capacity=13, actor=admin_user)
    l7.capacity_tokens_revoke(backend=backend, actor=admin_user)
    service_id = api.pk
    l7.service_delete(service=api, actor=admin_user)
    l7.farm_options_update(farm=farm, certificates=[], default_certificate=None, actor=admin_user)
    cert_id = cert.pk
    l7.certificate_delete(target=cert, actor=admin_user)

    named = {**SERVICE, "hosts": "api.example.com"}
    served = {**BACKEND, "service": service_id}
    assert entries(since) == [
        ("admin", "create", "certificate", cert_id, "shop-cert", None, None, made),
        ("admin", "update", "certificate", cert_id, "shop-cert", None, made, replaced),
        ("admin", "update", "l7farm", farm.pk, "shop", farm.pk, OPTIONS, offered),
        ("admin", "update", "l7farm", farm.pk, "shop", farm.pk, offered, {**offered, "hsts_max_age": 60}),
        ("admin", "create", "httpservice", service_id, "shop/api", farm.pk, None, SERVICE),
        ("admin", "update", "httpservice", service_id, "shop/api", farm.pk, SERVICE, named),
        ("admin", "update", "l7backend", backend.pk, "198.18.1.11:8080", farm.pk, BACKEND, {**served, "capacity": 40}),
        ("admin", "create", "capacitytoken", token.pk, str(token), farm.pk, None,
         {"backend": backend.pk, "prefix": token.prefix}),
        ("system", f"capacity (token {token.prefix})", "l7backend", backend.pk, "198.18.1.11:8080", farm.pk,
         {**served, "capacity": 40}, {**served, "capacity": 12}),
        ("admin", "capacity", "l7backend", backend.pk, "198.18.1.11:8080", farm.pk, {**served, "capacity": 12},
         {**served, "capacity": 13}),
        ("admin", "delete", "capacitytoken", None, "tokens of backend 198.18.1.11:8080", farm.pk,
         {"backend": backend.pk, "prefixes": [token.prefix]}, None),
        ("admin", "delete", "httpservice", service_id, "shop/api", farm.pk, named, None),
        ("admin", "update", "l7farm", farm.pk, "shop", farm.pk, {**offered, "hsts_max_age": 60},
         {**OPTIONS, "hsts_max_age": 60}),
        ("admin", "delete", "certificate", cert_id, "shop-cert", None, replaced, None),
    ]  # fmt: skip
    assert "PRIVATE KEY" not in json.dumps(entries(since))


def test_a_refused_http_write_records_nothing(admin_user):
    farm = services.farm_create(name="shop", vip="198.18.100.10", ports="80", mode="http")
    since = AuditEvent.objects.order_by("-id").first().id
    with pytest.raises(services.ValidationError):
        l7.service_create(farm=farm, name="bad", host_regex="(a", actor=admin_user)
    with pytest.raises(services.ValidationError):
        l7.farm_options_update(farm=farm, redirect_ports="8080", actor=admin_user)  # only HTTPS farms redirect
    assert entries(since) == []


def test_an_import_that_changes_http_farms_is_one_entry(admin_user):
    """An import is recorded once, as a whole (its before and after documents), HTTP sections included."""
    from farms import config_io

    farm = services.farm_create(name="shop", vip="198.18.100.10", ports="80", mode="http")
    api = l7.service_create(farm=farm, name="api", position=1, path_prefix="/api")
    document = config_io.export_config()
    l7.service_update(service=api, path_prefix="/v2")
    l7.farm_options_update(farm=farm, hsts_max_age=60)
    since = AuditEvent.objects.order_by("-id").first().id
    result = config_io.import_config(document, actor=admin_user)
    assert result.ok, result.errors
    ((actor, action, object_type, *_rest, before, after),) = entries(since)
    assert (actor, action, object_type) == ("admin", "import", "configuration")
    (entry,) = after["http"]["farms"]
    assert entry["services"][0]["path_prefix"] == "/api" and entry["options"]["hsts_max_age"] == 0
    assert before["http"]["farms"][0]["services"][0]["path_prefix"] == "/v2"
