"""Every write is audited with its actor (health checks, nftlb imports), the audit log filters by farm,
action, actor and date alike in the API and on the page, and the apply history names farms, prints each
kernel message once and says when the worker is stalled."""

from __future__ import annotations

import datetime

import pytest
from django.test import Client
from django.utils import timezone

from farms import services
from farms.models import ApplyRun, AuditEvent, HealthCheck

pytestmark = pytest.mark.django_db

NFTLB = {
    "farms": [
        {
            "name": "imported",
            "family": "ipv4",
            "virtual-addr": "198.18.100.7",
            "virtual-ports": "80",
            "mode": "dnat",
            "protocol": "tcp",
            "backends": [{"name": "bck0", "ip-addr": "198.18.1.11", "state": "up"}],
        }
    ]
}


@pytest.fixture
def farm(admin_user):
    return services.farm_create(name="web", vip="198.18.100.1", ports="80", mode="dnat", actor=admin_user)


def test_health_check_writes_are_audited_with_their_actor(client, admin_user, farm):
    url = "/api/v1/health-checks/"
    created = client.post(url, {"farm": farm.id, "type": "http", "http_path": "/up"}, format="json")
    assert created.status_code == 201, created.content
    check_id = created.json()["id"]
    assert client.patch(f"{url}{check_id}/", {"interval": 3}, format="json").status_code == 200
    assert client.delete(f"{url}{check_id}/").status_code == 204
    events = list(AuditEvent.objects.filter(object_type="healthcheck").order_by("id"))
    assert [(e.action, e.actor_name, e.farm_ref) for e in events] == [
        ("create", "admin", farm.id),
        ("update", "admin", farm.id),
        ("delete", "admin", farm.id),
    ]
    assert events[0].after["http_path"] == "/up" and events[0].after["farm"] == "web"
    assert [name for name, _, _ in events[1].changes()] == ["interval"]
    assert not HealthCheck.objects.exists()


def test_an_nftlb_import_is_recorded_with_the_user_who_did_it(client):
    answer = client.post("/api/v1/nftlb/import/", NFTLB, format="json")
    assert answer.status_code == 200, answer.content
    events = AuditEvent.objects.order_by("id")
    assert {(e.action, e.object_type, e.object_name) for e in events} >= {
        ("create", "farm", "imported"),
        ("create", "backend", "198.18.1.11"),
    }
    assert {e.actor_name for e in events} == {"admin"}


def test_audit_filters_by_farm_action_actor_and_date_in_api_and_page(client, admin_user, farm, django_user_model):
    other = services.farm_create(name="db", vip="198.18.100.2", ports="5432", mode="dnat")
    services.backend_create(farm=farm, address="198.18.1.11", actor=admin_user)
    old = services.backend_create(farm=other, address="198.18.1.12")
    AuditEvent.objects.filter(object_type="backend", object_id=old.id).update(
        time=timezone.now() - datetime.timedelta(days=3)
    )
    today = timezone.now().date().isoformat()

    def api(query: str) -> set[tuple[str, str, str]]:
        rows = client.get(f"/api/v1/audit-events/?{query}").json()["results"]
        return {(r["action"], r["object_type"], r["object_name"]) for r in rows}

    assert api(f"farm={farm.id}") == {("create", "farm", "web"), ("create", "backend", "198.18.1.11")}
    assert api("actor_name=system") == {("create", "farm", "db"), ("create", "backend", "198.18.1.12")}
    assert api(f"action=create&farm={other.id}&date_after={today}") == {("create", "farm", "db")}
    assert api(f"date_before={(timezone.now() - datetime.timedelta(days=1)).date()}") == {
        ("create", "backend", "198.18.1.12")
    }

    browser = Client()
    browser.force_login(admin_user)
    page = browser.get(f"/audit-events/?farm={other.id}&actor_name=system&date_after={today}").content.decode()
    assert f'<option value="{other.id}" selected>db</option>' in page
    assert f'id="f-from" name="date_after" value="{today}"' in page
    assert "198.18.1.12" not in page and ">db<" in page and "198.18.1.11" not in page
    refused = browser.get("/audit-events/?date_after=yesterday").content.decode()
    assert "Enter a valid date" in refused and "Nothing recorded" in refused


def test_apply_history_names_farms_prints_an_error_once_and_shows_a_stalled_worker(admin_user, farm):
    message = "isolated, retried when the farm changes: Error: Could not process rule: No such file or directory"
    db = services.farm_create(name="db", vip="198.18.100.2", ports="5432", mode="dnat")
    ApplyRun.objects.create(
        generation=9,
        kind="incremental",
        started=timezone.now(),
        ok=False,
        error=f"farm {farm.id}: {message}\nfarm {db.id}: {message}\nfarm 999: {message}",
    )
    browser = Client()
    browser.force_login(admin_user)
    page = browser.get("/apply-runs/").content.decode()
    assert page.count("Could not process rule") == 1
    assert f'<a href="/farms/{farm.id}/">web</a>' in page and f'<a href="/farms/{db.id}/">db</a>' in page
    assert "farm #999 (deleted)" in page
    # No worker heartbeat in this test, and the farms have waited: the page says so before the runs.
    services.farm_update(farm=farm, ports="81")
    type(farm).objects.update(updated=timezone.now() - datetime.timedelta(seconds=60))
    page = browser.get("/apply-runs/").content.decode()
    state = page[page.index('id="worker-state"') : page.index("</section>")]
    assert "not running" in state or "has not run" in state or "unknown" in state
    assert "stalled" in state


def test_writes_on_the_admin_site_are_audited_with_their_actor(admin_user, django_user_model):
    browser = Client()
    browser.force_login(admin_user)
    made = browser.post("/admin/auth/group/add/", {"name": "auditors"})
    assert made.status_code == 302, made.content.decode()[:500]
    victim = django_user_model.objects.create_user("leaving", "", "pw-123456789")
    gone = browser.post(f"/admin/auth/user/{victim.pk}/delete/", {"post": "yes"})
    assert gone.status_code == 302
    events = [(e.action, e.object_type, e.object_name, e.actor_name) for e in AuditEvent.objects.order_by("id")]
    assert events == [("create", "group", "auditors", "admin"), ("delete", "user", "leaving", "admin")]
