"""Mode ``local`` (nftlb's) outside the kernel: what the model refuses and why, the API, the pages, the
preview's words and the health-check decision. The kernel's side: tests/farms/test_nftlb_local.py."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.test import Client
from rest_framework.test import APIClient

from farms import health_services, services
from farms.models import HealthCheck
from farms.specs import farm_spec
from farms.summary import summarise

pytestmark = pytest.mark.django_db
LOCAL = {"name": "onbox", "vip": "198.18.100.30", "ports": "443", "mode": "local"}


def refused(**values) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as caught:
        services.farm_create(**{**LOCAL, **values})
    return caught.value.message_dict


def test_a_local_farm_takes_the_filters_and_limits_and_refuses_what_needs_a_forwarded_connection():
    farm = services.farm_create(**LOCAL, est_connlimit=10, new_rtlimit=5, rst_rtlimit=2, tcp_strict=True, log=True)
    assert farm_spec(farm).traffic == "local"
    for field, value in (
        ("scheduler", "weight"),
        ("persistence", "srcip"),
        ("source_addr", "198.18.1.1"),
        ("helper", "ftp"),
        ("mark", 0x100),
        ("log_forward", True),
        ("log_output", True),
        ("flow_offload", True),
        ("when_all_down", "fallback"),
    ):
        errors = refused(name=f"x{field.replace('_', '')}", vip="198.18.100.31", **{field: value})
        assert field in errors, (field, errors)
    assert "nothing to schedule" in refused(name="y", vip="198.18.100.32", scheduler="hash")["scheduler"][0]


def test_a_local_farm_has_no_backends_and_a_farm_with_backends_cannot_become_local():
    farm = services.farm_create(**LOCAL)
    with pytest.raises(ValidationError) as caught:
        services.backend_create(farm=farm, address="198.18.1.11")
    assert "is local" in caught.value.message_dict["farm"][0]
    nat = services.farm_create(name="nat", vip="198.18.100.33", ports="80", mode="dnat")
    services.backend_create(farm=nat, address="198.18.1.11")
    with pytest.raises(ValidationError) as caught:
        services.farm_update(farm=nat, mode="local")
    assert "remove them" in caught.value.message_dict["mode"][0]


def test_a_local_farm_is_not_health_checked():
    """Decided: healthd probes backends to choose where new connections go; a local farm has none, and with no
    service on the VIP the kernel itself refuses connections (TCP reset, ICMP unreachable), which is what a
    failed check would bring about. Its effective check is none, and a probing one is refused."""
    farm = services.farm_create(**LOCAL)
    assert HealthCheck.effective_for(farm).type == "none"
    with pytest.raises(ValidationError) as caught:
        health_services.health_check_create(farm=farm, type="tcp")
    assert "no backends to probe" in caught.value.message_dict["type"][0]
    assert health_services.health_check_create(farm=farm, type="none").type == "none"


def test_the_api_creates_a_local_farm_and_refuses_with_the_model_s_words(django_user_model):
    api = APIClient()
    api.force_authenticate(django_user_model.objects.create_user("api", is_staff=True, is_superuser=True))
    created = api.post("/api/v1/farms/", {**LOCAL, "est_connlimit": 3}, format="json")
    assert created.status_code == 201, created.json()
    assert created.json()["mode"] == "local" and created.json()["traffic"] == "local"
    bad = api.post("/api/v1/farms/", {**LOCAL, "name": "bad", "vip": "198.18.100.34", "helper": "ftp"}, format="json")
    assert bad.status_code == 400 and "helper" in bad.json()
    backend = api.post("/api/v1/backends/", {"farm": created.json()["id"], "address": "198.18.1.11"}, format="json")
    assert backend.status_code == 400 and "farm" in backend.json()


def test_the_preview_and_the_farm_page_say_where_a_local_farm_s_connections_go(admin_user):
    farm = services.farm_create(**LOCAL, est_connlimit=4)
    lines = summarise(None, farm_spec(farm))
    assert lines[0] == "+ farm onbox: VIP 198.18.100.30 tcp/443, LOCAL, served by the appliance itself"
    assert lines[-1].startswith("new connections: to the service listening on the VIP on the appliance")
    browser = Client()
    browser.force_login(admin_user)
    page = browser.get(f"/farms/{farm.pk}/").content.decode()
    assert "service listening on the VIP on the appliance itself" in page and 'id="local-farm"' in page
    assert "backend-editor" not in page and "Edit health check" not in page and "no backends to probe" in page
    assert "<dt>Scheduler</dt>" not in page and "<dt>Established connections</dt>" in page  # FARM_FIELD_WHEN
