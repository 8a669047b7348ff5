"""Validation refuses, at save time and with a field-level message, what the kernel cannot take.

The same input is refused with the same words by the API, the forms, both imports (configuration and
nftlb) and the preview, because every path ends in the models' ``clean()``.
"""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ValidationError

import compiler
from compiler.limits import KERNEL_INT_MAX, LOG_PREFIX_BYTES, truncate_utf8
from compiler.spec import FarmSpec
from farms import capabilities, config_io, services
from farms.forms import BackendForm, FarmForm
from farms.models import Farm
from farms.nftlb import nftlb_import
from tests.farms.test_api import create_farm, farm_data

pytestmark = pytest.mark.django_db


def refused(field: str, **values) -> str:
    """The message ``clean()`` gives for ``field`` when a farm with these values is saved."""
    with pytest.raises(ValidationError) as caught:
        services.farm_create(**{**farm_data(), **values})
    assert field in caught.value.message_dict, caught.value.message_dict
    return caught.value.message_dict[field][0]


# -- text counted in bytes ---------------------------------------------------------------------------


def test_log_prefix_is_counted_in_bytes_as_the_kernel_counts_it():
    services.farm_create(**farm_data(name="ok", log=True, log_prefix="😀" * 31))  # 124 bytes
    services.farm_create(**farm_data(name="ascii", vip="198.18.100.2", log=True, log_prefix="a" * 60))
    message = refused("log_prefix", log=True, log_prefix="😀" * 32)  # 32 characters, 128 bytes
    assert "127 bytes" in message and "128 bytes" in message


@pytest.mark.parametrize("prefix", ["line\nbreak", "tab\there", "nul\x00"])
def test_log_prefix_refuses_control_characters(prefix):
    assert "control characters" in refused("log_prefix", log_prefix=prefix)


def test_the_compiler_cuts_a_log_prefix_at_127_bytes_never_inside_a_character():
    farm = FarmSpec(id=1, name="x", vip="198.18.100.1", ports=((80, 80),), log=True, log_prefix="é" * 100)
    rules = [c["add"]["rule"] for c in compiler.compile_farm(farm).creates if "rule" in c.get("add", {})]
    prefix = next(e["log"]["prefix"] for r in rules for e in r["expr"] if "log" in e)
    assert prefix == "é" * 63 and len(prefix.encode()) == 126 <= LOG_PREFIX_BYTES
    assert truncate_utf8("a😀", 4) == "a"


def test_farm_names_that_would_share_a_kernel_counter_are_refused():
    assert "counter" in refused("name", name="web-limit")
    assert "counter" in refused("name", name="web-policy")


# -- numbers in the kernel's ranges ------------------------------------------------------------------


@pytest.mark.parametrize("field", ["new_rtlimit", "new_rtlimit_burst", "rst_rtlimit", "est_connlimit", "log_rtlimit"])
def test_limits_beyond_the_kernels_are_refused(field):
    assert str(KERNEL_INT_MAX) in refused(field, **{field: 2**31})
    services.farm_create(**farm_data(**{field: KERNEL_INT_MAX}))


def test_backend_connection_limit_is_bounded(client):
    farm = create_farm(client)
    body = {"farm": farm["id"], "address": "198.18.1.11", "est_connlimit": 2**31}
    response = client.post("/api/v1/backends/", body, format="json")
    assert response.status_code == 400 and "est_connlimit" in response.json()


@pytest.mark.parametrize("ports", ["٨٠", "8_0", "80,٤٤٣", "8_0-90"])
def test_ports_take_ascii_digits_only(ports):
    assert "0-9" in refused("ports", ports=ports)


def test_source_ports_take_ascii_digits_only():
    assert "port range" in refused("source_ports", mode="snat", source_ports="1024-6553٥")


@pytest.mark.parametrize("port", ["٨٠", "8_0"])
def test_api_integer_fields_take_ascii_digits_only(client, port):
    farm = create_farm(client)
    response = client.post("/api/v1/backends/", {"farm": farm["id"], "address": "198.18.1.11", "port": port})
    assert response.status_code == 400 and "0-9" in response.json()["port"][0]
    assert (
        client.post("/api/v1/backends/", {"farm": farm["id"], "address": "198.18.1.11", "port": "80"}).status_code
        == 201
    )


def test_form_integer_fields_take_ascii_digits_only():
    farm = services.farm_create(**farm_data())
    form = BackendForm(
        data={"address": "198.18.1.11", "port": "٨٠", "weight": "1", "state": "enabled", "priority": "1"}
    )
    form.instance.farm = farm
    assert not form.is_valid() and "0-9" in form.errors["port"][0]


# -- addresses ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "vip, words",
    [
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("169.254.1.1", "link-local"),
        ("fe80::1", "link-local"),
        ("fe80::1%lo", "zone id"),
        ("::ffff:198.18.100.1", "IPv4-mapped"),
        ("255.255.255.255", "broadcast"),
    ],
)
def test_special_vips_are_refused_with_the_reason(client, vip, words):
    response = client.post("/api/v1/farms/", farm_data(vip=vip), format="json")
    assert response.status_code == 400, response.content
    assert words in response.json()["vip"][0]
    assert not Farm.objects.exists()


def test_a_zone_id_is_refused_everywhere_an_address_is_taken(client):
    farm = create_farm(client)
    response = client.post("/api/v1/backends/", {"farm": farm["id"], "address": "2001:2::1%eth0"}, format="json")
    assert response.status_code == 400 and "zone id" in response.json()["address"][0]
    form = FarmForm(data={**farm_data(name="v6", vip="fe80::1%lo"), "state": "up", "persist_ttl": 60,
                          "log_rtlimit": 10, "limit_verdict": "drop", "when_all_down": "reject",
                          "new_rtlimit": 0, "new_rtlimit_burst": 0, "rst_rtlimit": 0, "est_connlimit": 0})  # fmt: skip
    assert not form.is_valid() and "zone id" in form.errors["vip"][0]
    with pytest.raises(ValidationError, match="zone id"):
        services.policy_create(name="p", elements="fe80::/64 fe80::1%lo")


def test_multicast_and_unspecified_backends_and_fallbacks_are_refused():
    farm = services.farm_create(**farm_data())
    with pytest.raises(ValidationError, match="multicast"):
        services.backend_create(farm=farm, address="224.0.0.5")
    with pytest.raises(ValidationError, match="unspecified"):
        services.farm_update(farm=farm, when_all_down="fallback", fallback_address="0.0.0.0")


def test_a_backend_on_its_own_farms_vip_and_port_is_refused():
    farm = services.farm_create(**farm_data(ports="80,443"))
    for port in (None, 80, 443):
        with pytest.raises(ValidationError, match="loop"):
            services.backend_create(farm=farm, address=farm.vip, port=port)
    services.backend_create(farm=farm, address=farm.vip, port=8080)  # another port of the same address
    with pytest.raises(ValidationError, match="loop"):
        services.farm_update(farm=farm, ports="80,443,8080")
    with pytest.raises(ValidationError, match="loop"):
        services.farm_update(farm=farm, when_all_down="fallback", fallback_address=farm.vip, fallback_port=443)


def test_interface_names_linux_refuses_are_refused():
    values = farm_data(mode="dsr", scheduler="hash", sched_param="srcip")
    for name in ("eth0:1", "..", "a b", "a/b", "é"):
        assert "interface name" in refused("interface", **{**values, "interface": name})


def test_overlapping_policy_entries_are_refused():
    with pytest.raises(ValidationError, match="inside"):
        services.policy_create(name="p", elements="198.18.0.0/24 198.18.0.5")
    services.policy_create(name="q", elements="198.18.0.0/25 198.18.0.128/25")


# -- what the worker found the kernel lacks ------------------------------------------------------------


@pytest.fixture
def kernel_without(monkeypatch):
    """Capabilities as a worker on a kernel without flowtables, the h323 helper and reject in nat would
    publish them (the real publication path is tested with the worker in test_l4_features)."""
    probed = {"flowtable": False, "helper-ftp": True, "helper-h323": False, "reject-nat": False}
    monkeypatch.setattr(capabilities, "published", lambda: probed)
    return probed


FLOW = {"flow_offload": True, "mode": "dnat", "when_all_down": "fallback", "fallback_address": "198.18.1.99"}


def test_what_the_kernel_lacks_is_refused_at_save_time(kernel_without):
    assert "no flowtables" in refused("flow_offload", **FLOW)
    assert "not available" in refused("helper", helper="h323")
    assert "reject" in refused("limit_verdict", limit_verdict="reject", **FLOW | {"flow_offload": False})
    assert "fallback" in refused("when_all_down", when_all_down="reject")
    services.farm_create(**farm_data(helper="ftp", when_all_down="fallback", fallback_address="198.18.1.99"))


def test_every_path_refuses_what_the_kernel_lacks_with_the_same_words(client, kernel_without):
    expected = refused("flow_offload", **FLOW)
    api = client.post("/api/v1/farms/", farm_data(**FLOW), format="json")
    assert api.status_code == 400 and api.json()["flow_offload"] == [expected]
    preview = client.post("/api/v1/farms/preview/", farm_data(**FLOW), format="json")
    assert preview.status_code == 400 and preview.json()["flow_offload"] == [expected]
    form = FarmForm(data={**farm_data(**FLOW), "state": "up", "persist_ttl": 60, "log_rtlimit": 10,
                          "limit_verdict": "drop", "new_rtlimit": 0, "new_rtlimit_burst": 0, "rst_rtlimit": 0,
                          "est_connlimit": 0})  # fmt: skip
    assert not form.is_valid() and form.errors["flow_offload"] == [expected]
    document = {"lbweb_config": 1, "policies": [], "farms": [farm_data(**FLOW)]}
    result = config_io.import_config(json.loads(json.dumps(document)))
    assert [(e.field, e.message) for e in result.errors] == [("flow_offload", expected)]
    nftlb = {"farms": [{"name": "web", "family": "ipv4", "virtual-addr": "198.18.100.1", "virtual-ports": "80",
                        "mode": "dnat", "protocol": "tcp", "flow-offload": "on"}]}  # fmt: skip
    result = nftlb_import(document=nftlb)
    assert expected in [e["message"] for e in result.errors], result.errors
    assert not Farm.objects.exists()


def test_nothing_is_refused_for_the_kernel_before_the_worker_published_its_capabilities(monkeypatch):
    monkeypatch.setattr(capabilities, "published", lambda: None)
    services.farm_create(**farm_data(**FLOW, helper="h323"))
