"""Roles (admin, operator, viewer) enforced alike by every page and every API endpoint.

Each case names the weakest role allowed; every role is tried. An allowed request must succeed with
the expected status; a refused one gets 403 and writes nothing (every write leaves an audit event, so
an unchanged audit log proves it).
"""

from __future__ import annotations

import json

import pytest
from django.test import Client
from rest_framework.test import APIClient

from farms import services
from farms.models import AuditEvent, Backend
from farms.roles import RANK

pytestmark = pytest.mark.django_db

ROLES = ("viewer", "operator", "admin")


@pytest.fixture
def objects(admin_user) -> dict:
    farm = services.farm_create(
        name="web", vip="198.18.100.1", ports="80", mode="dnat", scheduler="weight", persistence="srcip"
    )
    backend = services.backend_create(farm=farm, address="198.18.1.11")
    policy = services.policy_create(name="unused", elements="198.18.5.0/24")
    return {"farm": farm.id, "backend": backend.id, "policy": policy.id}


FARM = {"name": "new", "vip": "198.18.100.2", "protocol": "tcp", "ports": "80", "mode": "dnat", "scheduler": "rr"}
CONFIG = {"lbweb_config": 1, "policies": [], "farms": []}

# (method, path, body, weakest role allowed, status on success)
API_CASES = {
    "list farms": ("get", "farms/", None, "viewer", 200),
    "read farm": ("get", "farms/{farm}/", None, "viewer", 200),
    "create farm": ("post", "farms/", FARM, "admin", 201),
    "edit farm": ("patch", "farms/{farm}/", {"ports": "81"}, "admin", 200),
    "delete farm": ("delete", "farms/{farm}/", None, "admin", 204),
    "preview farm create": ("post", "farms/preview/", FARM, "admin", 200),
    "preview farm edit": ("post", "farms/{farm}/preview/", {"ports": "81"}, "admin", 200),
    "flush sessions": ("post", "farms/{farm}/sessions/flush/", {}, "operator", 202),
    "retry farm": ("post", "farms/{farm}/retry/", {}, "operator", 202),
    "list backends": ("get", "backends/", None, "viewer", 200),
    "add backend": ("post", "backends/", {"farm": "{farm}", "address": "198.18.1.12"}, "admin", 201),
    "drain backend": ("patch", "backends/{backend}/", {"state": "drain"}, "operator", 200),
    "backend weight": ("patch", "backends/{backend}/", {"weight": 5}, "admin", 200),
    "state and weight": ("patch", "backends/{backend}/", {"state": "drain", "weight": 5}, "admin", 200),
    "replace backend": ("put", "backends/{backend}/", {"farm": "{farm}", "address": "198.18.1.11"}, "admin", 200),
    "maintenance": ("post", "backends/{backend}/maintenance/", {"mode": "drain"}, "operator", 200),
    "preview drain": ("post", "backends/{backend}/preview/", {"state": "drain"}, "operator", 200),
    "preview weight": ("post", "backends/{backend}/preview/", {"weight": 3}, "admin", 200),
    "delete backend": ("delete", "backends/{backend}/", None, "admin", 204),
    "list policies": ("get", "policies/", None, "viewer", 200),
    "create policy": ("post", "policies/", {"name": "p2", "elements": "198.18.6.1"}, "admin", 201),
    "delete policy": ("delete", "policies/{policy}/", None, "admin", 204),
    "static session": (
        "post",
        "static-sessions/",
        {"farm": "{farm}", "client": "198.18.0.2", "backend": "{backend}"},
        "admin",
        201,
    ),
    "apply runs": ("get", "apply-runs/", None, "viewer", 200),
    "audit events": ("get", "audit-events/", None, "viewer", 200),
    "export": ("get", "config/export/", None, "viewer", 200),
    "import": ("post", "config/import/", CONFIG, "admin", 200),
}


def _fill(value, ids: dict):
    if isinstance(value, str):
        return value.format(**ids)
    if isinstance(value, dict):
        return {k: (int(_fill(v, ids)) if isinstance(v, str) and v.startswith("{") else v) for k, v in value.items()}
    return value


def allowed(role: str, weakest: str) -> bool:
    return RANK[role] >= RANK[weakest]


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("case", list(API_CASES))
def test_api_endpoint_enforces_roles(case, role, role_users, objects):
    method, path, body, weakest, success = API_CASES[case]
    client = APIClient()
    client.force_authenticate(role_users[role])
    before = AuditEvent.objects.count()
    response = getattr(client, method)("/api/v1/" + _fill(path, objects), _fill(body, objects), format="json")
    if allowed(role, weakest):
        assert response.status_code == success, (case, role, response.content)
        if method != "get" and "preview" not in path:
            assert AuditEvent.objects.count() > before  # the write happened, and was recorded
    else:
        assert response.status_code == 403, (case, role, response.content)
        assert f"needs the {weakest} role" in response.json()["detail"]
        assert AuditEvent.objects.count() == before


@pytest.mark.parametrize("case", ["list farms", "create farm", "drain backend", "export"])
def test_api_refuses_anonymous_requests(case, objects):
    method, path, body, _weakest, _success = API_CASES[case]
    response = getattr(APIClient(), method)("/api/v1/" + _fill(path, objects), _fill(body, objects), format="json")
    assert response.status_code in (401, 403)


def test_api_metrics_and_capabilities_are_readable_by_viewers(role_users):
    client = APIClient()
    client.force_authenticate(role_users["viewer"])
    for path in ("/api/v1/metrics/summary/", "/api/v1/capabilities/"):
        assert client.get(path).status_code not in (401, 403)  # 200, or 503 with no Redis here


BACKEND_FORM = {
    "address": "198.18.1.12", "weight": "1", "state": "enabled", "priority": "1", "est_connlimit": "0", "mark": "0",
}  # fmt: skip

# (method, path, form data, weakest role allowed, status on success)
UI_CASES = {
    "farm list": ("get", "/", None, "viewer", 200),
    "farm detail": ("get", "/farms/{farm}/", None, "viewer", 200),
    "new farm form": ("get", "/farms/add/", None, "admin", 200),
    "create farm": (
        "post",
        "/farms/add/",
        {
            **FARM,
            "state": "up",
            "persist_ttl": "60",
            "log_rtlimit": "10",
            "log_rtlimit_unit": "second",
            "new_rtlimit_unit": "second",
            "rst_rtlimit_unit": "second",
            "rst_rtlimit_burst": "0",
            "limits_ttl": "120",
            "mark": "0",
            "log_drops": "on",
            "new_rtlimit": "0",
            "new_rtlimit_burst": "0",
            "rst_rtlimit": "0",
            "est_connlimit": "0",
            "limit_verdict": "drop",
            "when_all_down": "reject",
            "_save": "1",
        },
        "admin",
        302,
    ),  # fmt: skip
    "edit farm form": ("get", "/farms/{farm}/edit/", None, "admin", 200),
    "delete farm page": ("get", "/farms/{farm}/delete/", None, "admin", 200),
    "delete farm": ("post", "/farms/{farm}/delete/", {}, "admin", 302),
    "add backend form": ("get", "/farms/{farm}/backends/add/", None, "admin", 200),
    "add backend": ("post", "/farms/{farm}/backends/add/", {**BACKEND_FORM, "_save": "1"}, "admin", 302),
    "edit backend form": ("get", "/backends/{backend}/edit/", None, "admin", 200),
    "drain backend": ("post", "/backends/{backend}/state/", {"state": "drain"}, "operator", 302),
    "cut backend page": ("get", "/backends/{backend}/cut/", None, "operator", 200),
    "cut backend": ("post", "/backends/{backend}/cut/", {}, "operator", 302),
    "health check page": ("get", "/farms/{farm}/health-check/", None, "viewer", 200),
    "retry farm": ("post", "/farms/{farm}/retry/", {}, "operator", 302),
    "delete backend": ("post", "/backends/{backend}/delete/", {}, "admin", 302),
    "policies": ("get", "/policies/", None, "viewer", 200),
    "new policy form": ("get", "/policies/add/", None, "admin", 200),
    "delete policy": ("post", "/policies/{policy}/delete/", {}, "admin", 302),
    "apply history": ("get", "/apply-runs/", None, "viewer", 200),
    "audit log": ("get", "/audit-events/", None, "viewer", 200),
    "config page": ("get", "/config/", None, "viewer", 200),
    "export": ("get", "/config/export/", None, "viewer", 200),
    "import": ("post", "/config/", {"text": '{"lbweb_config": 1, "farms": []}'}, "admin", 302),
    "password change": ("get", "/accounts/password/", None, "viewer", 200),
}


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("case", list(UI_CASES))
def test_page_enforces_roles(case, role, role_users, objects):
    method, path, data, weakest, success = UI_CASES[case]
    client = Client()
    client.force_login(role_users[role])
    before = AuditEvent.objects.count()
    response = getattr(client, method)(_fill(path, objects), data)
    if allowed(role, weakest):
        assert response.status_code == success, (case, role, response.content[:3000])
        if method == "post":
            assert AuditEvent.objects.count() > before
    else:
        assert response.status_code == 403, (case, role)
        assert f"needs the {weakest} role" in response.content.decode()
        assert AuditEvent.objects.count() == before


@pytest.mark.parametrize("case", ["farm list", "farm detail", "drain backend", "export"])
def test_pages_send_anonymous_users_to_the_login_page(case, objects):
    method, path, data, _weakest, _success = UI_CASES[case]
    response = getattr(Client(), method)(_fill(path, objects), data)
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    assert Backend.objects.get(id=objects["backend"]).state == "enabled"


def test_pages_offer_each_role_only_what_it_may_do(role_users, objects):
    pages = {}
    for role in ROLES:
        client = Client()
        client.force_login(role_users[role])
        pages[role] = client.get(f"/farms/{objects['farm']}/").content.decode()
    edit, drain = f"/farms/{objects['farm']}/edit/", f"/backends/{objects['backend']}/state/"
    assert edit not in pages["viewer"] and drain not in pages["viewer"]
    assert edit not in pages["operator"] and drain in pages["operator"]
    assert edit in pages["admin"] and drain in pages["admin"]
    assert "(viewer)" in pages["viewer"] and "(operator)" in pages["operator"]


def test_an_account_in_no_role_group_can_only_read(django_user_model, objects):
    user = django_user_model.objects.create_user("nobody", "", "x")
    client = APIClient()
    client.force_authenticate(user)
    assert client.get("/api/v1/farms/").status_code == 200
    assert client.patch(f"/api/v1/backends/{objects['backend']}/", {"state": "drain"}, format="json").status_code == 403


@pytest.mark.django_db
def test_health_check_settings_page_saves_through_the_service_and_shows_viewers_a_read_only_page(django_user_model):
    from django.contrib.auth.models import Group
    from django.test import Client

    from farms import services
    from farms.models import HealthCheck

    farm = services.farm_create(**FARM)
    admin = django_user_model.objects.create_superuser("hc-admin", "", "pw")
    viewer = django_user_model.objects.create_user("hc-viewer", "", "pw")
    viewer.groups.add(Group.objects.get(name="viewer"))
    web = Client()
    web.force_login(viewer)
    read_only = web.get(f"/farms/{farm.pk}/health-check/").content.decode()
    assert "<fieldset disabled>" in read_only and 'name="_save"' not in read_only and "Read only" in read_only
    assert web.post(f"/farms/{farm.pk}/health-check/", {"type": "icmp", "_save": "1"}).status_code == 403
    web.force_login(admin)
    page = web.get(f"/farms/{farm.pk}/health-check/")
    assert page.status_code == 200 and "http_path" in page.content.decode()
    form = {"type": "http", "interval": "1", "timeout": "0.5", "rise": "2", "fall": "3", "http_method": "GET",
            "http_path": "/healthz", "http_statuses": "200-299", "_save": "1"}  # fmt: skip
    assert web.post(f"/farms/{farm.pk}/health-check/", form).status_code == 302
    check = HealthCheck.objects.get(farm=farm)
    assert (check.type, check.http_path, check.interval) == ("http", "/healthz", 1.0)
    bad = web.post(f"/farms/{farm.pk}/health-check/", {**form, "timeout": "5"})
    assert bad.status_code == 200 and "cannot be longer than the interval" in bad.content.decode()
    services.backend_create(farm=farm, address="198.18.1.11")
    detail = web.get(f"/farms/{farm.pk}/").content.decode()
    assert f'href="/farms/{farm.pk}/health-check/"' in detail and "health-unknown" in detail


COMMAND_CHECK = {"type": "command", "command": "/usr/bin/true {address}", "interval": 2, "timeout": 1}


@pytest.mark.parametrize("role", ["operator", "viewer"])
def test_only_admins_may_create_or_change_command_checks(role, role_users, objects):
    """A command check runs a program on the appliance: the API, the page and the import refuse anyone else."""
    from farms import health_services
    from farms.models import HealthCheck

    farm, other = objects["farm"], services.farm_create(**{**FARM, "name": "other"})
    existing = health_services.health_check_create(farm=other, type="tcp")
    api = APIClient()
    api.force_authenticate(role_users[role])
    attempts = [
        api.post("/api/v1/health-checks/", {"farm": farm, **COMMAND_CHECK}, format="json"),
        api.patch(f"/api/v1/health-checks/{existing.pk}/", COMMAND_CHECK, format="json"),
        api.put(f"/api/v1/health-checks/{existing.pk}/", {"farm": other.pk, **COMMAND_CHECK}, format="json"),
        api.delete(f"/api/v1/health-checks/{existing.pk}/"),
    ]
    assert [response.status_code for response in attempts] == [403] * 4, [r.content for r in attempts]
    assert all("needs the admin role" in response.json()["detail"] for response in attempts)
    page = Client()
    page.force_login(role_users[role])
    form = {**COMMAND_CHECK, "rise": "2", "fall": "3", "http_method": "GET", "http_path": "/", "_save": "1"}
    assert page.post(f"/farms/{farm}/health-check/", form).status_code == 403
    assert page.post(f"/farms/{other.pk}/health-check/", form).status_code == 403
    document = {"lbweb_config": 1, "farms": [{**FARM, "name": "imported", "health_check": COMMAND_CHECK}]}
    assert api.post("/api/v1/config/import/", document, format="json").status_code == 403
    assert page.post("/config/", {"text": json.dumps(document)}).status_code == 403
    assert list(HealthCheck.objects.values_list("farm_id", "type", "command")) == [(other.pk, "tcp", "")]


def test_an_admin_may_and_the_import_carries_no_health_checks(role_users, objects):
    from farms.models import Farm, HealthCheck

    api = APIClient()
    api.force_authenticate(role_users["admin"])
    created = api.post("/api/v1/health-checks/", {"farm": objects["farm"], **COMMAND_CHECK}, format="json")
    assert created.status_code == 201 and created.json()["command"] == COMMAND_CHECK["command"]
    # health checks are no part of an exported or imported configuration: a document carrying one is refused
    document = {"lbweb_config": 1, "farms": [{**FARM, "name": "imported", "health_check": COMMAND_CHECK}]}
    refused = api.post("/api/v1/config/import/", document, format="json")
    assert refused.status_code == 400 and "Unknown field 'health_check'" in refused.content.decode()
    assert not Farm.objects.filter(name="imported").exists() and HealthCheck.objects.count() == 1
