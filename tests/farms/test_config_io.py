"""The whole configuration as one JSON document: export, and import that applies all or nothing."""

from __future__ import annotations

import copy
import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from rest_framework.test import APIClient

from farms import config_io, services
from farms.models import AuditEvent, Backend, Farm, Policy, StaticSession

pytestmark = pytest.mark.django_db


@pytest.fixture
def configured():
    """Two farms using every kind of object: a policy, backends with options, a static session."""
    block = services.policy_create(name="block", type="deny", elements="198.18.5.0/24")
    web = services.farm_create(
        name="web", vip="198.18.100.1", ports="80,443", mode="snat", scheduler="weight", persistence="srcip",
        source_ports="20000-29999", new_rtlimit=50, policies=[block],
    )  # fmt: skip
    first = services.backend_create(farm=web, address="198.18.1.11", weight=3)
    services.backend_create(farm=web, address="198.18.1.12", port=8080, state="drain", priority=2)
    services.session_create(farm=web, client="198.18.0.2", backend=first)
    dns = services.farm_create(name="dns", vip="2001:2:0:100::1", protocol="udp", ports="53", mode="dnat")
    services.backend_create(farm=dns, address="2001:2:0:1::11")


def exported() -> dict:
    document = config_io.export_config()
    document.pop("exported_at")
    return document


def wipe() -> None:
    for farm in Farm.objects.all():
        services.farm_delete(farm=farm)
    for policy in Policy.objects.all():
        services.policy_delete(policy=policy)


def test_export_then_import_on_an_empty_appliance_gives_the_same_configuration(configured):
    document = exported()
    assert [f["name"] for f in document["farms"]] == ["dns", "web"]
    web = document["farms"][1]
    assert web["policies"] == ["block"] and web["source_ports"] == "20000-29999"
    assert web["static_sessions"] == [{"client": "198.18.0.2", "backend": {"address": "198.18.1.11", "port": None}}]
    wipe()
    assert not Farm.objects.exists()
    result = config_io.import_config(json.loads(json.dumps(document)))
    assert result.ok, result.errors
    assert result.counts["farms"]["created"] == 2 and result.counts["backends"]["created"] == 3
    assert exported() == document
    assert StaticSession.objects.get().backend.address == "198.18.1.11"


def test_importing_the_same_document_again_changes_nothing(configured):
    document = exported()
    generations = dict(Farm.objects.values_list("name", "config_generation"))
    result = config_io.import_config(document)
    assert result.ok and result.counts["farms"] == {"created": 0, "updated": 0, "deleted": 0, "unchanged": 2}
    assert dict(Farm.objects.values_list("name", "config_generation")) == generations  # no apply needed


def test_import_updates_in_place_creates_and_deletes_to_match_the_document(configured):
    document = exported()
    web_id = Farm.objects.get(name="web").id
    document["farms"] = [f for f in document["farms"] if f["name"] != "dns"]
    web = document["farms"][0]
    web["ports"] = "80"
    web["backends"] = [b for b in web["backends"] if b["address"] == "198.18.1.11"]
    web["backends"][0]["weight"] = 7
    web["backends"].append({"address": "198.18.1.13"})
    document["farms"].append({"name": "mail", "vip": "198.18.100.1", "ports": "25"})
    result = config_io.import_config(document)
    assert result.ok, result.errors
    web_now = Farm.objects.get(name="web")
    assert web_now.id == web_id and web_now.ports == "80"  # same farm, same conntrack mark
    assert sorted(Backend.objects.filter(farm=web_now).values_list("address", "weight")) == [
        ("198.18.1.11", 7),
        ("198.18.1.13", 1),
    ]
    assert sorted(Farm.objects.values_list("name", flat=True)) == ["mail", "web"]
    event = AuditEvent.objects.first()
    assert event.action == "import" and [f["name"] for f in event.after["farms"]] == ["mail", "web"]


def test_a_port_handed_from_one_farm_to_another_imports_whatever_the_order(configured):
    document = exported()
    names = [f["name"] for f in document["farms"]]
    document["farms"].insert(0, {"name": "https", "vip": "198.18.100.1", "ports": "443"})  # before 'web'
    document["farms"][names.index("web") + 1]["ports"] = "80"  # 'web' gives 443 away
    result = config_io.import_config(document)
    assert result.ok, result.errors
    assert Farm.objects.get(name="https").ports == "443"


def test_an_invalid_document_changes_nothing_and_lists_every_error_with_its_place(configured):
    before = exported()
    events = AuditEvent.objects.count()
    document = copy.deepcopy(before)
    document["farms"][1]["ports"] = "http"
    document["farms"][1]["backends"][0]["weight"] = 0
    document["farms"][0]["colour"] = "blue"
    document["farms"].append({"name": "orphan", "vip": "198.18.100.7", "ports": "80", "policies": ["missing"]})
    document["policies"][0]["elements"] = "not-a-network"
    document["farms"].append({"vip": "198.18.100.8"})
    result = config_io.import_config(document)
    assert not result.ok
    found = {(e.location, e.field) for e in result.errors}
    assert {
        ("farms[1]", "ports"),
        ("farms[1].backends[0]", "weight"),
        ("farms[0]", "colour"),
        ("farms[2]", "policies"),
        ("policies[0]", "elements"),
        ("farms[3]", "name"),
    } <= found, result.errors
    assert exported() == before and AuditEvent.objects.count() == events


def test_dry_run_validates_and_changes_nothing(configured):
    before = exported()
    result = config_io.import_config({"lbweb_config": 1, "policies": [], "farms": []}, dry_run=True)
    assert result.ok and result.dry_run and result.counts["farms"]["deleted"] == 2
    assert exported() == before
    assert not config_io.import_config({"farms": []}).ok  # not an lbweb document


def test_api_export_and_import(admin_user, configured):
    client = APIClient()
    client.force_authenticate(admin_user)
    document = client.get("/api/v1/config/export/").json()
    document["farms"][0]["ports"] = "53,5353"
    checked = client.post("/api/v1/config/import/?dry_run=1", document, format="json")
    assert checked.status_code == 200 and checked.json()["dry_run"]
    assert Farm.objects.get(name="dns").ports == "53"
    applied = client.post("/api/v1/config/import/", document, format="json")
    assert applied.status_code == 200 and applied.json()["counts"]["farms"]["updated"] == 1
    assert Farm.objects.get(name="dns").ports == "53,5353"
    document["farms"][0]["vip"] = "nowhere"
    refused = client.post("/api/v1/config/import/", document, format="json")
    assert refused.status_code == 400 and not refused.json()["ok"]
    assert refused.json()["errors"] == [
        {"location": "farms[0]", "field": "vip", "message": "Enter a valid IPv4 or IPv6 address."}
    ]


def test_ui_download_and_upload(admin_user, configured):
    client = Client()
    client.force_login(admin_user)
    download = client.get("/config/export/")
    assert download["Content-Disposition"].startswith("attachment")
    document = json.loads(download.content)
    document["farms"][1]["ports"] = "bad"
    upload = SimpleUploadedFile("lbweb-config.json", json.dumps(document).encode(), "application/json")
    page = client.post("/config/", {"file": upload})
    assert page.status_code == 400
    assert "<code>farms[1]</code>" in page.content.decode() and "Nothing was changed" in page.content.decode()
    document["farms"][1]["ports"] = "80"
    done = client.post("/config/", {"text": json.dumps(document)})
    assert done.status_code == 302 and Farm.objects.get(name="web").ports == "80"
