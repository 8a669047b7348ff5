"""nftlb documents in and out: every attribute mapped or reported, all or nothing, and real traffic after import."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from farms.models import Backend, Farm, Policy, StaticSession
from tests.lab import backend4, vip4

FIXTURES = Path(__file__).parent / "fixtures" / "nftlb"
MIGRATION = json.loads((FIXTURES / "migration.json").read_text())


@pytest.fixture
def client(admin_user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=admin_user).key}")
    return client


def do_import(client, document, query="") -> tuple[int, dict]:
    response = client.post(f"/api/v1/nftlb/import/{query}", document, format="json")
    return response.status_code, response.json()


@pytest.mark.django_db
def test_import_maps_every_supported_attribute_and_reports_the_rest(client):
    status, body = do_import(client, MIGRATION)
    assert status == 200, body
    assert body["created"] == ["web-snat", "dns6", "direct", "syslog"] and body["policies"] == ["blocked"]
    assert {u["path"] for u in body["unknown"]} == {
        "farms[0].backends[0].name", "farms[0].backends[1].name", "farms[0].backends[2].name",
        "farms[1].backends[0].name", "farms[1].backends[1].name", "farms[2].backends[0].name",
        "farms[3].mark", "farms[3].backends[0].mark", "farms[3].backends[0].name",
    }  # fmt: skip
    web = Farm.objects.get(name="web-snat")
    assert (web.mode, web.scheduler, web.persistence, web.persist_ttl) == ("snat", "weight", "srcip", 120)
    assert (web.new_rtlimit, web.new_rtlimit_burst, web.est_connlimit, web.ports) == (100, 20, 1000, "80,443")
    assert [p.name for p in web.policies.all()] == ["blocked"]
    assert Policy.objects.get().type == "deny"
    backends = {b.address: b for b in web.backends.all()}
    assert backends[backend4("b2")].port == 8080 and backends[backend4("b2")].weight == 3
    assert backends[backend4("b3")].priority == 2 and backends[backend4("b3")].state == "disabled"
    assert StaticSession.objects.get().backend == backends[backend4("b2")]
    assert Farm.objects.get(name="dns6").sched_param == "srcip srcport"
    assert Farm.objects.get(name="direct").interface == "eth0"
    assert Backend.objects.get(farm__name="direct").mac == "02:00:00:00:00:11"


@pytest.mark.django_db
def test_export_then_import_into_an_empty_database_gives_the_same_document(client):
    assert do_import(client, MIGRATION)[0] == 200
    exported = client.get("/api/v1/nftlb/export/").json()
    Farm.objects.all().delete()
    Policy.objects.all().delete()
    status, body = do_import(client, exported)
    assert status == 200 and body["errors"] == []
    assert client.get("/api/v1/nftlb/export/").json() == exported
    one = client.get("/api/v1/nftlb/export/", {"farm": "dns6"}).json()
    assert [f["name"] for f in one["farms"]] == ["dns6"]


@pytest.mark.django_db
def test_one_bad_value_refuses_everything_with_its_path(client):
    document = copy.deepcopy(MIGRATION)
    document["farms"][2]["backends"][0]["ip-addr"] = "300.1.1.1"
    document["farms"][1]["persistence"] = "dstip"
    status, body = do_import(client, document)
    assert status == 400
    paths = {e["path"] for e in body["errors"]}
    assert "farms[2].backends[0].ip-addr" in paths and "farms[1].persistence" in paths
    assert not Farm.objects.exists() and not Policy.objects.exists()


@pytest.mark.django_db
def test_dry_run_writes_nothing_and_strict_refuses_unknown_attributes(client):
    status, body = do_import(client, MIGRATION, "?dry_run=1")
    assert status == 200 and body["dry_run"] and len(body["created"]) == 4
    assert not Farm.objects.exists()
    status, body = do_import(client, MIGRATION, "?strict=1")
    assert status == 400 and any(e["path"] == "farms[3].mark" for e in body["errors"])
    assert not Farm.objects.exists()


@pytest.mark.django_db
def test_importing_again_updates_by_name(client):
    assert do_import(client, MIGRATION)[0] == 200
    document = copy.deepcopy(MIGRATION)
    document["farms"] = [document["farms"][0]]
    document["farms"][0]["backends"] = document["farms"][0]["backends"][:1]
    document["farms"][0]["sessions"] = []
    document["farms"][0]["persist-ttl"] = "30"
    status, body = do_import(client, document)
    assert status == 200 and body["updated"] == ["web-snat"]
    web = Farm.objects.get(name="web-snat")
    assert web.persist_ttl == 30 and [b.address for b in web.backends.all()] == [backend4("b1")]


@pytest.mark.dataplane
@pytest.mark.django_db(transaction=True)
def test_an_imported_farm_balances_real_traffic(api, worker, lab):
    document = {
        "farms": [
            {
                "name": "moved", "family": "ipv4", "virtual-addr": vip4(90), "virtual-ports": "80", "mode": "dnat",
                "protocol": "tcp", "scheduler": "rr", "state": "up",
                "backends": [{"name": n, "ip-addr": backend4(n), "state": "up"} for n in ("b1", "b2", "b3")],
            }
        ]
    }  # fmt: skip
    response = api._call("POST", "nftlb/import/", 200, json=document).json()
    farm = api.get("farms/?name=moved")["results"][0]
    api.wait_applied(farm["id"])
    answers = lab.http_get(vip4(90), 80, count=6)
    assert sorted(a["backend"] for a in answers) == ["b1", "b1", "b2", "b2", "b3", "b3"], response
