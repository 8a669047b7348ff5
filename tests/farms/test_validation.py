"""Issue 12's "accepted but wrong" inputs, each refused with a field-level 400 on every path that writes.

``tests/farms/test_kernel_bounds_validation.py`` proves the rules on ``clean()``; this file proves, for the
exact inputs the issue reported, that the API, the form, both imports (configuration and nftlb) and the
preview refuse them with the same words, and that the kernel's capabilities are read from where the
worker publishes them (the real Redis).
"""

from __future__ import annotations

import json

import pytest

from compiler.limits import KERNEL_INT_MAX
from farms import capabilities
from farms.forms import FarmForm
from farms.models import Backend, Farm
from tests.farms.test_api import create_farm, farm_data

pytestmark = pytest.mark.django_db
EMOJI_60 = "😀" * 60  # 60 characters (the field's max_length), 240 bytes: libnftables 1.0.6 crashed on it


def form_errors(**values) -> dict[str, list[str]]:
    data = {
        **farm_data(),
        "state": "up",
        "persist_ttl": 60,
        "log_rtlimit": 10,
        "limit_verdict": "drop",
        "when_all_down": "reject",
        "new_rtlimit": 0,
        "new_rtlimit_burst": 0,
        "rst_rtlimit": 0,
        "est_connlimit": 0,
        **values,
    }
    form = FarmForm(data={k: v for k, v in data.items() if v is not False})  # unchecked boxes are absent
    assert not form.is_valid()
    return form.errors


def api_errors(client, url: str, body: dict) -> dict:
    response = client.post(f"/api/v1/{url}", body, format="json")
    assert response.status_code == 400, response.content
    return response.json()


def config_import_errors(client, farm: dict) -> dict[str, str]:
    body = api_errors(client, "config/import/", {"lbweb_config": 1, "farms": [farm]})
    return {e["field"]: e["message"] for e in body["errors"]}


def nftlb_import_errors(client, farm: dict) -> list[str]:
    body = api_errors(client, "nftlb/import/", {"farms": [farm]})
    return [e["message"] for e in body["errors"]]


NFTLB_FARM = {"name": "web", "family": "ipv4", "virtual-addr": "198.18.100.1", "virtual-ports": "80",
              "mode": "snat", "protocol": "tcp"}  # fmt: skip


def test_a_log_prefix_of_60_emoji_is_refused_by_every_path_with_the_same_words(client):
    values = {"log": True, "log_prefix": EMOJI_60}
    expected = api_errors(client, "farms/", farm_data(**values))["log_prefix"]
    assert "127 bytes" in expected[0] and "240 bytes" in expected[0]
    assert api_errors(client, "farms/preview/", farm_data(**values))["log_prefix"] == expected
    assert form_errors(**values)["log_prefix"] == expected
    assert config_import_errors(client, farm_data(**values))["log_prefix"] == expected[0]
    assert expected[0] in nftlb_import_errors(client, {**NFTLB_FARM, "log": "forward", "log-prefix": EMOJI_60})
    farm = create_farm(client)
    response = client.patch(f"/api/v1/farms/{farm['id']}/", values, format="json")
    assert response.status_code == 400 and response.json()["log_prefix"] == expected
    assert Farm.objects.get().log_prefix == ""


def test_flow_offload_is_refused_when_the_worker_published_flowtable_false(client, redis_server):
    """The capabilities travel as the worker publishes them (``dataplane.boot.publish_capabilities``)."""
    from lbweb.redis_client import get_redis

    body = farm_data(mode="dnat", flow_offload=True)
    try:
        get_redis().set(capabilities.REDIS_KEY, json.dumps({"flowtable": False, "reject-nat": True}))
        capabilities.forget()
        expected = api_errors(client, "farms/", body)["flow_offload"]
        assert "no flowtables" in expected[0]
        assert form_errors(mode="dnat", flow_offload=True)["flow_offload"] == expected
        assert config_import_errors(client, body)["flow_offload"] == expected[0]
        assert expected[0] in nftlb_import_errors(client, {**NFTLB_FARM, "mode": "dnat", "flow-offload": "on"})
        assert not Farm.objects.exists()
        get_redis().set(capabilities.REDIS_KEY, json.dumps({"flowtable": True, "reject-nat": True}))
        capabilities.forget()
        assert client.post("/api/v1/farms/", body, format="json").status_code == 201
    finally:
        get_redis().delete(capabilities.REDIS_KEY)
        capabilities.forget()


@pytest.mark.parametrize(
    "vip, words",
    [
        ("0.0.0.0", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("127.0.0.1", "loopback"),
        ("fe80::1%lo", "zone id"),
        ("fe80::1", "link-local"),
    ],
)
def test_the_special_vips_of_the_issue_are_refused_by_every_path(client, vip, words):
    values = {"vip": vip, "intra_connect": True, "ports": "443"}  # the API's own port, from the appliance itself
    message = api_errors(client, "farms/", farm_data(**values))["vip"][0]
    assert words in message
    assert words in form_errors(**values)["vip"][0]
    assert words in config_import_errors(client, farm_data(**values))["vip"]
    family = "ipv6" if ":" in vip else "ipv4"
    nftlb = nftlb_import_errors(client, {**NFTLB_FARM, "family": family, "virtual-addr": vip})
    assert any(words in m for m in nftlb), nftlb
    assert not Farm.objects.exists()


@pytest.mark.parametrize("ports", ["٨٠", "8_0"])
def test_ports_written_with_other_digits_are_refused_not_read_as_80(client, ports):
    assert "0-9" in api_errors(client, "farms/", farm_data(ports=ports))["ports"][0]
    assert "0-9" in form_errors(ports=ports)["ports"][0]
    assert "0-9" in config_import_errors(client, farm_data(ports=ports))["ports"]
    farm = create_farm(client)
    assert (
        "0-9"
        in api_errors(client, "backends/", {"farm": farm["id"], "address": "198.18.1.11", "port": ports})["port"][0]
    )
    assert not Backend.objects.exists()


def test_a_backend_on_its_own_farms_vip_and_port_is_refused_by_the_api(client):
    farm = create_farm(client)
    errors = api_errors(client, "backends/", {"farm": farm["id"], "address": farm["vip"], "port": 80})
    assert "loop" in errors["address"][0]
    imported = farm_data(backends=[{"address": farm_data()["vip"], "port": 80}], name="other")
    assert "loop" in json.dumps(api_errors(client, "config/import/", {"lbweb_config": 1, "farms": [imported]}))
    assert not Backend.objects.exists()


@pytest.mark.parametrize("field", ["new_rtlimit", "new_rtlimit_burst", "rst_rtlimit", "est_connlimit", "log_rtlimit"])
def test_a_limit_of_2_to_the_31_is_refused_by_the_api_and_the_form(client, field):
    message = api_errors(client, "farms/", farm_data(**{field: 2**31}))[field][0]
    assert str(KERNEL_INT_MAX) in message
    assert str(KERNEL_INT_MAX) in form_errors(**{field: 2**31})[field][0]
    assert str(KERNEL_INT_MAX) in config_import_errors(client, farm_data(**{field: 2**31}))[field]
    assert client.post("/api/v1/farms/", farm_data(**{field: KERNEL_INT_MAX}), format="json").status_code == 201
