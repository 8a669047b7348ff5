"""HTTP farms travel whole through export, import, configuration versions and restore (the section ``http``):
options, certificates by name, services, backends' service/capacity/TLS; private keys never in a document."""

from __future__ import annotations

import json

import pytest

from farms import config_io, services, versions
from farms.models import Farm
from l7 import services as l7
from l7.models import Certificate, HttpService, L7Backend, L7Farm
from tests.farms.test_config_versions import version_now

pytestmark = pytest.mark.django_db


@pytest.fixture
def shop(admin_user) -> Farm:
    """An HTTPS farm with two services, a certificate and backends with capacity and TLS."""
    cert = l7.certificate_self_signed(name="shop-cert", names=["shop.example.com"])
    farm = services.farm_create(name="shop", vip="198.18.100.10", ports="443", mode="https", actor=admin_user)
    l7.farm_options_update(
        farm=farm, certificates=[cert], default_certificate=cert, redirect_ports="80", hsts_max_age=600,
        headers=[{"direction": "response", "name": "X-Shop", "value": "1"}], retry_on="503 conn-failure",
        retries=2, redispatch=True, accept_proxy=True, proxy_trusted="198.18.0.9 198.18.7.0/24",
    )  # fmt: skip
    api = l7.service_create(farm=farm, name="api", position=1, path_prefix="/api", persistence="cookie")
    l7.service_create(farm=farm, name="static", position=2, hosts="static.example.com")
    one = services.backend_create(farm=farm, address="198.18.1.11", port=8080)
    services.backend_create(farm=farm, address="198.18.1.12", port=8080)
    l7.backend_options_update(
        backend=one, service=api, capacity=40, tls=True, tls_sni="api.example.com", slowstart=30, passive_errors=5,
        send_proxy=True,
    )  # fmt: skip
    return farm


def test_export_carries_every_http_row_and_no_private_key(shop):
    document = config_io.export_config()
    (entry,) = document["http"]["farms"]
    assert entry["farm"] == "shop" and entry["certificates"] == ["shop-cert"]
    assert entry["default_certificate"] == "shop-cert"
    assert entry["options"]["redirect_ports"] == "80" and entry["options"]["hsts_max_age"] == 600
    assert [s["name"] for s in entry["services"]] == ["api", "static"]
    assert entry["backends"][0] == {
        "address": "198.18.1.11", "port": 8080, "service": "api", "capacity": 40, "tls": True,
        "tls_verify": False, "tls_sni": "api.example.com", "slowstart": 30, "passive_errors": 5, "send_proxy": True,
    }  # fmt: skip
    assert entry["options"]["retry_on"] == "conn-failure 503" and entry["options"]["redispatch"] is True
    assert entry["options"]["proxy_trusted"] == "198.18.0.9/32 198.18.7.0/24" and entry["options"]["retries"] == 2
    assert entry["backends"][1]["service"] is None and entry["backends"][1]["capacity"] is None
    assert "PRIVATE KEY" not in json.dumps(document)


def test_restore_brings_a_deleted_http_farm_back_whole(shop, admin_user):
    before = version_now()
    exported = config_io.export_config()
    services.farm_delete(farm=shop)
    assert not HttpService.objects.exists() and not L7Farm.objects.exists()
    version_now()

    preview = versions.restore(version=before, actor=admin_user, dry_run=True)
    assert preview.ok and preview.changes["http"]["updated"] == ["shop"], preview.to_json()
    assert not Farm.objects.exists()
    assert versions.restore(version=before, actor=admin_user).ok

    again = config_io.export_config()
    assert again["http"] == exported["http"] and again["farms"] == exported["farms"]
    farm = Farm.objects.get(name="shop")
    assert farm.l7.default_certificate.name == "shop-cert"
    assert L7Backend.objects.get(backend__address="198.18.1.11").service.name == "api"


def test_import_changes_services_and_options_to_the_document(shop, admin_user):
    document = config_io.export_config()
    entry = document["http"]["farms"][0]
    entry["services"] = [s for s in entry["services"] if s["name"] == "api"]
    entry["services"][0]["path_prefix"] = "/v2"
    entry["options"]["hsts_max_age"] = 0
    entry["backends"][0]["capacity"] = 80
    result = config_io.import_config(document, actor=admin_user)
    assert result.ok, result.to_json()
    assert result.changes["http"]["updated"] == ["shop"]
    assert list(HttpService.objects.values_list("name", "path_prefix")) == [("api", "/v2")]
    assert L7Farm.objects.get().hsts_max_age == 0
    assert L7Backend.objects.get(backend__address="198.18.1.11").capacity == 80
    assert config_io.import_config(config_io.export_config()).counts["http"]["unchanged"] == 1


def test_errors_are_located_and_nothing_changes(shop, admin_user):
    document = config_io.export_config()
    entry = document["http"]["farms"][0]
    entry["certificates"] = ["elsewhere"]
    entry["services"][0]["hosts"] = "not a host!"
    entry["backends"][1]["service"] = "nope"
    result = config_io.import_config(document, actor=admin_user)
    assert not result.ok
    found = {(e.location, e.field) for e in result.errors}
    assert ("http.farms[0]", "certificates") in found
    assert ("http.farms[0].services[0]", "hosts") in found
    assert ("http.farms[0].backends[1]", "service") in found
    assert "upload it first" in next(e.message for e in result.errors if e.field == "certificates")
    assert HttpService.objects.get(name="api").path_prefix == "/api"  # nothing changed


def test_a_certificate_missing_here_is_named(shop, admin_user):
    document = config_io.export_config()
    services.farm_delete(farm=shop)
    Certificate.objects.all().delete()
    result = config_io.import_config(document, actor=admin_user)
    assert not result.ok
    assert {(e.location, e.field) for e in result.errors} == {
        ("http.farms[0]", "certificates"),
        ("http.farms[0]", "default_certificate"),
    }
    assert not Farm.objects.exists()


def test_a_document_without_the_section_leaves_http_options_alone(shop, admin_user):
    document = {k: v for k, v in config_io.export_config().items() if k != "http"}
    assert config_io.import_config(document, actor=admin_user).ok
    assert HttpService.objects.count() == 2 and L7Farm.objects.get().hsts_max_age == 600


def test_unknown_and_ill_typed_fields_are_refused_where_they_are(shop, admin_user):
    """Bad input in a service or a backend entry is a located error, never a crash (the services take only their
    own fields, and clean() expects text where the model has text)."""
    document = config_io.export_config()
    entry = document["http"]["farms"][0]
    entry["services"][0]["colour"] = "blue"
    entry["services"][1]["hosts"] = ["static.example.com"]
    entry["backends"][0]["weight"] = 3
    entry["backends"][1]["capacity"] = "many"
    result = config_io.import_config(document, actor=admin_user)
    assert not result.ok
    assert {(e.location, e.field) for e in result.errors} == {
        ("http.farms[0].services[0]", "colour"),
        ("http.farms[0].services[1]", "hosts"),
        ("http.farms[0].backends[0]", "weight"),
        ("http.farms[0].backends[1]", "capacity"),
    }
    assert HttpService.objects.get(name="static").hosts == "static.example.com"


def test_the_import_trims_and_refuses_what_the_api_does(shop, admin_user, client):
    """Issue 39: ``cookie_name "LBX\\n"`` came in through the import untrimmed (the API trims it) and HAProxy
    refused the whole configuration. The document now reads as the API reads a body."""
    document = config_io.export_config()
    entry = document["http"]["farms"][0]
    entry["services"][0]["cookie_name"] = "LBX\n"
    entry["services"][1]["hosts"] = " static.example.com\n"
    entry["backends"][0]["tls_sni"] = "api.example.com\n"
    result = config_io.import_config(document, actor=admin_user)
    assert result.ok, result.to_json()
    assert HttpService.objects.get(name="api").cookie_name == "LBX"
    assert HttpService.objects.get(name="static").hosts == "static.example.com"
    assert L7Backend.objects.get(backend__address="198.18.1.11").tls_sni == "api.example.com"
    api = client.patch(f"/api/v1/backends/{L7Backend.objects.get(tls=True).backend_id}/http/",
                       {"tls_sni": "api.example.com\n"}, format="json")  # fmt: skip
    assert api.status_code == 200 and api.json()["tls_sni"] == "api.example.com"


@pytest.mark.parametrize(
    ("where", "field", "value"),
    [
        ("services", "cookie_name", "LB#x"),
        ("services", "cookie_name", "LB'x"),
        ("services", "host_regex", "(?a)x"),
        ("services", "host_regex", r"\N{DIGIT ONE}"),
        ("services", "headers", [{"direction": "request", "name": "X-A\n", "value": "v"}]),
        ("services", "persistence_header", "X K"),
        ("backends", "tls_sni", "a.test b.test"),
        ("backends", "tls_sni", "a.test\nlisten evil"),
        ("options", "redirects", [{"path_prefix": "/x", "target": "/a b"}]),
        ("options", "redirect_ports", "8000-8100"),
    ],
)
def test_the_import_refuses_what_haproxy_cannot_take_where_it_is(shop, admin_user, where, field, value):
    document = config_io.export_config()
    entry = document["http"]["farms"][0]
    location = "http.farms[0].options" if where == "options" else f"http.farms[0].{where}[0]"
    (entry["options"] if where == "options" else entry[where][0])[field] = value
    result = config_io.import_config(document, actor=admin_user)
    assert not result.ok and (location, field) in {(e.location, e.field) for e in result.errors}, result.to_json()
