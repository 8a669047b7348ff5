"""The worker's side of the cluster (``dataplane.cluster.applier.deploy``), run inside a throw-away network namespace
that has the node's interfaces: the files are written as one set (each checked by its engine, a refusal leaves
every file in use as it was), the node's conntrack tunable is set there, and while this node is master a farm
added or deleted adds or removes its VIP at once; a backup adds nothing."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from cluster.engine_check import CheckFailed
from cluster.models import Cluster
from cluster.services import cluster_update
from dataplane.cluster import applier as engine
from farms import services
from tests.cluster.test_cluster_api import body
from tests.support.lab import inside_netns, run_in_netns
from tests.support.lab_ha import node_links, reachable_dir

pytestmark = pytest.mark.django_db(transaction=True)  # deploy runs in a thread (in the namespace): its own connection


@pytest.fixture
def node_ns():
    if os.geteuid() != 0:
        pytest.fail("needs root (a network namespace)")
    with node_links("cle") as name:
        yield name


@pytest.fixture
def cluster_dir(settings):
    """n1's cluster directory, readable by lbweb (keepalived -t runs as keepalived's user)."""
    with reachable_dir("lbweb-cluster") as work:
        settings.LBWEB_NODE_NAME = "n1"
        settings.LBWEB_CLUSTER_DIR = work / "cluster"
        yield settings.LBWEB_CLUSTER_DIR


def addresses(ns: str) -> str:
    return subprocess.run(["ip", "-n", ns, "-o", "addr"], capture_output=True, text=True, check=True).stdout


def role(directory: Path, state: str) -> None:
    (directory / "role").write_text(json.dumps({"state": state, "since": time.time(), "node": "n1"}))


def test_deploy_writes_checked_files_and_follows_the_farms_while_master(node_ns, cluster_dir):
    values = body()
    nodes = values.pop("nodes")
    with inside_netns(node_ns):  # the web checks the engines' files on this node too
        cluster_update(nodes=nodes, **values)
    web = services.farm_create(name="web", vip="198.18.2.101", protocol="tcp", ports="80", mode="dnat", scheduler="rr")
    services.backend_create(farm=web, address="198.18.1.11")
    cluster_dir.mkdir(mode=0o700)
    role(cluster_dir, "MASTER")

    result = run_in_netns(node_ns, engine.deploy)
    assert set(result["changed"]) == {"keepalived.conf", "conntrackd.conf", "plan.json"}
    assert "198.18.2.101/32" in " ".join(result["added"])
    held = addresses(node_ns)
    assert "198.18.2.101/32" in held and "198.18.1.1/24" in held and "198.18.2.100" not in held  # keepalived's own
    liberal = "/proc/sys/net/netfilter/nf_conntrack_tcp_be_liberal"
    assert (
        subprocess.run(["ip", "netns", "exec", node_ns, "cat", liberal], capture_output=True, text=True).stdout == "1\n"
    )
    assert run_in_netns(node_ns, engine.deploy)["changed"] == []  # nothing moved: nothing written

    api = services.farm_create(name="api", vip="198.18.2.102", protocol="tcp", ports="443", mode="dnat", scheduler="rr")
    run_in_netns(node_ns, engine.deploy)
    assert "198.18.2.102/32" in addresses(node_ns)
    services.farm_delete(farm=api)
    assert run_in_netns(node_ns, engine.deploy)["removed"] == ["198.18.2.102/32"]
    assert "198.18.2.102/32" not in addresses(node_ns) and "198.18.2.101/32" in addresses(node_ns)

    role(cluster_dir, "BACKUP")  # the master's job only
    services.farm_create(name="ftp", vip="198.18.2.103", protocol="tcp", ports="21", mode="dnat", scheduler="rr")
    run_in_netns(node_ns, engine.deploy)
    assert "198.18.2.103" not in addresses(node_ns)

    # A row the web could no longer save (an interface gone since, or a row from before the check): the worker's
    # engines refuse it, and no file of the set is replaced, though conntrackd's and the plan change too.
    before = {name: (cluster_dir / name).read_text() for name in ("keepalived.conf", "conntrackd.conf", "plan.json")}
    Cluster.objects.filter(pk=1).update(track_interfaces="eth9", sync_interface="back0")  # eth9: not on this node
    with pytest.raises(CheckFailed, match="eth9"):
        run_in_netns(node_ns, engine.deploy)
    assert {name: (cluster_dir / name).read_text() for name in before} == before
    assert sorted(p.name for p in cluster_dir.glob("*.new")) == []

    cluster_update(**{**values, "enabled": False})
    assert run_in_netns(node_ns, engine.deploy) == {
        "enabled": False, "removed": ["keepalived.conf", "conntrackd.conf", "plan.json"]
    }  # fmt: skip
