"""Server-rendered pages: log in and out, forms built from the models with inline errors, one-click states."""

from __future__ import annotations

import html
import re

import pytest
from django.test import Client
from django.utils import timezone

from farms import services
from farms.choices import BackendStateChoices
from farms.forms import FarmForm
from farms.models import ApplyRun, AuditEvent, Backend, Farm
from tests.conftest import ROLE_PASSWORD

pytestmark = pytest.mark.django_db


@pytest.fixture
def farm():
    farm = services.farm_create(name="web", vip="198.18.100.1", ports="80", mode="dnat")
    services.backend_create(farm=farm, address="198.18.1.11")
    services.backend_create(farm=farm, address="198.18.1.12", state="disabled")
    return farm


def form_data(**overrides) -> dict:
    """What a browser posts for a new farm: the form's initial values, as text."""
    data = {}
    for name, field in FarmForm().fields.items():
        initial = field.initial() if callable(field.initial) else field.initial
        if initial is not None and initial is not False and initial != "":
            data[name] = "on" if initial is True else initial
    return {**data, **overrides}


def test_log_in_change_password_log_out(role_users):
    client = Client()
    assert client.get("/").status_code == 302
    page = client.post("/accounts/login/", {"username": "viewer-user", "password": "wrong"})
    assert "Wrong user name or password" in page.content.decode()
    assert client.post("/accounts/login/", {"username": "viewer-user", "password": ROLE_PASSWORD}).status_code == 302
    assert "viewer-user" in client.get("/").content.decode()
    changed = client.post(
        "/accounts/password/",
        {"old_password": ROLE_PASSWORD, "new_password1": "another-secret-9", "new_password2": "another-secret-9"},
    )
    assert changed.status_code == 302
    assert client.post("/accounts/logout/").status_code == 302
    assert client.get("/").status_code == 302
    assert (
        client.post("/accounts/login/", {"username": "viewer-user", "password": "another-secret-9"}).status_code == 302
    )


def test_farm_form_has_every_field_of_the_services_and_groups_unknown_ones():
    form = FarmForm()
    placed = [field.name for _title, fields in form.fieldsets() for field in fields]
    assert sorted(placed) == sorted([*services.FARM_FIELDS, "policies"])
    form.fields["brand_new_option"] = form.fields["description"]  # a field added on main tomorrow
    assert form.fieldsets()[-1][0] == "Other options"


def test_creating_a_farm_with_errors_shows_them_next_to_the_fields(admin_client):
    page = admin_client.post("/farms/add/", form_data(name="web", vip="198.18.100.1", ports="0", scheduler="hash"))
    text = page.content.decode()
    assert page.status_code == 200 and not Farm.objects.exists()
    ports = text[text.index('id="field-ports"') : text.index('id="field-state"')]
    assert "out of range" in ports and 'aria-invalid="true"' in ports
    assert "needs the fields to hash" in text[text.index('id="field-sched_param"') :]
    created = admin_client.post("/farms/add/", form_data(name="web", vip="198.18.100.1", ports="443, 80"))
    assert created.status_code == 302, created.context["form"].errors
    farm = Farm.objects.get()
    assert created.status_code == 302 and created["Location"] == f"/farms/{farm.id}/"
    assert farm.ports == "80,443"
    assert AuditEvent.objects.get().actor_name == "admin"


def test_backend_state_buttons_come_from_the_choices_and_change_the_state(admin_client, farm):
    page = admin_client.get(f"/farms/{farm.id}/").content.decode()
    enabled, disabled = farm.backends.order_by("address")
    offered = re.findall(rf'backends/{enabled.id}/state/.*?name="state" value="(\w+)"', page, re.S)
    assert set(offered) == set(BackendStateChoices.values) - {"enabled"}
    assert f"/backends/{enabled.id}/cut/" in page  # cut: a confirmation page first, never one click
    assert admin_client.post(f"/backends/{enabled.id}/state/", {"state": "cut"})["Location"] == (
        f"/backends/{enabled.id}/cut/"
    )
    assert Backend.objects.get(id=enabled.id).state == "enabled"
    assert admin_client.post(f"/backends/{enabled.id}/state/", {"state": "drain"}).status_code == 302
    assert Backend.objects.get(id=enabled.id).state == "drain"
    assert admin_client.post(f"/backends/{enabled.id}/state/", {"state": "bogus"}).status_code == 400
    listing = admin_client.get("/").content.decode()
    assert re.search(r">\s*0 / 2\s*<", listing)  # enabled / total (drain and disabled are not enabled)


def test_adding_a_backend_of_the_wrong_family_is_refused_inline(admin_client, farm):
    page = admin_client.post(
        f"/farms/{farm.id}/backends/add/",
        {"address": "2001:2:0:1::11", "weight": "1", "state": "enabled", "priority": "1", "est_connlimit": "0"},
    )
    assert page.status_code == 200 and "its backends must be IPv4 too" in page.content.decode()
    assert farm.backends.count() == 2


def test_deleting_a_farm_shows_what_leaves_the_kernel_first(admin_client, farm):
    confirm = html.unescape(admin_client.get(f"/farms/{farm.id}/delete/").content.decode())
    assert '"delete": {"chain"' in confirm and "farm-web" in confirm
    assert Farm.objects.exists()
    assert admin_client.post(f"/farms/{farm.id}/delete/").status_code == 302
    assert not Farm.objects.exists()


def test_a_used_policy_cannot_be_deleted_and_the_page_says_why(admin_client):
    policy = services.policy_create(name="block", elements="198.18.5.0/24")
    services.farm_create(name="guarded", vip="198.18.100.5", ports="80", policies=[policy])
    page = admin_client.post(f"/policies/{policy.id}/delete/")
    assert page.status_code == 200 and "used by farm(s) guarded" in page.content.decode()
    assert "guarded" in admin_client.get("/policies/").content.decode()


def test_apply_history_shows_the_kernel_error_text(admin_client):
    ApplyRun.objects.create(
        generation=3, kind="full", started=timezone.now(), ok=False, error="farm 1: Error: Could not process rule"
    )
    page = admin_client.get("/apply-runs/?failed=1").content.decode()
    assert "Could not process rule" in page and "status-failed" in page


def test_pages_work_offline(admin_client, farm):
    for path in ("/", f"/farms/{farm.id}/", f"/farms/{farm.id}/edit/", "/audit-events/", "/config/"):
        page = admin_client.get(path).content.decode()
        external = [u for u in re.findall(r"""(?:src|href)=["']([^"']+)""", page) if re.match(r"(https?:)?//", u)]
        assert external == [], (path, external)


def test_a_failed_farm_offers_a_retry_that_gives_it_a_new_generation(admin_client, farm):
    """The worker leaves an isolated farm alone until it changes; the button is that change, with nothing else."""
    from farms.models import AuditEvent, Farm

    page = admin_client.get(f"/farms/{farm.id}/").content.decode()
    assert f"/farms/{farm.id}/retry/" not in page
    Farm.objects.filter(id=farm.id).update(
        apply_error="isolated, retried when the farm changes: Error: refused", failed_generation=10**6
    )
    page = admin_client.get(f"/farms/{farm.id}/").content.decode()
    assert f"/farms/{farm.id}/retry/" in page and "Error: refused" in page
    before = Farm.objects.get(id=farm.id).config_generation
    assert admin_client.post(f"/farms/{farm.id}/retry/").status_code == 302
    assert Farm.objects.get(id=farm.id).config_generation > before
    assert AuditEvent.objects.filter(action="retry", object_id=farm.id).exists()
