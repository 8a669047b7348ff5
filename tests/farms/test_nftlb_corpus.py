"""lbweb's own corpus of nftlb documents (tests/support/fixtures/nftlb/corpus/): one document per nftlb feature,
written from nftlb's README (its keys and values) in the lab ranges 198.18.0.0/15 and 2001:2::/48.

Every document either imports, or is refused with the reason lbweb states for it (``REFUSED``, each
also in docs/farms.md, "Moving from nftlb or SKUDONET"); every imported farm compiles to a ruleset the
kernel takes, and export, import into an empty database and export again is the same document.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import uuid

import pytest
from rest_framework.test import APIClient

from compiler import full_document
from farms import services
from farms.models import Farm, Policy
from farms.specs import farm_spec, policy_spec
from tests.support import FIXTURES

CORPUS = FIXTURES / "nftlb" / "corpus"
DOCUMENTS = sorted(p.stem for p in CORPUS.glob("*.json"))
IMPORT, EXPORT = "/api/v1/nftlb/import/", "/api/v1/nftlb/export/"
TEXT = {"capture_output": True, "text": True}

# What lbweb still refuses, with words of its reason (each listed in docs/farms.md, "What is still refused").
REFUSED = {
    "queue": ("farms[0].queue", "user-space queue"),
    "stlsdnat_tcp_weighted_rr": ("farms[0].scheduler", "hash"),
    "stlsdnat_static_sessions": ("farms[0].persistence", "persistence"),
    "dsr_and_stlsdnat": None,  # imports: both farms are plain
}
REFUSED = {k: v for k, v in REFUSED.items() if v}

pytestmark = pytest.mark.django_db


@pytest.fixture
def rest(django_user_model) -> APIClient:
    client = APIClient()
    client.force_authenticate(django_user_model.objects.create_user("corpus-admin", is_staff=True, is_superuser=True))
    return client


def load(name: str) -> dict:
    return json.loads((CORPUS / f"{name}.json").read_text())


def test_the_corpus_covers_nftlb_s_features():
    assert len(DOCUMENTS) >= 65


@pytest.mark.parametrize("name", DOCUMENTS)
def test_each_document_imports_or_is_refused_with_its_reason(rest, name):
    response = rest.post(IMPORT, load(name), format="json")
    body = response.json()
    if name in REFUSED:
        path, words = REFUSED[name]
        assert response.status_code == 400, body
        messages = " ".join(e["message"] for e in body["errors"] if e["path"] == path)
        assert words in messages, body["errors"]
        assert not Farm.objects.exists()
    else:
        assert response.status_code == 200, body["errors"]
        assert body["unknown"] == []
        assert sorted(body["farms_created"]) == sorted(f["name"] for f in load(name)["farms"])


# The imported documents where lbweb behaves otherwise than nftlb, each said in the import's report
# (``differences``, or ``ignored`` for a setting it does not keep); docs/farms.md ("What is still refused") counts them.
DIFFERING = {
    "dnat_farm_mark": "mark",  # the packet mark without nftlb's own bits
    "snat_backend_marks": "mark",
    "snat_rr_log_all_directions": "mark",
    "backend_est_connlimit": "est-connlimit-log-prefix",  # logged under the backend's address
    "log_prefixes": "est-connlimit-log-prefix",
    "policies_blacklist": "timeout",  # lbweb's policy elements do not expire
    # mode local: nftlb uses its backends (and the farm's source-addr, mark) only to rewrite the source of the
    # connections the local service opens to them; lbweb's local farms have none. And nftlb never logs input.
    "mode_local": "backends",
    "local_source_addr": "source-addr",
    "local_with_policies": "backends",
    "local_log_marks_sessions": "log",
}


def test_every_difference_from_nftlb_is_reported_and_counted(rest):
    found = {}
    for name in DOCUMENTS:
        if name in REFUSED:
            continue
        body = rest.post(IMPORT + "?dry_run=1", load(name), format="json").json()
        kept_out = [e for e in body["ignored"] if e["attribute"] != "name"]  # backend names: lbweb numbers them
        notes = {e["attribute"] for e in body["differences"] + kept_out}
        if notes:
            found[name] = notes
    assert {name: DIFFERING[name] in notes for name, notes in found.items()} == dict.fromkeys(DIFFERING, True)
    assert (len(DOCUMENTS), len(REFUSED), len(DOCUMENTS) - len(REFUSED) - len(DIFFERING)) == (65, 3, 52)


def test_a_partial_import_of_the_whole_corpus_takes_every_valid_farm(rest):
    farms, policies = [], {}
    for name in DOCUMENTS:
        doc = load(name)
        farms += doc["farms"]
        policies.update({p["name"]: p for p in doc.get("policies", [])})
    response = rest.post(IMPORT + "?partial=1", {"farms": farms, "policies": list(policies.values())}, format="json")
    body = response.json()
    assert response.status_code == 200 and body["errors"] == []
    skipped = {s["name"] for s in body["skipped"]}
    refused_farms = {f["name"] for name in REFUSED for f in load(name)["farms"]}
    assert skipped == refused_farms
    assert set(Farm.objects.values_list("name", flat=True)) == {f["name"] for f in farms} - refused_farms


def _everything(rest) -> dict:
    return rest.get(EXPORT).json()


def test_export_import_export_of_the_corpus_is_the_same_document(rest):
    for name in DOCUMENTS:
        if name not in REFUSED:
            assert rest.post(IMPORT, load(name), format="json").status_code == 200
    first = _everything(rest)
    for farm in Farm.objects.all():
        services.farm_delete(farm=farm)
    for policy in Policy.objects.all():
        services.policy_delete(policy=policy)
    assert rest.post(IMPORT, first, format="json").status_code == 200
    assert _everything(rest) == first
    by_name = {f["name"]: f for f in first["farms"]}
    assert by_name["log1"]["log"] == "input forward output"  # directions kept
    assert by_name["bmark"]["mark"] == "0xdead00" and by_name["bmark"]["backends"][1]["mark"] == "0x2"
    assert by_name["perminute"]["new-rtlimit"] == "30/minute"  # exact, not rounded
    assert by_name["dsroface"]["oface"] == "eth2" and by_name["dsroface"]["backends"][1]["oface"] == "eth3"
    assert by_name["logp"]["log-prefix"] == "[FNAME,TYPE]"
    assert "log-prefix" not in by_name["w1"]  # nftlb's default is not written
    nftlb_dump_keys = {  # what nftlb's own GET /farms writes for a farm (src/config.c)
        "name", "family", "virtual-addr", "virtual-ports", "source-addr", "mode", "protocol", "scheduler",
        "sched-param", "persistence", "persist-ttl", "helper", "log", "log-rtlimit", "mark", "priority", "state",
        "limits-ttl", "new-rtlimit", "new-rtlimit-burst", "rst-rtlimit", "rst-rtlimit-burst", "est-connlimit",
        "tcp-strict", "queue", "verdict", "backends",
    }  # fmt: skip
    assert set(by_name["w1"]) == nftlb_dump_keys  # and flow-offload, intra-connect only when on, as nftlb
    assert by_name["flow1"]["flow-offload"] == "on"
    families = {p["name"]: p["family"] for p in first["policies"]}
    assert families == {"black001": "ipv4", "black002": "ipv4", "black003": "ipv4", "white6": "ipv6"}
    local = by_name["locallim"]  # mode local: its limits and policy round-trip, it has no backends
    assert (local["mode"], local["est-connlimit"], local["rst-rtlimit"]) == ("local", "10", "5/second")
    assert local["backends"] == []
    assert local["policies"] == [{"name": "black003"}] and by_name["local6"]["intra-connect"] == "on"


@pytest.fixture
def netns():
    if os.geteuid() != 0:
        pytest.fail("nft --check in a namespace needs root")
    name = f"lbt-corpus-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    for device in ("eth1", "eth2", "eth3"):
        veth = ["ip", "-n", name, "link", "add", device, "type", "veth", "peer", "name", f"{device}p"]
        subprocess.run(veth, check=True)
    yield name
    subprocess.run(["ip", "netns", "del", name], check=False)


def test_every_imported_farm_compiles_to_a_ruleset_the_kernel_takes(rest, netns):
    for name in DOCUMENTS:
        if name not in REFUSED:
            assert rest.post(IMPORT, load(name), format="json").status_code == 200
    specs = []
    for farm in Farm.objects.prefetch_related("backends", "policies", "static_sessions"):
        spec = farm_spec(farm)
        if spec.mode == "dsr":  # the worker reads the interface's MAC; the namespace's dummies have their own
            spec = dataclasses.replace(spec, interface_mac="02:00:00:00:00:aa")
        if not spec.flow_offload:  # flowtables: a capability of the kernel, probed by the worker (test_l4_features)
            specs.append(spec)
    policies = [policy_spec(p) for p in Policy.objects.all()]

    def refusal(farms) -> str:
        document = json.dumps(full_document(farms, policies))
        done = subprocess.run(["ip", "netns", "exec", netns, "nft", "-j", "-f", "-"], input=document, **TEXT)
        return done.stderr if done.returncode else ""

    if refusal(specs):  # name the farms the kernel refuses
        refused = {spec.name: refusal([spec]) for spec in specs}
        assert not {name: why for name, why in refused.items() if why}
