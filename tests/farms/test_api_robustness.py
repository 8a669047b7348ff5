"""Inputs that used to answer 500: each now gets a field-level 400 or a bounded answer."""

from __future__ import annotations

import pytest
from django.utils import timezone

from farms import services
from farms.models import ApplyRun, Farm
from tests.farms.test_api import farm_data

pytestmark = pytest.mark.django_db
BIG = "99999999999999999999"


def imported(client, farm: dict) -> dict:
    response = client.post("/api/v1/config/import/", {"lbweb_config": 1, "farms": [farm]}, format="json")
    assert response.status_code == 400, response.content
    return {(e["location"], e["field"]): e["message"] for e in response.json()["errors"]}


@pytest.mark.parametrize("name", [["web"], {"a": 1}, 5, True])
def test_config_import_with_a_name_of_the_wrong_type_is_a_located_400(client, name):
    errors = imported(client, farm_data(name=name))
    assert errors == {("farms[0]", "name"): "Must be a string."}


def test_config_import_with_values_of_the_wrong_type_are_located_400s(client):
    farm = farm_data(persist_ttl="60", log=1, policies=[["p"]])
    farm["backends"] = [{"address": "198.18.1.11", "port": [80]}, {"address": ["198.18.1.12"]}]
    farm["static_sessions"] = [{"client": "198.18.0.2", "backend": {"address": "198.18.1.11", "port": [80]}}]
    errors = imported(client, farm)
    assert errors[("farms[0]", "persist_ttl")] == "Must be a whole number."
    assert errors[("farms[0]", "log")] == "Must be true or false."
    assert errors[("farms[0]", "policies")] == "Must be a list of policy names."
    assert errors[("farms[0].backends[0]", "port")] == "Must be a whole number."
    assert errors[("farms[0].backends[1]", "address")] == "Must be a string."
    assert "backend" in errors[("farms[0].static_sessions[0]", "backend")]
    assert not Farm.objects.exists()


def test_config_import_with_backends_that_are_not_a_list_is_a_400(client):
    assert imported(client, {**farm_data(), "backends": 5}) == {("farms[0]", "backends"): "'backends' must be a list."}


@pytest.mark.parametrize(
    "url, field",
    [
        (f"farms/?id={BIG}", "id"),
        (f"farms/?id=1,{BIG}", "id"),
        (f"health-events/?farm={BIG}", "farm"),
        (f"audit-events/?object_id={BIG}", "object_id"),
        (f"backends/?port={BIG}", "port"),
        ("farms/?id=٨", "id"),
    ],
)
def test_integer_filters_beyond_64_bits_are_field_level_400s(client, url, field):
    services.farm_create(**farm_data())
    response = client.get(f"/api/v1/{url}")
    assert response.status_code == 400, response.content
    assert field in response.json()


@pytest.mark.parametrize("endpoint", ["apply-runs", "audit-events", "policies", "farms"])
def test_a_limit_beyond_64_bits_is_cut_to_the_maximum_page(client, endpoint):
    for i in range(3):
        services.policy_create(name=f"p{i}", elements="")
        services.farm_create(**farm_data(name=f"f{i}", vip=f"198.18.100.{i + 1}"))
        ApplyRun.objects.create(generation=i, kind="noop", started=timezone.now(), ok=True)
    response = client.get(f"/api/v1/{endpoint}/?limit=9223372036854775808&offset={BIG}")
    assert response.status_code == 200 and response.json()["results"] == []
    response = client.get(f"/api/v1/{endpoint}/?limit=9223372036854775808")
    assert response.status_code == 200, response.content
    assert response.json()["count"] == len(response.json()["results"]) >= 3


def test_an_api_path_that_names_nothing_is_a_json_404(client):
    for url in ("/api/v1/farms/null/", "/api/v1/farms/0.05/preview/", "/api/v1/nothing/"):
        response = client.get(url)
        assert response.status_code == 404 and response.json() == {"detail": "Not found."}, url
    assert "text/html" in client.get("/no-such-page/")["Content-Type"]


def test_a_metrics_since_beyond_a_redis_stream_id_is_a_400_not_a_503(client):
    response = client.get("/api/v1/metrics/system/?since=2.8671918373624822e%2B48")
    assert response.status_code == 400 and "since" in response.json()


def test_an_unexpected_error_is_logged_with_its_traceback_where_the_journal_gets_it(client, monkeypatch):
    """A 500 leaves its traceback on the web's stderr (the journal on the appliance): Django's own handlers print
    it only with DEBUG and otherwise mail ADMINS. The image's first 500 (a missing time zone database) left no
    trace at all."""
    import io
    import logging

    from farms.api.views import FarmViewSet

    def broken(*args, **kwargs):
        raise RuntimeError("broken on purpose")

    monkeypatch.setattr(FarmViewSet, "list", broken)
    handler = next(h for h in logging.getLogger("django.request").handlers if isinstance(h, logging.StreamHandler))
    stream = io.StringIO()
    previous = handler.setStream(stream)
    try:
        client.raise_request_exception = False
        assert client.get("/api/v1/farms/").status_code == 500
    finally:
        handler.setStream(previous)
    assert "Internal Server Error: /api/v1/farms/" in stream.getvalue()
    assert "RuntimeError: broken on purpose" in stream.getvalue()


DEEP = {"arrays": "[" * 50_000, "objects": '{"a":' * 50_000}
BODY_ENDPOINTS = [
    ("post", "/api/v1/farms/"),
    ("post", "/api/v1/config/import/"),
    ("post", "/api/v1/nftlb/import/"),
    ("put", "/api/v1/cluster/"),
]


@pytest.mark.parametrize("method, url", BODY_ENDPOINTS)
@pytest.mark.parametrize("kind", list(DEEP))
def test_a_body_nested_50000_deep_is_a_json_400_that_says_so(client, method, url, kind):
    response = getattr(client, method)(url, DEEP[kind], content_type="application/json")
    assert response.status_code == 400, response.content
    assert response["Content-Type"] == "application/json"
    assert "nested deeper than 64" in response.json()["detail"], response.json()


def test_a_document_64_levels_deep_is_parsed_and_65_is_refused(client):
    def nested(depth: int) -> str:
        return "[" * (depth - 1) + "{}" + "]" * (depth - 1)

    taken = client.post("/api/v1/config/import/", nested(64), content_type="application/json")
    assert taken.status_code == 400 and "nested" not in taken.content.decode(), taken.content  # the import's own
    refused = client.post("/api/v1/config/import/", nested(65), content_type="application/json")
    assert refused.status_code == 400 and "nested deeper than 64" in refused.json()["detail"]


def test_a_3_mb_body_is_a_json_413_and_an_import_of_3_mb_is_read(client, settings):
    assert settings.DATA_UPLOAD_MAX_MEMORY_SIZE < 3_000_000 < settings.LBWEB_IMPORT_MAX_BYTES
    padding = "x" * 3_000_000
    response = client.post("/api/v1/farms/", {**farm_data(), "description": padding}, format="json")
    assert response.status_code == 413 and response["Content-Type"] == "application/json", response.content[:300]
    assert "at most 2,621,440" in response.json()["detail"]
    # A form body past Django's own limit: its check, answered in JSON too.
    form = client.post("/api/v1/farms/", {"name": "web", "description": padding})
    assert form.status_code == 413 and form["Content-Type"] == "application/json", form.content[:300]
    # The document endpoints read a large document (here one with 3 MB of description): an export of a large
    # appliance is imported again.
    document = {"lbweb_config": 1, "farms": [{**farm_data(), "description": padding}]}
    imported = client.post("/api/v1/config/import/?dry_run=1", document, format="json")
    assert imported.status_code == 400, imported.content[:300]
    assert imported.json()["errors"][0]["field"] == "description"  # read, then refused for its length


def test_a_body_larger_than_the_document_limit_is_a_json_413(client, settings):
    settings.LBWEB_IMPORT_MAX_BYTES = 1_000_000
    body = {"lbweb_config": 1, "farms": [], "pad": "x" * 1_000_000}
    for url in ("/api/v1/config/import/", "/api/v1/nftlb/import/"):
        response = client.post(url, body, format="json")
        assert response.status_code == 413 and "at most 1,000,000" in response.json()["detail"], url


def test_self_signed_names_in_unicode_become_a_labels(client):
    response = client.post(
        "/api/v1/certificates/self-signed/", {"name": "idn", "names": ["été.test", "*.Bücher.test"]}, format="json"
    )
    assert response.status_code == 201, response.content
    assert sorted(response.json()["names"]) == ["*.xn--bcher-kva.test", "xn--t-9fab.test"]


@pytest.mark.parametrize(
    "name, words",
    [
        ("bad name", "U+0020"),
        ("*.*", "U+002A"),
        ("a" * 253, "Label too long"),
        ("a..test", "Empty Label"),
        (".test", "Empty Label"),
        ("", "blank"),  # DRF's own field error
        ("-a.test", "hyphen"),
        ("é" * 60 + ".test", "Label too long"),  # short as typed, 64 characters as the DNS writes it
    ],
)
def test_self_signed_names_that_are_not_host_names_are_a_field_error(client, name, words):
    response = client.post("/api/v1/certificates/self-signed/", {"name": "bad", "names": [name]}, format="json")
    assert response.status_code == 400, response.content
    assert words in str(response.json()["names"]), response.json()
    from l7.models import Certificate

    assert not Certificate.objects.exists()
