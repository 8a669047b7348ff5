"""The whole path of an HTTP farm: REST API -> database -> the real worker (the kernel's apply, then HAProxy's)
-> the real HAProxy in the LB namespace -> traffic from the client namespace. Backend states, health (healthd's
verdict) and declared capacity reach the running HAProxy through its runtime API, with no reload; one ApplyRun
history holds the kernel's and HAProxy's applies."""

from __future__ import annotations

import threading
import time

import pytest
from rest_framework.test import APIClient

from tests.conftest import OUTPUT, new_token, wait_for
from tests.support.l7_lab import HAProxyLab
from tests.support.lab import backend4
from tests.support.stack import Worker

VIP = "198.18.100.1"


@pytest.fixture
def haproxy(lab, tmp_path):
    engine_lab = HAProxyLab(lab, tmp_path / "haproxy").start()
    yield engine_lab
    engine_lab.stop()


@pytest.fixture
def l7_worker(lab, worker_env, haproxy, request):
    env = dict(worker_env, LBWEB_HAPROXY_DIR=str(haproxy.workdir))
    lab.ns(lab.lb, "nft", "delete", "table", "inet", "lbweb", check=False)
    proc = Worker(lab.lb, env, OUTPUT / "logs" / f"worker-{request.node.name}.log").start()
    yield proc
    proc.stop()


@pytest.fixture
def api_client(admin_user):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {new_token(admin_user)}")
    return client


def post(client, path, data, expect=201):
    response = client.post(path, data, format="json")
    assert response.status_code == expect, response.content
    return response.json()


def wait_applied(client, farm_id: int) -> dict:
    def applied():
        farm = client.get(f"/api/v1/farms/{farm_id}/").json()
        return farm if farm["apply_status"]["status"] == "applied" else None

    try:
        return wait_for(applied, timeout=30, what=f"farm {farm_id} applied")
    except TimeoutError as exc:  # say where it stands: which apply ran last, and what HAProxy's said
        farm = client.get(f"/api/v1/farms/{farm_id}/").json()
        runs = client.get("/api/v1/apply-runs/?limit=5").json()["results"]
        raise TimeoutError(f"{exc}: {farm['apply_status']}; newest runs: {runs}") from exc


def haproxy_runs(client) -> list[dict]:
    return [r for r in client.get("/api/v1/apply-runs/?limit=50").json()["results"] if r["writer"] == "haproxy"]


@pytest.mark.django_db(transaction=True)
def test_http_farm_from_api_to_traffic_with_live_changes(haproxy, l7_worker, api_client):
    client = api_client
    farm = post(client, "/api/v1/farms/", {"name": "web", "vip": VIP, "ports": "80", "mode": "http"})
    b1 = post(client, "/api/v1/backends/", {"farm": farm["id"], "address": backend4("b1"), "port": 80})
    b2 = post(client, "/api/v1/backends/", {"farm": farm["id"], "address": backend4("b2"), "port": 80})
    api = post(client, "/api/v1/http-services/", {"farm": farm["id"], "name": "api", "path_prefix": "/api"})
    b3 = post(client, "/api/v1/backends/", {"farm": farm["id"], "address": backend4("b3"), "port": 8080})
    response = client.patch(f"/api/v1/backends/{b3['id']}/http/", {"service": api["id"]}, format="json")
    assert response.status_code == 200, response.content
    wait_applied(client, farm["id"])
    assert haproxy.get(VIP, "/api/x").backend == "b3"
    assert {haproxy.get(VIP, "/").backend for _ in range(6)} == {"b1", "b2"}
    runs = haproxy_runs(client)
    assert runs and runs[0]["ok"] and runs[0]["kind"] == "full"  # the first apply reloads
    worker_pid = haproxy.engine.cli.processes().current_worker

    # Drain b1: the runtime API, no reload.
    assert client.patch(f"/api/v1/backends/{b1['id']}/", {"state": "drain"}, format="json").status_code == 200
    wait_applied(client, farm["id"])
    assert {haproxy.get(VIP, "/").backend for _ in range(6)} == {"b2"}
    # healthd's verdict: b2 down -> maintenance in HAProxy; nothing left for the default service: 503.
    from farms.health_services import HealthTransition, health_record

    health_record([HealthTransition(b2["id"], "down", "test")])
    wait_applied(client, farm["id"])
    assert haproxy.get(VIP, "/").status == 503
    health_record([HealthTransition(b2["id"], "up", "test")])
    wait_applied(client, farm["id"])
    assert haproxy.get(VIP, "/").backend == "b2"

    # The backend declares its capacity with its own token: applied live.
    token = post(client, f"/api/v1/backends/{b3['id']}/capacity-token/", {})["token"]
    service = APIClient()
    service.credentials(HTTP_AUTHORIZATION=f"Capacity {token}")
    assert service.post(f"/api/v1/backends/{b3['id']}/capacity/", {"capacity": 7}, format="json").status_code == 200
    wait_for(
        lambda: haproxy.engine.cli.servers().get((f"s{api['id']}", f"b{b3['id']}"), {}).get("slim") == "7",
        timeout=30,
        what="capacity 7 in HAProxy",
    )
    assert haproxy.engine.cli.processes().current_worker == worker_pid  # never reloaded
    # The runtime commands reach HAProxy before the apply records its run (and what HAProxy serves): wait for it.
    live = ["incremental"] * 4
    wait_for(lambda: [r["kind"] for r in haproxy_runs(client)][:4] == live, timeout=30, what="four live applies")

    # A structural change (a header) reloads; the kernel's and HAProxy's applies share one history.
    response = client.patch(
        f"/api/v1/farms/{farm['id']}/http/",
        {"headers": [{"direction": "request", "name": "X-Via", "value": "lbweb"}]},
        format="json",
    )
    assert response.status_code == 200
    wait_applied(client, farm["id"])
    assert haproxy.get(VIP, "/").json()["headers"]["x-via"] == "lbweb"
    assert haproxy.engine.cli.processes().current_worker != worker_pid
    assert haproxy_runs(client)[0]["kind"] == "full"
    # A VIP the LB does not hold (a cluster's backup node): HAProxy binds it all the same (ip_nonlocal_bind).
    away = post(client, "/api/v1/farms/", {"name": "away", "vip": "198.18.100.77", "ports": "80", "mode": "http"})
    wait_applied(client, away["id"])
    lb = haproxy.lab.lb
    assert haproxy.lab.ns(lb, "sysctl", "-n", "net.ipv4.ip_nonlocal_bind").stdout.strip() == "1"
    assert client.get("/api/v1/http/preview/").status_code == 200


@pytest.mark.django_db(transaction=True)
def test_haproxy_refusing_the_configuration_is_a_failed_apply(haproxy, l7_worker, api_client):
    """A configuration HAProxy's own check refuses leaves the running one serving, and the farm says why."""
    client = api_client
    farm = post(client, "/api/v1/farms/", {"name": "web", "vip": VIP, "ports": "80", "mode": "http"})
    post(client, "/api/v1/backends/", {"farm": farm["id"], "address": backend4("b1"), "port": 80})
    wait_applied(client, farm["id"])
    from l7.models import HttpService

    # A regular expression Python's re accepts (validation) and HAProxy's PCRE2 refuses.
    HttpService.objects.create(farm_id=farm["id"], name="odd", host_regex=r"a\N{DIGIT ONE}")
    from farms.services import mark_farms_changed

    mark_farms_changed([farm["id"]])

    def failed():
        body = client.get(f"/api/v1/farms/{farm['id']}/").json()
        return body if body["apply_status"]["status"] == "failed" else None

    body = wait_for(failed, timeout=30, what="a failed apply")
    assert "regex" in body["apply_status"]["error"]
    assert haproxy.get(VIP, "/").backend == "b1"  # the previous configuration still serves
    run = haproxy_runs(client)[0]
    assert not run["ok"] and "PCRE2 does not support" in run["error"]


@pytest.mark.django_db(transaction=True)
def test_https_farm_waits_for_its_certificate_then_serves_it(haproxy, l7_worker, api_client):
    client = api_client
    farm = post(client, "/api/v1/farms/", {"name": "secure", "vip": VIP, "ports": "443", "mode": "https"})
    post(client, "/api/v1/backends/", {"farm": farm["id"], "address": backend4("b2"), "port": 80})

    def status():
        return client.get(f"/api/v1/farms/{farm['id']}/").json()["apply_status"]

    wait_for(lambda: status()["status"] == "failed", timeout=30, what="the farm refused without a certificate")
    assert "needs a certificate" in status()["error"]
    cert = post(client, "/api/v1/certificates/self-signed/", {"name": "secure", "names": ["secure.example.com"]})
    response = client.patch(f"/api/v1/farms/{farm['id']}/http/", {"certificates": [cert["id"]]}, format="json")
    assert response.status_code == 200, response.content
    wait_applied(client, farm["id"])
    import ssl

    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    answer = haproxy.get(VIP, "/", port=443, tls=context, sni="secure.example.com")
    assert answer.status == 200 and answer.backend == "b2"
    assert answer.tls["version"] in ("TLSv1.2", "TLSv1.3")


@pytest.mark.django_db(transaction=True)
def test_maintenance_cut_ends_requests_in_progress_drain_lets_them_finish(haproxy, l7_worker, api_client):

    client = api_client
    farm = post(client, "/api/v1/farms/", {"name": "web", "vip": VIP, "ports": "80", "mode": "http"})
    backend = post(client, "/api/v1/backends/", {"farm": farm["id"], "address": backend4("b1"), "port": 80})
    wait_applied(client, farm["id"])

    def slow_request(results: list) -> None:
        started = time.monotonic()
        try:
            results.append((haproxy.get(VIP, "/sleep/4000", timeout=10).status, time.monotonic() - started))
        except Exception as exc:  # the connection ended under the request
            results.append((repr(exc), time.monotonic() - started))

    for mode, finishes in (("drain", True), ("cut", False)):
        if mode == "cut":
            assert (
                client.patch(f"/api/v1/backends/{backend['id']}/", {"state": "enabled"}, format="json").status_code
                == 200
            )
            wait_applied(client, farm["id"])
        results: list = []
        thread = threading.Thread(target=slow_request, args=(results,))
        thread.start()
        time.sleep(0.5)
        response = client.post(f"/api/v1/backends/{backend['id']}/maintenance/", {"mode": mode}, format="json")
        assert response.status_code in (200, 202), response.content
        thread.join()
        outcome, took = results[0]
        if finishes:
            assert outcome == 200 and took >= 4, results  # drain: the request in progress completes
        else:
            assert outcome != 200 and took < 3.5, results  # cut: ended at once


@pytest.mark.django_db(transaction=True)
def test_healthd_verdict_reaches_haproxy_without_reload(lab, haproxy, l7_worker, api_client, worker_env, request):
    """The real healthd (a TCP check of each backend) finds b2 dead; the worker puts it in HAProxy's maintenance
    through the runtime API (one truth about health: healthd's), and back when it returns."""
    from tests.support.stack import Healthd

    client = api_client
    farm = post(client, "/api/v1/farms/", {"name": "web", "vip": VIP, "ports": "80", "mode": "http"})
    post(client, "/api/v1/backends/", {"farm": farm["id"], "address": backend4("b1"), "port": 80})
    b2 = post(client, "/api/v1/backends/", {"farm": farm["id"], "address": backend4("b2"), "port": 80})
    post(client, "/api/v1/health-checks/", {"farm": farm["id"], "type": "tcp", "interval": 1, "timeout": 0.5,
                                            "rise": 1, "fall": 1})  # fmt: skip
    wait_applied(client, farm["id"])
    healthd = Healthd(lab.lb, worker_env, OUTPUT / "logs" / f"healthd-{request.node.name}.log").start()
    try:
        wait_for(lambda: client.get(f"/api/v1/backends/{b2['id']}/").json()["health"] == "up", what="b2 up")
        worker_pid = haproxy.engine.cli.processes().current_worker
        lab.stop_server("b2")
        wait_for(lambda: client.get(f"/api/v1/backends/{b2['id']}/").json()["health"] == "down", what="b2 down")
        wait_for(
            lambda: haproxy.engine.cli.servers()[(f"f{farm['id']}-default", f"b{b2['id']}")]["status"] == "MAINT",
            what="b2 in HAProxy's maintenance",
        )
        assert {haproxy.get(VIP, "/").backend for _ in range(6)} == {"b1"}
        lab.start_server("b2")
        wait_for(
            lambda: haproxy.engine.cli.servers()[(f"f{farm['id']}-default", f"b{b2['id']}")]["status"] != "MAINT",
            what="b2 back in HAProxy",
        )
        assert haproxy.engine.cli.processes().current_worker == worker_pid  # no reload
    finally:
        healthd.stop()
        lab.ensure_servers()


@pytest.mark.django_db(transaction=True)
def test_haproxys_passive_verdict_reaches_healthd_and_the_farm_with_its_reason(
    lab, haproxy, l7_worker, api_client, worker_env, request
):
    """Issue 43, part 3, with every process real: a backend answering 503 (its port still open, so the TCP check
    passes) is taken out by HAProxy's passive health; the real healthd records it down with HAProxy's reason; the
    worker puts it in maintenance; once it answers again, healthd's check brings it back."""
    import subprocess
    import sys

    from tests.dataplane.test_l7_edge import FLAKY_PORT, fail
    from tests.support.lab import HERE, wait_listening
    from tests.support.stack import Healthd

    flaky = []
    for name in ("b1", "b2"):
        command = [sys.executable, str(HERE / "lab_flaky_server.py"), name, backend4(name), str(FLAKY_PORT)]
        flaky.append(subprocess.Popen(["ip", "netns", "exec", lab.backends[name], *command]))
        wait_listening(lab.lb, backend4(name), FLAKY_PORT)
    client = api_client
    farm = post(client, "/api/v1/farms/", {"name": "web", "vip": VIP, "ports": "80", "mode": "http"})
    b1 = post(client, "/api/v1/backends/", {"farm": farm["id"], "address": backend4("b1"), "port": FLAKY_PORT})
    post(client, "/api/v1/backends/", {"farm": farm["id"], "address": backend4("b2"), "port": FLAKY_PORT})
    post(client, "/api/v1/health-checks/", {"farm": farm["id"], "type": "tcp", "interval": 1, "timeout": 0.5,
                                            "rise": 2, "fall": 3})  # fmt: skip
    options = {"passive_errors": 3, "slowstart": 2}
    assert client.patch(f"/api/v1/backends/{b1['id']}/http/", options, format="json").status_code == 200
    wait_applied(client, farm["id"])
    server = (f"f{farm['id']}-default", f"b{b1['id']}")
    env = dict(worker_env, LBWEB_HAPROXY_DIR=str(haproxy.workdir))
    healthd = Healthd(lab.lb, env, OUTPUT / "logs" / f"healthd-{request.node.name}.log").start()
    try:
        wait_for(lambda: client.get(f"/api/v1/backends/{b1['id']}/").json()["health"] == "up", what="b1 up")
        fail(lab, "b1")
        statuses = [haproxy.get(VIP, "/").status for _ in range(8)]
        assert statuses.count(503) == 3  # b1's three failures; then it is out
        row = wait_for(
            lambda: (b := client.get(f"/api/v1/backends/{b1['id']}/").json())["health"] == "down" and b,
            what="b1 recorded down",
        )
        assert row["health_reason"].startswith("HAProxy passive health: Detected 3 consecutive errors"), row
        wait_for(lambda: haproxy.engine.cli.servers()[server]["status"] == "MAINT", what="b1 in maintenance")
        assert {haproxy.get(VIP, "/").status for _ in range(6)} == {200}
        fail(lab, "b1", False)
        wait_for(lambda: client.get(f"/api/v1/backends/{b1['id']}/").json()["health"] == "up", what="b1 back")
        wait_for(lambda: haproxy.engine.cli.servers()[server]["status"].startswith("UP"), what="b1 serving")
        assert {haproxy.get(VIP, "/").status for _ in range(6)} == {200}
        events = client.get(f"/api/v1/health-events/?backend={b1['id']}").json()["results"]
        assert any(e["reason"].startswith("HAProxy passive health") and e["current"] == "down" for e in events)
    finally:
        healthd.stop()
        for proc in flaky:
            proc.kill()
            proc.wait(timeout=5)
