"""The cluster's pure generators and models: golden keepalived.conf and conntrackd.conf that keepalived itself
accepts (``keepalived -t``), the plan the handler reads, the handler's parsing, and the validation in ``clean()``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from django.core.exceptions import ValidationError

from cluster.engine_check import CheckFailed, check_conntrackd, check_keepalived
from cluster.models import Cluster, Node
from compiler.cluster import render
from compiler.cluster.spec import ClusterSpec, FloatingAddress, NodeSpec, PersistenceSpec
from dataplane.cluster import transition
from dataplane.cluster.applier import build_spec
from tests.support import GOLDEN
from tests.support.lab import run_in_netns
from tests.support.lab_ha import node_links, reachable_dir

UPDATE = os.environ.get("LBWEB_UPDATE_GOLDEN") == "1"
ROOT = Path(__file__).resolve().parents[2]

SPEC = ClusterSpec(
    local=NodeSpec("lb1", 150, "198.18.2.11", "198.18.3.1"),
    peer=NodeSpec("lb2", 100, "198.18.2.12", "198.18.3.2"),
    vrid=51,
    interface="eth0",
    sync_interface="sync0",
    state_dir="/var/lib/lbweb/cluster",
    handler=(
        "/usr/bin/env",
        "PYTHONPATH=/opt/lbweb",
        "/opt/lbweb/.venv/bin/python",
        "-m",
        "dataplane.cluster.transition",
        "--plan",
        "/var/lib/lbweb/cluster/plan.json",
    ),  # fmt: skip
    management=FloatingAddress("198.18.2.100/24", "eth0"),
    vrrp_version=3,
    advert_interval=0.5,
    preempt_delay=5,
    track_interfaces=("eth0", "back0"),
    track_processes=("conntrackd",),
    addresses=(FloatingAddress("198.18.2.101/32", "eth0"), FloatingAddress("198.18.1.1/24", "back0")),
    persistence=(PersistenceSpec("web", 3, 300, 4, (("198.18.1.11", "persist-web-7-abcdef"),)),),
    ignore_addresses=("198.18.2.11", "198.18.2.12", "198.18.3.1", "198.18.3.2"),
)
V2 = replace(SPEC, vrrp_version=2, advert_interval=1.0, auth_pass="s3cret", preempt_delay=0, track_processes=())


def golden(name: str, produced: str) -> None:
    path = GOLDEN / name
    if UPDATE or not path.exists():
        path.write_text(produced)
    assert produced == path.read_text(), f"{path} differs: run with LBWEB_UPDATE_GOLDEN=1 after checking the change"


@pytest.mark.parametrize(
    ("name", "produce"),
    [
        ("cluster-keepalived.conf", lambda: render.keepalived_conf(SPEC)),
        ("cluster-keepalived-v2.conf", lambda: render.keepalived_conf(V2)),
        ("cluster-conntrackd.conf", lambda: render.conntrackd_conf(SPEC)),
    ],
)
def test_golden_files(name, produce):
    golden(name, produce())
    assert produce() == produce()  # deterministic


@pytest.fixture
def node_netns():
    """A namespace with the interfaces the spec names (keepalived -t checks that they exist), as on the node."""
    if os.geteuid() != 0:
        pytest.fail("needs root (a network namespace)")
    with node_links("ka") as name:
        yield name


@pytest.fixture
def readable():
    """A directory keepalived's user (lbweb) can read, as the cluster directory is on a node."""
    with reachable_dir("lbweb-keepalived") as work:
        yield work


@pytest.mark.parametrize("spec", [SPEC, V2], ids=["v3", "v2"])
def test_keepalived_and_conntrackd_accept_what_lbweb_writes(readable, node_netns, spec):
    path = readable / "keepalived.conf"
    path.write_text(render.keepalived_conf(spec))
    run_in_netns(node_netns, lambda: check_keepalived(path))  # raises on refusal
    path = readable / "conntrackd.conf"
    path.write_text(render.conntrackd_conf(spec))
    run_in_netns(node_netns, lambda: check_conntrackd(path))


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        (render.keepalived_conf(SPEC).replace("virtual_router_id 51", "virtual_router_id 300"), "VRID"),
        (render.keepalived_conf(replace(SPEC, track_interfaces=("eth9",))), "eth9 doesn't exist"),
    ],
)
def test_keepalived_check_refuses_a_broken_file(readable, node_netns, text, complaint):
    path = readable / "keepalived.conf"
    path.write_text(text)
    with pytest.raises(CheckFailed, match=complaint):
        run_in_netns(node_netns, lambda: check_keepalived(path))


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        (render.conntrackd_conf(SPEC).replace("Interface sync0", "Interface beef"), "symbol 'beef': syntax error"),
        (render.conntrackd_conf(SPEC).replace("Interface sync0", "Interface eth9"), "eth9 is an invalid interface"),
        (  # the file of issue 39: conntrackd only warns, then cannot sync
            render.conntrackd_conf(SPEC)
            .replace("IPv4_address 198.18.3.1", "IPv6_address 2001:2:0:3::1", 1)
            .replace("IPv4_Destination_Address", "IPv6_Destination_Address"),
            "198.18.3.2 is not a valid IPv6 address",
        ),
    ],
)
def test_conntrackd_check_refuses_a_broken_file(readable, node_netns, text, complaint):
    """conntrackd has no test mode: its parser runs, a statistics request finds no daemon, and every warning or
    error but that one is a refusal."""
    path = readable / "conntrackd.conf"
    path.write_text(text)
    with pytest.raises(CheckFailed, match=complaint):
        run_in_netns(node_netns, lambda: check_conntrackd(path))


def test_an_unreadable_file_is_no_pass(tmp_path):
    """keepalived -t exits 0 on a file it cannot read: the check does not take that for a yes."""
    with pytest.raises(CheckFailed, match="missing"):
        check_keepalived(tmp_path / "absent.conf") if os.geteuid() else _absent_as_lbweb(tmp_path)


def _absent_as_lbweb(tmp_path):
    from cluster.engine_check import _keepalived_test

    absent = tmp_path / "absent.conf"
    _keepalived_test(["/usr/sbin/keepalived", "-t", "-f", str(absent)], absent, str(absent))


def test_farm_addresses_are_never_keepalived_s():
    """keepalived adds its virtual_ipaddress before any notify runs: only the management address is there; the
    farms' addresses are the handler's, added after the conntrack commit."""
    text = render.keepalived_conf(SPEC)
    block = text.split("virtual_ipaddress {", 1)[1].split("}", 1)[0]
    assert block.split() == ["198.18.2.100/24", "dev", "eth0"]
    assert "198.18.2.101" not in text and "198.18.1.1/" not in text
    assert "vrrp_notify_fifo_script" in text and "notify_master" not in text
    # the baseline of bench/failover.py (the classic set-up) is the opposite
    assert "198.18.2.101/32 dev eth0" in render.keepalived_conf(replace(SPEC, vips_by_keepalived=True))


def test_conntrackd_syncs_over_the_sync_link_in_ftfw_mode_without_the_nodes_own_addresses():
    text = render.conntrackd_conf(SPEC)
    assert "Mode FTFW" in text and "Interface sync0" in text
    assert "IPv4_address 198.18.3.1" in text and "IPv4_Destination_Address 198.18.3.2" in text
    assert "IPv4_address 198.18.2.11" in text.split("Address Ignore", 1)[1]
    assert "198.18.2.101" not in text  # a farm's VIP is the destination of the connections to synchronise


def test_plan_round_trip():
    assert ClusterSpec.from_dict(json.loads(render.plan(SPEC))) == SPEC


def test_no_django_on_the_failover_path():
    code = (
        "import sys, dataplane.cluster.transition, compiler.cluster.render;"
        " print(sorted(m for m in sys.modules if 'django' in m))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_fifo_lines_the_handler_acts_on():
    assert transition.parse('INSTANCE "lbweb" MASTER 150\n') == "MASTER"
    assert transition.parse('INSTANCE "lbweb" BACKUP 100') == "BACKUP"
    assert transition.parse('GROUP "g" MASTER') is None
    assert transition.parse('INSTANCE "lbweb" $(reboot) 1') is None


def test_persistence_entries_rebuilt_from_conntrack_pairs():
    farm = SPEC.persistence[0]
    lines = transition._persistence_elements(farm, {("198.18.0.2", "198.18.1.11"), ("198.18.0.3", "198.18.1.99")})
    assert lines == ["add element inet lbweb persist-web-7-abcdef { 198.18.0.2 timeout 300s }"]


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"vrrp_version": 2, "advert_interval": 0.5}, "advert_interval"),
        ({"vrrp_version": 3, "auth_pass": "x"}, "auth_pass"),
        ({"interface": "eth0", "sync_interface": "eth0"}, "sync_interface"),
        ({"interface": "bad name"}, "interface"),
        ({"management_address": "198.18.2.100"}, "management_address"),
        ({"extra_addresses": "198.18.1.1/24"}, "extra_addresses"),
        ({"enabled": True, "token": "short"}, "token"),
    ],
)
def test_cluster_clean_names_the_field(values, field):
    cluster = Cluster(
        **{"management_address": "198.18.2.100/24", "interface": "eth0", "sync_interface": "eth1", **values}
    )
    with pytest.raises(ValidationError) as caught:
        cluster.clean()
    assert field in caught.value.message_dict


def test_node_clean_names_the_field():
    node = Node(name="a", address="198.18.2.11", sync_address="198.18.2.11", api_url="http://x", tls_fingerprint="zz")
    with pytest.raises(ValidationError) as caught:
        node.clean()
    assert set(caught.value.message_dict) == {"api_url", "sync_address", "tls_fingerprint"}


@pytest.mark.django_db
def test_spec_from_the_database_floats_vips_snat_sources_and_extra_addresses(tmp_path):
    from farms import services

    web = services.farm_create(name="web", vip="198.18.2.101", protocol="tcp", ports="80", mode="dnat",
                               scheduler="weight", persistence="srcip", persist_ttl=120)  # fmt: skip
    services.backend_create(farm=web, address="198.18.1.11")
    out = services.farm_create(name="out", vip="2001:2:0:100::5", protocol="tcp", ports="443", mode="snat",
                               scheduler="rr", source_addr="2001:2:0:1::100-2001:2:0:1::101")  # fmt: skip
    services.backend_create(farm=out, address="2001:2:0:1::11")
    cluster = Cluster(pk=1, vrid=7, management_address="198.18.2.100/24", interface="eth0", sync_interface="sync0",
                      extra_addresses="198.18.1.1/24 back0", track_interfaces="back0")  # fmt: skip
    a = Node(name="a", address="198.18.2.11", sync_address="198.18.3.1", priority=150, api_url="https://a")
    b = Node(name="b", address="198.18.2.12", sync_address="198.18.3.2", priority=100, api_url="https://b")
    spec = build_spec(cluster, a, b, tmp_path, Path("/opt/lbweb"))
    floating = {f.address: f.interface for f in spec.addresses}
    assert floating["198.18.2.101/32"] == "eth0" and floating["2001:2:0:100::5/128"] == "eth0"
    assert {"2001:2:0:1::100/128", "2001:2:0:1::101/128", "198.18.1.1/24"} <= set(floating)
    assert spec.track_interfaces == ("eth0", "back0") and spec.vrid == 7
    (persist,) = spec.persistence
    assert persist.mark == web.pk and persist.ttl == 120 and persist.sets[0][0] == "198.18.1.11"
    assert spec.handler[-1] == str(tmp_path / "plan.json")
