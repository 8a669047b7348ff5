"""Preview: the kernel change an edit would cause is exactly what the worker sends once it is saved."""

from __future__ import annotations

import pytest
from django.test import Client
from rest_framework.test import APIClient

import compiler
from farms import preview, services
from farms.models import AuditEvent, Farm
from farms.specs import snapshot

pytestmark = pytest.mark.django_db


def kernel_now() -> dict:
    """What the kernel would hold if the worker had applied the database as it is now."""
    return {key: unit.objects for key, unit in snapshot().compiled().items()}


def worker_commands(old: dict) -> list:
    """The incremental transaction the worker computes from ``old`` to the database now."""
    document, _changed = compiler.incremental_document(old, snapshot().compiled())
    return document["nftables"]


@pytest.fixture
def farm():
    farm = services.farm_create(name="web", vip="198.18.100.1", ports="80", mode="snat", scheduler="weight")
    for address in ("198.18.1.11", "198.18.1.12"):
        services.backend_create(farm=farm, address=address)
    services.farm_create(name="other", vip="198.18.100.2", ports="80")
    return Farm.objects.get(pk=farm.pk)


@pytest.mark.parametrize(
    "values",
    [{"ports": "80,443"}, {"mode": "dnat", "scheduler": "rr"}, {"state": "off"}, {"name": "renamed"}],
)
def test_a_farm_edit_previews_the_exact_commands_the_worker_sends(farm, values):
    shown = preview.farm_change(farm, values)
    old = kernel_now()
    services.farm_update(farm=farm, **values)
    assert shown.changed
    assert shown.commands["nftables"] == worker_commands(old)
    assert "farm-other" not in shown.command_lines  # the other farm is left alone


def test_backend_state_change_creation_and_removal_previews_match_the_worker(farm):
    backend = farm.backends.first()
    for make_preview, write in (
        (lambda: preview.backend_change(farm, backend, {"state": "drain"}),
         lambda: services.backend_update(backend=backend, state="drain")),
        (lambda: preview.backend_change(farm, None, {"address": "198.18.1.13", "weight": 3}),
         lambda: services.backend_create(farm=farm, address="198.18.1.13", weight=3)),
        (lambda: preview.backend_removal(backend), lambda: services.backend_delete(backend=backend)),
        (lambda: preview.farm_change(None, {"name": "new", "vip": "198.18.100.3", "ports": "53", "protocol": "udp"}),
         lambda: services.farm_create(name="new", vip="198.18.100.3", ports="53", protocol="udp")),
        (lambda: preview.farm_removal(Farm.objects.get(name="web")),
         lambda: services.farm_delete(farm=Farm.objects.get(name="web"))),
    ):  # fmt: skip
        shown = make_preview()
        old = kernel_now()
        write()
        assert shown.changed and shown.commands["nftables"] == worker_commands(old)


def test_an_edit_that_changes_no_rule_previews_nothing(farm):
    shown = preview.farm_change(farm, {"description": "only words"})
    assert not shown.changed and shown.commands == {"nftables": []} and shown.diff == ""


def test_dsr_preview_marks_what_only_the_worker_can_resolve(farm):
    values = {"mode": "dsr", "interface": "lan0", "scheduler": "hash", "sched_param": "srcip"}
    shown = preview.farm_change(farm, values)
    assert "<MAC of 198.18.1.11>" in shown.command_lines and "<MAC of lan0>" in shown.command_lines
    assert any("resolved by the worker" in note for note in shown.notes)


def test_api_previews_an_edit_and_a_creation_without_saving(admin_user, farm):
    client = APIClient()
    client.force_authenticate(admin_user)
    events = AuditEvent.objects.count()
    edit = client.post(f"/api/v1/farms/{farm.id}/preview/", {"ports": "80,8080"}, format="json")
    assert edit.status_code == 200 and edit.json()["changed"]
    assert edit.json()["commands"] == preview.farm_change(farm, {"ports": "80,8080"}).commands
    assert '"inet_service"' not in edit.json()["diff"] and "8080" in edit.json()["diff"]
    create = client.post("/api/v1/farms/preview/", {"name": "new", "vip": "198.18.100.9", "ports": "25"}, format="json")
    assert create.status_code == 200 and "farm-new" in str(create.json()["commands"])
    drain = client.post(f"/api/v1/backends/{farm.backends.first().id}/preview/", {"state": "drain"}, format="json")
    assert drain.status_code == 200 and drain.json()["changed"]
    bad = client.post(f"/api/v1/farms/{farm.id}/preview/", {"ports": "99999"}, format="json")
    assert bad.status_code == 400 and "ports" in bad.json()
    assert Farm.objects.get(pk=farm.pk).ports == "80" and not Farm.objects.filter(name="new").exists()
    assert AuditEvent.objects.count() == events
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()["paths"]
    assert "/api/v1/farms/{id}/preview/" in schema and "/api/v1/farms/preview/" in schema


def test_the_edit_page_shows_the_preview_then_saves(admin_user, farm):
    client = Client()
    client.force_login(admin_user)
    form = client.get(f"/farms/{farm.id}/edit/").context["form"]
    data = {name: value for name, value in form.initial.items() if value is not None and name != "policies"}
    data = {k: ("on" if v is True else v) for k, v in data.items() if v is not False}
    page = client.post(f"/farms/{farm.id}/edit/", {**data, "ports": "80,8443", "_preview": "1"})
    html = page.content.decode()
    assert page.status_code == 200 and 'id="preview"' in html
    assert "8443" in html and "dispatch4" in html
    assert Farm.objects.get(pk=farm.pk).ports == "80"  # only previewed
    saved = client.post(f"/farms/{farm.id}/edit/", {**data, "ports": "80,8443", "_save": "1"})
    assert saved.status_code == 302 and Farm.objects.get(pk=farm.pk).ports == "80,8443"
