"""nftlb JSON documents: import (all or nothing, every finding with its path), export, round trip, real traffic."""

from __future__ import annotations

import copy
import json

import pytest
from rest_framework.test import APIClient

from farms import services
from farms.models import AuditEvent, Backend, ConfigGeneration, Farm, Policy, StaticSession
from farms.nftlb import import_document
from farms.nftlb.schema import BACKEND_FIELD_ATTRIBUTE, FARM_FIELD_ATTRIBUTE
from tests import support
from tests.support.lab import backend4, vip4

FIXTURES = support.FIXTURES / "nftlb"
IMPORT, EXPORT = "/api/v1/nftlb/import/", "/api/v1/nftlb/export/"

pytestmark = pytest.mark.django_db


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


@pytest.fixture
def rest(django_user_model) -> APIClient:
    """An authenticated client; the user has no password, so no slow hashing per test."""
    client = APIClient()
    client.force_authenticate(django_user_model.objects.create_user("nftlb-admin", is_staff=True, is_superuser=True))
    return client


def post_import(rest, document, expect=200, query="") -> dict:
    response = rest.post(IMPORT + query, document, format="json")
    assert response.status_code == expect, response.content
    return response.json()


def export(rest, query="") -> dict:
    response = rest.get(EXPORT + query)
    assert response.status_code == 200, response.content
    return response.json()


def farm_doc(name="web", vip="198.18.100.1", **attributes) -> dict:
    doc = {"name": name, "virtual-addr": vip, "virtual-ports": "80", "mode": "dnat", "scheduler": "rr"}
    doc.setdefault("backends", [{"name": "bck0", "ip-addr": "198.18.1.11"}])
    return {**doc, **attributes}


def paths(entries: list[dict]) -> set[str]:
    return {e["path"] for e in entries}


# -- the mapping ------------------------------------------------------------------------------------


def test_every_farm_and_backend_field_has_an_nftlb_attribute():
    """A field added to the model without an nftlb attribute would be lost by export: this fails first."""
    assert set(services.FARM_FIELDS) <= set(FARM_FIELD_ATTRIBUTE)
    assert set(services.BACKEND_FIELDS) <= set(BACKEND_FIELD_ATTRIBUTE)


# -- imports of nftlb-style documents -----------------------------------------------------------------


def test_snat_farm_with_persistence_limits_and_static_sessions(rest):
    result = post_import(rest, fixture("snat_ipv4_weight_persistence"))
    assert result["farms_created"] == ["web-snat"] and result["errors"] == [] and result["unknown"] == []
    farm = Farm.objects.get(name="web-snat")
    assert (farm.vip, farm.ports, farm.mode, farm.protocol, farm.scheduler) == (
        "198.18.100.10", "80,443", "snat", "tcp", "weight",
    )  # fmt: skip
    assert (farm.source_addr, farm.persistence, farm.persist_ttl, farm.sched_param) == (
        "198.18.1.1", "srcip srcport", 300, "",
    )  # fmt: skip
    assert (farm.new_rtlimit, farm.new_rtlimit_burst, farm.rst_rtlimit, farm.est_connlimit) == (20, 40, 10, 1000)
    assert (farm.limit_verdict, farm.log_drops, farm.tcp_strict, farm.log, farm.log_forward) == (
        "drop", True, True, False, True,
    )  # fmt: skip
    assert (farm.log_prefix, farm.log_rtlimit, farm.log_rtlimit_unit) == ("TYPE-FNAME", 5, "second")
    backends = {b.address: b for b in farm.backends.all()}
    assert [(b.port, b.weight, b.priority, b.state) for b in backends.values()] == [
        (8080, 5, 1, "enabled"),
        (8080, 3, 1, "disabled"),
        (8080, 1, 2, "enabled"),
    ]
    assert backends["198.18.1.11"].est_connlimit == 100
    sessions = {s.client: s.backend.address for s in StaticSession.objects.filter(farm=farm)}
    assert sessions == {"198.18.0.2:40000": "198.18.1.11", "198.18.0.3:40001": "198.18.1.13"}
    ignored = {e["path"]: e for e in result["ignored"]}
    assert "farms[0].verdict" not in ignored  # 'log drop': logged and dropped, as in nftlb
    assert "learnt session" in ignored["farms[0].sessions[2]"]["reason"]  # a dynamic session is not imported
    assert ignored["farms[0].backends[2].name"]["value"] == "spare"
    assert "farms[0].mark" not in ignored and "farms[0].queue" not in ignored  # nftlb defaults: nothing lost


def test_a_dump_of_nftlb_itself_imports_with_nothing_unknown_and_nothing_lost(rest):
    """nftlb's GET /farms writes every attribute, defaults included: none of them is a finding."""
    result = post_import(rest, fixture("nftlb_dump"))
    assert result["unknown"] == [] and result["errors"] == []
    assert [(e["path"], e["attribute"]) for e in result["ignored"]] == [
        ("farms[0].backends[0].name", "name"),
        ("farms[0].backends[1].name", "name"),
    ]
    farm = Farm.objects.get(name="lb01")
    assert (farm.mode, farm.scheduler, farm.persistence, farm.new_rtlimit, farm.tcp_strict) == (
        "snat", "weight", "", 0, False,
    )  # fmt: skip
    assert [b.weight for b in farm.backends.all()] == [5, 5]
    assert [p.name for p in farm.policies.all()] == ["black001"]


def test_ipv6_dnat_udp_hash_and_symhash_farms(rest):
    result = post_import(rest, fixture("dnat_ipv6_udp_hash"))
    assert sorted(result["farms_created"]) == ["dns6", "tftp6"]
    dns = Farm.objects.get(name="dns6")
    assert (dns.vip, dns.ports, dns.protocol, dns.scheduler, dns.sched_param) == (
        "2001:2:0:100::53", "53,5353", "udp", "hash", "srcip srcport",
    )  # fmt: skip
    assert (dns.new_rtlimit, dns.new_rtlimit_unit) == (120, "minute")  # kept exact, not rounded to /second
    states = {b.address: b.state for b in dns.backends.all()}
    assert states == {"2001:2:0:1::11": "enabled", "2001:2:0:1::12": "disabled"}
    down = next(e for e in result["ignored"] if e["path"] == "farms[0].backends[1].state")
    assert down["value"] == "down" and "health" in down["reason"]
    tftp = Farm.objects.get(name="tftp6")
    assert (tftp.scheduler, tftp.helper, tftp.state) == ("symhash", "tftp", "off")


def test_dsr_farm_takes_its_interface_and_backend_macs(rest):
    result = post_import(rest, fixture("dsr_ipv4_tcp_hash"))
    farm = Farm.objects.get(name="dsr-web")
    assert (farm.mode, farm.interface, farm.scheduler, farm.sched_param) == ("dsr", "eth1", "hash", "srcip")
    assert [b.mac for b in farm.backends.all()] == ["02:00:00:00:01:11", "02:00:00:00:01:12"]
    assert all(b.port is None for b in farm.backends.all())
    assert farm.ether_addr == "02:00:00:00:00:01"  # the source MAC of the frames it forwards, as in nftlb
    assert "farms[0].ether-addr" not in paths(result["ignored"])


def test_stateless_dnat_farm_with_a_backend_port(rest):
    post_import(rest, fixture("stlsdnat_ipv4_udp"))
    farm = Farm.objects.get(name="syslog")
    assert (farm.mode, farm.protocol, farm.ports) == ("stlsdnat", "udp", "514")
    assert {(b.address, b.port) for b in farm.backends.all()} == {("198.18.1.11", 5514), ("198.18.1.12", 5514)}


def test_policies_addresses_and_farm_policy_references(rest):
    result = post_import(rest, fixture("policies_and_addresses"))
    assert result["policies_created"] == ["black001", "office"]
    black, office = Policy.objects.get(name="black001"), Policy.objects.get(name="office")
    assert black.type == "deny" and black.element_list == ["198.18.40.0/24", "198.18.50.7", "2001:2:0:50::/64"]
    assert office.type == "allow" and office.element_list == ["198.18.0.0/24"]
    api = Farm.objects.get(name="api")
    assert (api.vip, api.ports, api.protocol) == ("198.18.100.40", "8443", "tcp")  # from the address object
    assert sorted(p.name for p in api.policies.all()) == ["black001", "office"]
    assert [p.name for p in Farm.objects.get(name="public").policies.all()] == ["black001"]
    assert StaticSession.objects.get(farm=api).client == "198.18.0.2"


# -- findings -----------------------------------------------------------------------------------------


def test_unknown_attributes_are_listed_with_their_path_and_do_not_block(rest):
    doc = {"farms": [farm_doc(colour="blue", backends=[{"name": "b", "ip-addr": "198.18.1.11", "flavour": "x"}])]}
    doc["comment"] = "hello"
    result = post_import(rest, doc)
    assert sorted(result["unknown"], key=lambda e: e["path"]) == [
        {"path": "comment", "attribute": "comment"},
        {"path": "farms[0].backends[0].flavour", "attribute": "flavour"},
        {"path": "farms[0].colour", "attribute": "colour"},
    ]
    assert Farm.objects.filter(name="web").exists()


def test_strict_import_refuses_unknown_attributes(rest):
    result = post_import(rest, {"farms": [farm_doc(colour="blue")]}, expect=400, query="?strict=1")
    assert paths(result["errors"]) == {"farms[0].colour"}
    assert not Farm.objects.exists()


def test_a_bad_value_in_the_third_farm_refuses_the_whole_document_with_every_error(rest):
    generation = ConfigGeneration.current()
    doc = {
        "farms": [
            farm_doc("one", vip4(1)),
            farm_doc(
                "two",
                vip4(2),
                **{"persist-ttl": "0"},  # refused by the model, while its backend is refused here
                backends=[{"name": "b", "ip-addr": "198.18.1.11", "weight": "0"}],
            ),
            farm_doc("three", vip4(3), backends=[{"name": "b", "ip-addr": "198.18.1.300"}]),
        ]
    }
    result = post_import(rest, doc, expect=400)
    assert paths(result["errors"]) == {
        "farms[1].persist-ttl",
        "farms[1].backends[0].weight",
        "farms[2].backends[0].ip-addr",
    }
    assert "198.18.1.300" in next(e["message"] for e in result["errors"] if e["path"].endswith("ip-addr"))
    assert result["farms_created"] == []
    assert not Farm.objects.exists() and not Backend.objects.exists()
    assert ConfigGeneration.current() == generation


def test_refusals_of_the_model_carry_the_nftlb_path(rest):
    services.farm_create(name="taken", vip=vip4(9), protocol="tcp", ports="80", mode="dnat", scheduler="rr")
    doc = {
        "farms": [
            farm_doc("fine", vip4(8)),
            farm_doc("sticky", vip4(7), **{"intra-connect": "on", "persistence": "srcmac"}),  # no MAC locally
            farm_doc("clash", vip4(9), **{"virtual-ports": "79-81"}),
            farm_doc("v6-backend", vip4(6), backends=[{"name": "b", "ip-addr": "2001:2:0:1::11"}]),
            farm_doc("nopersist", vip4(5), sessions=[{"client": "198.18.0.2", "backend": "bck0"}]),
        ]
    }
    result = post_import(rest, doc, expect=400)
    assert paths(result["errors"]) == {
        "farms[1].persistence",
        "farms[2].virtual-ports",
        "farms[3].backends[0].ip-addr",
        "farms[4].persistence",
    }
    assert list(Farm.objects.values_list("name", flat=True)) == ["taken"]  # "fine" was rolled back too


@pytest.mark.parametrize(
    "attributes, path, words",
    [
        ({"verdict": "accept"}, "farms[0].verdict", "drop"),
        ({"new-rtlimit": "30/fortnight"}, "farms[0].new-rtlimit", "600/minute"),
        ({"queue": "0"}, "farms[0].queue", "user-space queue"),
        ({"family": "dual"}, "farms[0].family", "one family"),
        ({"family": "ipv6"}, "farms[0].family", "does not match"),
        ({"persistence": "dstip"}, "farms[0].persistence", "srcip"),
        ({"helper": "sane"}, "farms[0].helper", "sane"),
        ({"tcp-strict": "maybe"}, "farms[0].tcp-strict", "on"),
        ({"mode": None}, "farms[0].mode", "string"),
        (
            {"backends": [{"name": "b", "ip-addr": "198.18.1.11", "source-addr": "198.18.1.2"}]},
            "farms[0].backends[0].source-addr",
            "snat farm",
        ),
        ({"backends": [{"name": "b"}]}, "farms[0].backends[0].ip-addr", "needs"),
        ({"sessions": [{"client": "198.18.0.2", "backend": "ghost"}]}, "farms[0].sessions[0].backend", "ghost"),
        ({"policies": [{"name": "nowhere"}]}, "farms[0].policies[0].name", "nowhere"),
        ({"action": "delete"}, "farms[0].action", "command"),
    ],
)
def test_values_lbweb_cannot_honour_are_refused_with_their_path(rest, attributes, path, words):
    doc = farm_doc()
    doc.update(attributes)
    doc = {k: v for k, v in doc.items() if v is not None or k == "mode"}
    result = post_import(rest, {"farms": [doc]}, expect=400)
    messages = [e["message"] for e in result["errors"] if e["path"] == path]
    assert messages and words in " ".join(messages), result["errors"]
    assert not Farm.objects.exists()


def test_dry_run_validates_and_writes_nothing(rest):
    generation = ConfigGeneration.current()
    result = post_import(rest, fixture("policies_and_addresses"), query="?dry_run=1")
    assert result["dry_run"] and sorted(result["farms_created"]) == ["api", "public"]
    assert not Farm.objects.exists() and not Policy.objects.exists() and not StaticSession.objects.exists()
    assert ConfigGeneration.current() == generation
    bad = fixture("policies_and_addresses")
    bad["farms"][1]["persistence"] = "srcip dstip"
    assert paths(post_import(rest, bad, expect=400, query="?dry_run=1")["errors"]) == {"farms[1].persistence"}


def test_reimport_updates_by_name_and_keeps_matching_backends(rest):
    post_import(
        rest,
        {
            "farms": [
                farm_doc(backends=[{"name": "a", "ip-addr": "198.18.1.11"}, {"name": "b", "ip-addr": "198.18.1.12"}])
            ]
        },
    )  # noqa: E501
    farm = Farm.objects.get(name="web")
    kept = farm.backends.get(address="198.18.1.12").id
    changed = farm_doc(
        vip="2001:2:0:100::1",
        scheduler="weight",
        backends=[{"name": "x", "ip-addr": "2001:2:0:1::13", "weight": "4"}],
    )
    result = post_import(rest, {"farms": [changed]})
    assert result["farms_updated"] == ["web"]
    farm.refresh_from_db()
    assert farm.vip == "2001:2:0:100::1" and [b.address for b in farm.backends.all()] == ["2001:2:0:1::13"]
    back = farm_doc(backends=[{"name": "b", "ip-addr": "198.18.1.12", "weight": "7"}])
    post_import(rest, {"farms": [back]})
    assert farm.backends.get().weight == 7
    post_import(rest, {"farms": [back]})
    assert farm.backends.get().id == Farm.objects.get(name="web").backends.get().id  # matched, not recreated
    assert kept not in Backend.objects.values_list("id", flat=True)


# -- export and round trip ----------------------------------------------------------------------------


def build_everything() -> None:
    """A configuration using every option the nftlb format carries, lbweb's extensions included."""
    blocked = services.policy_create(name="blocked", type="deny", elements="198.18.50.0/24 2001:2:0:50::7")
    office = services.policy_create(name="office", type="allow", elements="198.18.0.0/24", description="HQ")
    snat = services.farm_create(
        name="a-snat", description="front door", vip=vip4(10), protocol="tcp", ports="80,443,8000-8010",
        mode="snat", scheduler="weight", persistence="srcip srcport", persist_ttl=120,
        source_addr="198.18.1.1-198.18.1.2", source_ports="1024-65535", new_rtlimit=10, new_rtlimit_burst=20,
        rst_rtlimit=5, est_connlimit=100, limit_verdict="reject", log=True, log_prefix="web ", log_rtlimit=3,
        helper="ftp", tcp_strict=True, policies=[blocked, office],
    )  # fmt: skip
    first = services.backend_create(farm=snat, address=backend4("b1"), port=8080, weight=3, est_connlimit=50)
    services.backend_create(farm=snat, address=backend4("b2"), port=8080, priority=2, state="drain")
    services.session_create(farm=snat, client="198.18.0.2:40000", backend=first)
    dns = services.farm_create(
        name="b-dns6", vip="2001:2:0:100::53", protocol="udp", ports="53", mode="dnat", scheduler="hash",
        sched_param="srcip dstport", state="off", helper="tftp", policies=[blocked],
    )  # fmt: skip
    services.backend_create(farm=dns, address="2001:2:0:1::11", port=5353)
    dsr = services.farm_create(
        name="c-dsr", vip=vip4(20), protocol="tcp", ports="80", mode="dsr", scheduler="symhash", interface="eth1"
    )
    services.backend_create(farm=dsr, address=backend4("b1"), mac="02:00:00:00:01:11")
    syslog = services.farm_create(name="d-syslog", vip=vip4(30), protocol="udp", ports="514", mode="stlsdnat")
    services.backend_create(farm=syslog, address=backend4("b3"), port=5514, state="disabled")
    every = services.farm_create(
        name="e-all", vip=vip4(40), protocol="all", ports="", mode="snat", scheduler="leastconn",
        persistence="srcip", intra_connect=True, flow_offload=True,
    )  # fmt: skip
    services.session_create(
        farm=every, client="198.18.0.9", backend=services.backend_create(farm=every, address=backend4("b2"))
    )
    six = services.farm_create(
        name="f-v6", vip="2001:2:0:100::80", protocol="tcp", ports="80", mode="dnat", scheduler="weight",
        persistence="srcip srcport",
    )  # fmt: skip
    b6 = services.backend_create(farm=six, address="2001:2:0:1::12")
    services.session_create(farm=six, client="[2001:2::2]:40000", backend=b6)


def snapshot() -> dict:
    """Every stored value the nftlb format carries, by farm name (ids aside)."""
    out = {}
    for farm in Farm.objects.all():
        backends = [tuple(getattr(b, f) for f in services.BACKEND_FIELDS) for b in farm.backends.all()]
        out[farm.name] = {
            "fields": {f: getattr(farm, f) for f in services.FARM_FIELDS},
            "backends": backends,
            "sessions": sorted((s.client, s.backend.address) for s in farm.static_sessions.all()),
            "policies": sorted(p.name for p in farm.policies.all()),
        }
    out["policies"] = [(p.name, p.type, p.description, p.elements) for p in Policy.objects.all()]
    return out


def delete_everything() -> None:
    for farm in Farm.objects.all():
        services.farm_delete(farm=farm)
    for policy in Policy.objects.all():
        services.policy_delete(policy=policy)


def test_export_import_into_an_empty_database_and_export_again_is_the_same_document(rest):
    build_everything()
    first = export(rest)
    assert [f["name"] for f in first["farms"]] == ["a-snat", "b-dns6", "c-dsr", "d-syslog", "e-all", "f-v6"]
    snat = first["farms"][0]
    assert snat["sessions"] == [{"client": "198.18.0.2 . 40000", "backend": "bck0"}]
    assert (snat["verdict"], snat["backends"][1]["state"], snat["source-ports"]) == (
        "log reject accept", "drain", "1024-65535",
    )  # fmt: skip
    assert first["farms"][5]["sessions"] == [{"client": "2001:2::2 . 40000", "backend": "bck0"}]
    assert first["policies"][0] == {
        "name": "blocked",
        "family": "ipv4",
        "type": "blacklist",
        "elements": [{"data": "198.18.50.0/24"}, {"data": "2001:2:0:50::7"}],
    }
    stored = snapshot()
    delete_everything()
    assert not Farm.objects.exists() and not Policy.objects.exists()
    result = post_import(rest, copy.deepcopy(first))
    assert snapshot() == stored  # nothing lost on the way out and back
    assert result["unknown"] == [] and len(result["farms_created"]) == 6
    assert {e["attribute"] for e in result["ignored"]} == {"name"}  # only the generated backend names
    assert export(rest) == first
    again = post_import(rest, copy.deepcopy(first))  # importing the same document again changes nothing
    assert len(again["farms_updated"]) == 6 and export(rest) == first


def test_export_of_one_farm_and_of_a_farm_that_does_not_exist(rest):
    build_everything()
    one = export(rest, "?farm=b-dns6")
    assert [f["name"] for f in one["farms"]] == ["b-dns6"]
    assert [p["name"] for p in one["policies"]] == ["blocked"]
    farm = one["farms"][0]
    assert farm["family"] == "ipv6" and farm["sched-param"] == "srcip dstport" and farm["state"] == "off"
    assert farm["backends"] == [
        {"name": "bck0", "ip-addr": "2001:2:0:1::11", "port": "5353", "weight": "1", "priority": "1",
         "mark": "0x0", "est-connlimit": "0", "state": "up"}
    ]  # fmt: skip
    assert rest.get(EXPORT + "?farm=nope").status_code == 404


def test_the_pure_reader_needs_no_database_writes():
    plan = import_document(fixture("dsr_ipv4_tcp_hash"))
    assert plan.errors == [] and [f.name for f in plan.farms] == ["dsr-web"]
    assert (
        plan.farms[0].values["interface"] == "eth1" and plan.farms[0].backends[1].values["mac"] == "02:00:00:00:01:12"
    )
    assert not Farm.objects.exists()


def test_openapi_documents_the_nftlb_endpoints(rest):
    schema = rest.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    post = schema["paths"]["/api/v1/nftlb/import/"]["post"]
    assert {p["name"] for p in post["parameters"]} == {"dry_run", "strict", "partial"}
    assert set(post["responses"]) == {"200", "400", "401", "403"}  # errors every operation answers: lbweb.api_schema
    assert {p["name"] for p in schema["paths"]["/api/v1/nftlb/export/"]["get"]["parameters"]} == {"farm"}


# -- real traffic -------------------------------------------------------------------------------------


@pytest.mark.dataplane
@pytest.mark.django_db(transaction=True)
def test_an_imported_nftlb_dnat_farm_carries_real_traffic_to_the_three_lab_backends(api, worker, lab):
    document = {
        "farms": [
            {
                "name": "imported",
                "family": "ipv4",
                "virtual-addr": vip4(90),
                "virtual-ports": "80",
                "mode": "dnat",
                "protocol": "tcp",
                "scheduler": "rr",
                "state": "up",
                "backends": [
                    {"name": f"bck{i}", "ip-addr": backend4(name), "weight": "1", "priority": "1", "state": "up"}
                    for i, name in enumerate(("b1", "b2", "b3"))
                ],
            }
        ]
    }
    result = api.post("nftlb/import/", document, expect=200)
    assert result["farms_created"] == ["imported"]
    farm = api.get("farms/?name=imported")["results"][0]
    api.wait_applied(farm["id"])
    answers = lab.http_get(vip4(90), 80, count=9)
    assert {a["backend"] for a in answers} == {"b1", "b2", "b3"}
    assert {a["client"] for a in answers} == {"198.18.0.2"}  # DNAT: the backends see the client


def test_the_import_page_imports_partially_and_reports_what_it_skipped(django_user_model):
    """The UI page (System › Export / import › Import an nftlb document) takes the partial import too."""
    from django.test import Client

    admin = django_user_model.objects.create_user("page-admin", is_staff=True, is_superuser=True)
    browser = Client()
    browser.force_login(admin)
    assert 'id="nftlb-import-link"' in browser.get("/config/").content.decode()
    doc = {"farms": [farm_doc("good", vip4(1)), farm_doc("queued", vip4(2), queue="0")]}
    all_or_nothing = browser.post("/config/nftlb/", {"text": json.dumps(doc)})
    assert all_or_nothing.status_code == 400 and not Farm.objects.exists()
    assert "Nothing was changed" in all_or_nothing.content.decode()
    partial = browser.post("/config/nftlb/", {"text": json.dumps(doc), "partial": "on"})
    page = partial.content.decode()
    assert partial.status_code == 200 and list(Farm.objects.values_list("name", flat=True)) == ["good"]
    assert 'id="nftlb-skipped"' in page and "farms[1].queue" in page and "user-space queue" in page
    made = AuditEvent.objects.get(object_type="farm", object_name="good", action="create")
    assert made.actor == admin and made.actor_name == "page-admin"  # the person importing, never "system"
