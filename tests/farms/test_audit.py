"""The audit trail: every service call records who, what, when, before and after, in its own transaction."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.test import Client
from rest_framework.test import APIClient

from farms import services
from farms.models import AuditEvent

pytestmark = pytest.mark.django_db


@pytest.fixture
def farm(admin_user):
    return services.farm_create(name="web", vip="198.18.100.1", ports="80", mode="dnat", actor=admin_user)


def test_each_service_records_actor_action_and_before_after(admin_user, farm):
    created = AuditEvent.objects.get()
    assert (created.actor, created.actor_name, created.action, created.object_type, created.object_name) == (
        admin_user,
        "admin",
        "create",
        "farm",
        "web",
    )
    assert created.before is None and created.after["ports"] == "80" and created.farm_ref == farm.id

    backend = services.backend_create(farm=farm, address="198.18.1.11", actor=admin_user)
    services.backend_update(backend=backend, state="drain", weight=4)
    update = AuditEvent.objects.first()
    assert update.actor is None and update.actor_name == "system"
    assert update.changes() == [("weight", 1, 4), ("state", "enabled", "drain")]
    assert update.object_id == backend.id and update.farm_ref == farm.id

    farm_id = farm.id
    services.farm_delete(farm=farm, actor=admin_user)
    deleted = AuditEvent.objects.first()
    assert deleted.action == "delete" and deleted.object_name == "web" and deleted.after is None
    assert deleted.before["vip"] == "198.18.100.1"
    assert AuditEvent.objects.filter(farm_ref=farm_id).count() == 4  # its whole history stays


def test_a_refused_change_records_nothing(admin_user, farm):
    with pytest.raises(ValidationError):
        services.farm_update(farm=farm, ports="nonsense", actor=admin_user)
    assert AuditEvent.objects.count() == 1  # only the create


def test_a_service_calling_another_is_recorded_once(admin_user, farm):
    backend = services.backend_create(farm=farm, address="198.18.1.11", actor=admin_user)
    services.backend_maintenance(backend=backend, mode="drain", actor=admin_user)
    event = AuditEvent.objects.first()
    assert event.action == "maintenance" and event.changes() == [("state", "enabled", "drain")]
    assert AuditEvent.objects.filter(action="update").count() == 0


def test_api_writes_are_recorded_against_the_token_user_and_listed(admin_user):
    client = APIClient()
    client.force_authenticate(admin_user)
    farm = client.post("/api/v1/farms/", {"name": "api", "vip": "198.18.100.2", "ports": "443"}, format="json").json()
    client.patch(f"/api/v1/farms/{farm['id']}/", {"ports": "443,8443"}, format="json")
    events = client.get("/api/v1/audit-events/", {"object_type": "farm"}).json()["results"]
    assert [(e["action"], e["actor_name"]) for e in events] == [("update", "admin"), ("create", "admin")]
    assert events[0]["before"]["ports"] == "443" and events[0]["after"]["ports"] == "443,8443"
    assert client.get("/api/v1/audit-events/", {"actor_name": "nobody"}).json()["count"] == 0


def test_audit_page_shows_who_changed_which_field(admin_user, farm):
    services.farm_update(farm=farm, ports="80,443", actor=admin_user)
    client = Client()
    client.force_login(admin_user)
    page = client.get("/audit-events/", {"object_type": "farm"}).content.decode()
    assert "ports: <code>80</code> → <code>80,443</code>" in page
    assert page.count('<tr id="event-') == 2
