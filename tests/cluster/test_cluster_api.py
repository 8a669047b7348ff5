"""The cluster's control plane: settings through the API (validated, audited, the token never shown), the
backup refusing writes with the master's name, the page and the dashboard naming the master, the peer's push
(token, primary keys kept, stale rows removed), transitions from the handler's journal into the audit trail,
and the master's configuration reaching a real second node (gunicorn over TLS, its own database) in < 1 s.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import requests

from cluster.models import Cluster, Node, Transition
from farms.models import AuditEvent, Backend, Farm
from tests.conftest import new_token
from tests.support.lab import inside_netns
from tests.support.lab_ha import node_links

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]
TOKEN = "t" * 40


def body(**extra) -> dict:
    return {
        "enabled": True, "vrid": 51, "vrrp_version": 3, "advert_interval": 0.5, "auth_pass": "", "preempt_delay": 5,
        "interface": "eth0", "sync_interface": "sync0", "track_interfaces": "back0", "track_conntrackd": True,
        "management_address": "198.18.2.100/24", "extra_addresses": "198.18.1.1/24 back0", "token": TOKEN,
        "nodes": [
            {"name": "n1", "address": "198.18.2.11", "sync_address": "198.18.3.1", "priority": 150,
             "api_url": "https://198.18.2.11:8000", "tls_fingerprint": ""},
            {"name": "n2", "address": "198.18.2.12", "sync_address": "198.18.3.2", "priority": 100,
             "api_url": "https://198.18.2.12:8000", "tls_fingerprint": ""},
        ],
        **extra,
    }  # fmt: skip


@pytest.fixture
def node(settings, tmp_path):
    """This test process is node n1; its cluster directory (the handler's role file) is a temporary one. The test
    runs in a namespace with the node's interfaces (``body()`` names them): a cluster PUT is refused when this
    node's keepalived or conntrackd would refuse it, and both want them to exist."""
    settings.LBWEB_NODE_NAME = "n1"
    settings.LBWEB_CLUSTER_DIR = tmp_path / "cluster"
    settings.LBWEB_CLUSTER_DIR.mkdir()
    with node_links("api") as ns, inside_netns(ns):
        yield settings.LBWEB_CLUSTER_DIR


def set_role(directory: Path, state: str) -> None:
    (directory / "role").write_text(json.dumps({"state": state, "since": time.time(), "node": "n1"}))


def configure(client) -> dict:
    response = client.put("/api/v1/cluster/", body(), format="json")
    assert response.status_code == 200, response.content
    return response.json()


def test_settings_through_the_api_are_validated_audited_and_keep_the_token_secret(client, node, role_users):
    data = configure(client)
    assert data["token_set"] is True and "token" not in data
    assert [n["name"] for n in data["nodes"]] == ["n1", "n2"]
    event = AuditEvent.objects.filter(object_type="cluster").latest("id")
    assert event.after["token_set"] is True and TOKEN not in json.dumps(event.after)
    refused = client.put("/api/v1/cluster/", body(auth_pass="secret"), format="json")
    assert refused.status_code == 400 and "auth_pass" in refused.json()
    same = body()
    same["nodes"][1]["priority"] = 150
    assert "nodes" in client.put("/api/v1/cluster/", same, format="json").json()
    from rest_framework.test import APIClient

    viewer = APIClient()
    viewer.credentials(HTTP_AUTHORIZATION=f"Token {new_token(role_users['viewer'])}")
    assert viewer.put("/api/v1/cluster/", body(), format="json").status_code == 403
    assert viewer.get("/api/v1/cluster/status/").json()["enabled"] is True


def test_the_backup_refuses_writes_naming_the_master(client, node):
    configure(client)
    set_role(node, "BACKUP")
    response = client.post("/api/v1/farms/", {"name": "web", "vip": "198.18.2.101", "ports": "80"}, format="json")
    assert response.status_code == 409
    assert "n2 (https://198.18.2.12:8000)" in response.json()["detail"] and "backup" in response.json()["detail"]
    assert client.get("/api/v1/farms/").status_code == 200  # reads still work
    assert not Farm.objects.exists()
    set_role(node, "MASTER")
    created = client.post("/api/v1/farms/", {"name": "web", "vip": "198.18.2.101", "ports": "80"}, format="json")
    assert created.status_code == 201, created.content


def test_every_page_and_the_dashboard_name_the_master(client, node, admin_user):
    from django.test import Client

    configure(client)
    browser = Client()
    browser.force_login(admin_user)
    set_role(node, "MASTER")
    page = browser.get("/monitoring/").content.decode()
    assert "Cluster master: n1 (this node)" in page
    set_role(node, "BACKUP")
    page = browser.get("/cluster/").content.decode()
    assert "Cluster master: n2 (this node, n1, is backup)" in page and "Last transitions" in page
    assert browser.post("/farms/new/", {"name": "x"}).status_code == 409


def test_transitions_from_the_journal_become_rows_and_audit_events(client, node):
    configure(client)
    entry = {"node": "n1", "state": "MASTER", "from": "BACKUP", "at": time.time(), "reason": "elected",
             "steps": [{"step": "commit", "ok": True, "started": 1, "ended": 2},
                       {"step": "addresses", "ok": True, "started": 2, "ended": time.time() + 0.25}]}  # fmt: skip
    (node / "transitions.jsonl").write_text(json.dumps(entry) + "\n" + '{"node": "n1", "sta')  # a line being written
    from cluster.services import ingest_journal

    assert ingest_journal() == 1 and ingest_journal() == 0
    transition = Transition.objects.get()
    assert (transition.from_state, transition.to_state, transition.ok) == ("backup", "master", True)
    assert 200 < transition.addresses_up_ms < 400
    event = AuditEvent.objects.get(action="transition")
    assert event.object_name == "n1" and event.after["state"] == "master"
    listed = client.get("/api/v1/cluster/transitions/").json()["results"]
    assert listed[0]["reason"] == "elected"
    from io import StringIO

    from django.core.management import call_command

    set_role(node, "MASTER")
    out = StringIO()
    call_command("cluster", "status", stdout=out)  # docs/ha.md's manage.py cluster status
    status = json.loads(out.getvalue())
    assert status["master"] == "n1" and status["transitions"][0]["to"] == "master"
    assert status["conntrackd"]["available"] is False  # no conntrackd.conf here


def test_a_push_replaces_the_configuration_keeping_primary_keys(client, node):
    from rest_framework.test import APIClient

    from farms import services

    configure(client)
    set_role(node, "BACKUP")
    stale = services.farm_create(name="stale", vip="198.18.2.120", protocol="tcp", ports="80", mode="dnat",
                                 scheduler="rr")  # fmt: skip
    stale_backend = services.backend_create(farm=stale, address="198.18.1.11")
    config = {"generation": 42, "objects": [
        {"model": "farms.farm", "pk": 77, "fields": {**_fields(stale), "name": "web", "vip": "198.18.2.101"}},
        {"model": "farms.backend", "pk": 9, "fields": {**_fields(stale_backend), "farm": 77}},
    ]}  # fmt: skip
    peer = APIClient()  # the peer has no user token: only the cluster's
    wrong = peer.post("/api/v1/cluster/sync/", {"sender": "n2", "status": {}}, format="json",
                        HTTP_AUTHORIZATION="Cluster " + "x" * 40)  # fmt: skip
    assert wrong.status_code == 401
    answer = peer.post("/api/v1/cluster/sync/", {"sender": "n2", "status": {"role": "master"}, "config": config},
                         format="json", HTTP_AUTHORIZATION=f"Cluster {TOKEN}")  # fmt: skip
    assert answer.status_code == 200, answer.content
    assert list(Farm.objects.values_list("pk", "name")) == [(77, "web")]
    assert Backend.objects.get().pk == 9
    cluster = Cluster.load()
    assert (cluster.received_generation, cluster.received_from) == (42, "n2")
    assert cluster.peer_status["role"] == "master"
    assert AuditEvent.objects.filter(action="sync", object_type="cluster").exists()
    set_role(node, "MASTER")  # two masters: a configuration is not taken
    again = peer.post("/api/v1/cluster/sync/", {"sender": "n2", "status": {}, "config": config}, format="json",
                        HTTP_AUTHORIZATION=f"Cluster {TOKEN}")  # fmt: skip
    assert again.status_code == 409


def _fields(obj) -> dict:
    from django.core import serializers
    from django.core.serializers.json import DjangoJSONEncoder

    return json.loads(json.dumps(serializers.serialize("python", [obj])[0]["fields"], cls=DjangoJSONEncoder))


# -- two real nodes ------------------------------------------------------------------------------------------


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def backup_node(tmp_path):
    """Node n2: gunicorn over TLS with its own SQLite database, Redis and cluster directory (its role: backup)."""
    from tests.support.stack import RedisServer

    var, port = tmp_path / "n2", _free_port()
    redis = RedisServer(tmp_path / "n2-redis").start()
    env = {
        "PATH": os.environ["PATH"], "DJANGO_SETTINGS_MODULE": "lbweb.settings", "LBWEB_VAR_DIR": str(var),
        "LBWEB_NODE_NAME": "n2", "REDIS_URL": redis.url, "LBWEB_BIND": f"127.0.0.1:{port}",
        "LBWEB_WEB_WORKERS": "1",
    }  # fmt: skip
    python = str(ROOT / ".venv" / "bin" / "python")

    def manage(*args: str, stdin: str | None = None) -> str:
        done = subprocess.run([python, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                              input=stdin, timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    manage("migrate", "--noinput")
    manage("ensure_tls")
    (var / "cluster").mkdir(mode=0o700)
    (var / "cluster" / "role").write_text(json.dumps({"state": "BACKUP", "since": time.time(), "node": "n2"}))
    server = subprocess.Popen([python, "-m", "gunicorn", "-c", "lbweb/gunicorn_conf.py", "lbweb.wsgi"], cwd=ROOT,
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        yield {"manage": manage, "url": f"https://127.0.0.1:{port}", "fingerprint": manage("cluster", "fingerprint"),
               "var": var}  # fmt: skip
    finally:
        server.terminate()
        server.wait(timeout=30)
        redis.stop()


@pytest.mark.django_db(transaction=True)
def test_the_backup_follows_the_master_within_a_second(node, backup_node, tmp_path, redis_server):
    """n1 (this process) configures a farm as master; the push the worker runs after every change
    (``cluster.tasks.push_config``) reaches n2 over TLS, pinned to n2's own certificate, with the cluster token."""
    from cluster.services import cluster_update
    from dataplane.cluster import tasks
    from farms import services

    settings_body = body()
    settings_body["nodes"][1].update(api_url=backup_node["url"], tls_fingerprint=backup_node["fingerprint"])
    nodes = settings_body.pop("nodes")
    cluster_update(nodes=nodes, **settings_body)
    (tmp_path / "n2.json").write_text(json.dumps({**settings_body, "nodes": nodes}))
    backup_node["manage"]("cluster", "configure", str(tmp_path / "n2.json"))  # docs/ha.md's command, on n2
    set_role(node, "MASTER")
    backup_node["manage"]("shell", "-c", "from django.contrib.auth.models import User; "
                          "User.objects.create_superuser('admin', '', 'x')")  # fmt: skip
    token = backup_node["manage"]("create_token", "admin")
    session = requests.Session()
    session.trust_env = False  # verify=False below holds (no CA bundle from the environment); the push is pinned
    session.verify = False
    session.headers["Authorization"] = f"Token {token}"
    deadline = time.monotonic() + 60
    while True:  # gunicorn up
        try:
            session.get(f"{backup_node['url']}/api/v1/farms/", timeout=10).raise_for_status()
            break
        except requests.RequestException:
            assert time.monotonic() < deadline
            time.sleep(0.2)

    # a first change and its push warm n2 up (its sync view's first imports and queries)
    services.farm_create(name="warm", vip="198.18.2.120", protocol="tcp", ports="80", mode="dnat", scheduler="rr")
    assert tasks.push_config()["error"] == ""
    farm = services.farm_create(name="web", vip="198.18.2.101", protocol="tcp", ports="80", mode="dnat",
                                scheduler="rr")  # fmt: skip
    services.backend_create(farm=farm, address="198.18.1.11")
    # the change is committed on n1; n1's worker pushes it (after_apply); n2 answers once it is committed there
    saved = time.monotonic()
    assert tasks.push_config()["error"] == ""
    elapsed = time.monotonic() - saved
    seen = session.get(f"{backup_node['url']}/api/v1/farms/", timeout=5).json()["results"]
    assert sorted((f["id"], f["name"]) for f in seen) == sorted([(farm.pk, "web"), (farm.pk - 1, "warm")])
    assert elapsed < 1.0, f"the backup had the change {elapsed:.2f} s after it was saved on the master"
    # a write on the backup is refused, naming the master
    refused = session.post(f"{backup_node['url']}/api/v1/farms/", json={"name": "x", "vip": "198.18.2.9"}, timeout=5)
    assert refused.status_code == 409 and "n1 (https://198.18.2.11:8000)" in refused.json()["detail"]
    # a wrong pin is refused: nothing is sent to a node that is not n2
    Node.objects.filter(name="n2").update(tls_fingerprint="00" * 32)
    assert "fingerprint" in tasks.push_config()["error"].lower()


def test_the_heartbeat_records_transitions_and_leaves_a_silent_peer_alone(client, node, monkeypatch):
    """Every 2 s on the worker: the journal is ingested; a peer that does not answer is tried again after 10 s,
    not at every beat (the worker applies too). The engine's files are not written here (host namespace)."""
    from dataplane.cluster import tasks

    deployed = []
    monkeypatch.setattr(tasks.engine, "deploy", lambda: deployed.append(1) or {})
    tasks._last.update(deployed=None, deployed_at=0.0, failed_at=0.0)
    silent = body()
    silent["nodes"][1]["api_url"] = f"https://127.0.0.1:{_free_port()}"  # nothing listens there
    client.put("/api/v1/cluster/", silent, format="json")
    set_role(node, "MASTER")
    entry = {"node": "n1", "state": "MASTER", "from": "BACKUP", "at": time.time(), "reason": "elected", "steps": []}
    (node / "transitions.jsonl").write_text(json.dumps(entry) + "\n")
    first = tasks.heartbeat()
    assert "ConnectionError" in first["error"] and Transition.objects.count() == 1 and deployed == [1]
    assert "trying again later" in tasks.heartbeat()["skipped"]
    assert deployed == [1]  # nothing changed: the files are not rebuilt at every beat
    assert "ConnectionError" in Cluster.load().push_error


def test_after_an_apply_the_master_pushes_and_its_vips_follow(client, node, monkeypatch):
    """The worker's hook on every finished task: only farms.tasks.apply_config, only on a master."""
    from types import SimpleNamespace

    from celery.signals import task_postrun

    from dataplane.cluster import tasks

    assert any(getattr(r(), "__name__", "") == "after_apply" for _key, r in task_postrun.receivers)
    calls = []
    monkeypatch.setattr(tasks, "push_config", lambda: calls.append("push"))
    monkeypatch.setattr(tasks.engine, "deploy", lambda: calls.append("deploy"))
    configure(client)
    apply = SimpleNamespace(name="farms.tasks.apply_config")
    set_role(node, "BACKUP")
    tasks.after_apply(sender=apply)
    set_role(node, "MASTER")
    tasks.after_apply(sender=SimpleNamespace(name="farms.tasks.reconcile"))
    assert calls == []
    tasks.after_apply(sender=apply)
    assert calls == ["push", "deploy"]
