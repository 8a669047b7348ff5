"""The HTTP farm edit pages do what the API does, with the same words: certificates (upload, fullchain, self-signed,
replace, delete refused while offered), a farm's HTTP options and certificates, services, a backend's service,
capacity and TLS; viewers and operators read, only admins write."""

from __future__ import annotations

import pytest
from django.test import Client

from farms import services as farm_services
from farms.models import AuditEvent
from l7 import services
from l7.models import Certificate, HttpService, L7Backend, L7Farm
from tests.support import certs

pytestmark = pytest.mark.django_db


@pytest.fixture
def shop():
    farm = farm_services.farm_create(name="shop", vip="198.18.100.10", ports="443", mode="https")
    farm_services.backend_create(farm=farm, address="198.18.1.11", port=8080)
    return farm


def test_certificate_pages_check_like_the_api_and_keep_nothing_on_error(admin_client):
    root = certs.issue("root", ca=True)
    leaf = certs.issue("www.example.com", root, names=("www.example.com",))
    other = certs.issue("other.example.com", root, names=("other.example.com",))
    refused = admin_client.post(
        "/http/certificates/add/", {"name": "www", "certificate": leaf.pem, "private_key": other.key_pem, "_save": "1"}
    )
    assert refused.status_code == 200 and not Certificate.objects.exists()
    assert "does not match the certificate" in refused.context["form"].errors["private_key"][0]
    done = admin_client.post(
        "/http/certificates/add/",
        {"name": "www", "certificate": leaf.pem + root.pem, "private_key": leaf.key_pem, "_save": "1"},
    )
    assert done.status_code == 302 and done["Location"] == "/http/#certificates"
    stored = Certificate.objects.get(name="www")
    assert stored.names == ["www.example.com"] and stored.chain.count("BEGIN CERTIFICATE") == 1
    page = admin_client.get(f"/http/certificates/{stored.pk}/edit/").content.decode()
    assert "PRIVATE KEY" not in page  # a stored key never goes back to the browser
    made = admin_client.post(
        "/http/certificates/self-signed/", {"name": "self", "names": "a.example.com b.example.com"}
    )
    assert made.status_code == 302
    assert Certificate.objects.get(name="self").names == ["a.example.com", "b.example.com"]
    assert AuditEvent.objects.filter(object_type="certificate", action="create").count() == 2


def test_options_services_and_backend_options_through_the_pages(admin_client, shop):
    cert = services.certificate_self_signed(name="shop-cert", names=["shop.example.com"])
    posted = {
        "certificates": [cert.pk], "default_certificate": cert.pk, "redirect_ports": "80", "hsts_max_age": "600",
        "http2": "on", "forwarded_headers": "on", "headers": "[]", "redirects": "[]", "error_pages": "{}",
        "timeout_client": 30, "timeout_server": 30, "timeout_connect": 5, "timeout_http_request": 10,
        "timeout_keep_alive": 10, "timeout_tunnel": 3600, "retry_on": "503 empty-response", "retries": 2,
        "redispatch": "on", "accept_proxy": "on", "proxy_trusted": "198.18.0.9", "_save": "1",
    }  # fmt: skip
    bad = admin_client.post(f"/http/farms/{shop.pk}/options/", {**posted, "proxy_trusted": "lb.example.com"})
    assert bad.status_code == 200 and list(bad.context["form"].errors) == ["proxy_trusted"]
    page = admin_client.post(f"/http/farms/{shop.pk}/options/", posted)
    assert page.status_code == 302, page.context["form"].errors
    options = L7Farm.objects.get(farm=shop)
    assert options.default_certificate == cert and list(options.certificates.all()) == [cert]
    assert options.redirect_ports == "80" and options.hsts_max_age == 600
    assert (options.retry_on, options.proxy_trusted, options.accept_proxy) == (
        "empty-response 503",
        "198.18.0.9/32",
        True,
    )

    service = {
        "name": "api", "position": 1, "path_prefix": "/api", "scheduler": "roundrobin", "persistence": "",
        "persistence_ttl": 0, "cookie_name": "LBWEBSRV", "queue_timeout": 5, "reuse": "on", "headers": "[]",
        "_save": "1",
    }  # fmt: skip
    bad = admin_client.post(f"/http/farms/{shop.pk}/services/add/", {**service, "path_prefix": "api"})
    assert bad.status_code == 200 and "path_prefix" in bad.context["form"].errors
    assert admin_client.post(f"/http/farms/{shop.pk}/services/add/", service).status_code == 302
    api = HttpService.objects.get(farm=shop, name="api")
    assert admin_client.post(f"/http/services/{api.pk}/edit/", {**service, "path_prefix": "/v2"}).status_code == 302
    api.refresh_from_db()
    assert api.path_prefix == "/v2"

    backend = shop.backends.get()
    form = admin_client.get(f"/http/backends/{backend.pk}/options/").context["form"]
    assert list(form.fields["service"].queryset) == [api]  # only this farm's services
    saved = admin_client.post(
        f"/http/backends/{backend.pk}/options/",
        {"service": api.pk, "capacity": 40, "tls_sni": "", "slowstart": 20, "passive_errors": 5, "send_proxy": "on",
         "_save": "1"},
    )  # fmt: skip
    assert saved.status_code == 302, saved.context["form"].errors
    assert (L7Backend.objects.get(backend=backend).service, L7Backend.objects.get().capacity) == (api, 40)
    assert L7Backend.objects.filter(slowstart=20, passive_errors=5, send_proxy=True).count() == 1

    assert f'href="/http/#farm-{shop.pk}"' in admin_client.get(f"/farms/{shop.pk}/").content.decode()
    listing = admin_client.get("/http/").content.decode()
    assert f'href="/http/services/{api.pk}/edit/"' in listing and f"/http/backends/{backend.pk}/options/" in listing
    assert "out after 5 failed requests · slow start 20 s · PROXY v2" in listing
    assert (
        "Retried on empty-response 503 (2 times, on another backend). PROXY protocol from 198.18.0.9/32 only."
        in listing
    )
    assert admin_client.post(f"/http/services/{api.pk}/delete/").status_code == 302
    assert not HttpService.objects.exists() and L7Backend.objects.get().service is None
    refused = admin_client.post(f"/http/certificates/{cert.pk}/delete/")
    assert refused.status_code == 200 and "take it off them first" in refused.content.decode()


def test_only_admins_write(role_users, shop):
    for role in ("viewer", "operator"):
        browser = Client()
        browser.force_login(role_users[role])
        listing = browser.get("/http/").content.decode()
        assert "Upload a certificate" not in listing and "Add a service" not in listing
        assert browser.get("/http/certificates/add/").status_code == 403
        assert browser.post(f"/http/farms/{shop.pk}/services/add/", {"name": "x"}).status_code == 403
    assert not HttpService.objects.exists()


def test_an_l4_farm_has_no_http_pages(admin_client):
    farm = farm_services.farm_create(name="tcp", vip="198.18.100.11", ports="22", mode="dnat")
    assert admin_client.get(f"/http/farms/{farm.pk}/options/").status_code == 404
    assert admin_client.get(f"/http/farms/{farm.pk}/services/add/").status_code == 404


def test_the_http_farms_page_says_why_a_farm_has_no_figures(admin_client, shop, redis_server, settings):
    """The collector could not read HAProxy's statistics: the farm's figures are unknown (—) and say why."""
    import html
    import time

    import redis

    from collector.sampler import Sample, error_entry
    from monitoring.store import MetricStore, client

    settings.REDIS_URL = redis_server.url
    redis.Redis.from_url(redis_server.url).flushdb()
    why = "HAProxy's statistics unavailable: the master socket does not answer"
    MetricStore(client(redis_server.url)).write(Sample(t=time.time(), system={}, farms={shop.id: error_entry(why)}))
    page = admin_client.get("/http/").content.decode()
    assert html.escape(why) in page and "Requests/s: —" in page
