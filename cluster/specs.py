"""The cluster's rows in the generators' words: :func:`cluster_spec` turns the settings and the two nodes into a
:class:`~compiler.cluster.spec.ClusterSpec`.

Read by the worker (``dataplane.cluster.applier`` adds the farms' floating addresses and persistence, which only
the handler's plan carries) and by the web process (``cluster.engine_check``: the files a PUT would produce, checked
before it is saved). keepalived's and conntrackd's files depend on these rows alone, so both processes render the
same two files from them. Imports no kernel I/O and nothing of the worker.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

from compiler.cluster.spec import ClusterSpec, FloatingAddress, NodeSpec, PersistenceSpec

from .models import Cluster, Node


def handler_argv(app: Path, plan: Path) -> tuple[str, ...]:
    """keepalived runs as lbweb with CAP_NET_ADMIN and CAP_NET_RAW (deploy/PROCESSES.md); the handler inherits
    them: addresses, conntrack and nft (NET_ADMIN), gratuitous ARP (NET_RAW). Through ``env``: keepalived resolves
    the script's symlinks, and the venv's python is one (its real file would not see the venv)."""
    return (
        "/usr/bin/env",
        f"PYTHONPATH={app}",
        f"{app}/.venv/bin/python",
        "-m",
        "dataplane.cluster.transition",
        "--plan",
        str(plan),
    )


def cluster_spec(
    cluster: Cluster,
    local: Node,
    peer: Node,
    state_dir: Path,
    app: Path,
    *,
    addresses: tuple[FloatingAddress, ...] = (),
    persistence: tuple[PersistenceSpec, ...] = (),
) -> ClusterSpec:
    """This node's (``local``) spec of the pair; ``addresses`` and ``persistence`` are the farms' (the worker's)."""
    m = ipaddress.ip_interface(cluster.management_address)
    return ClusterSpec(
        local=NodeSpec(local.name, local.priority, local.address, local.sync_address),
        peer=NodeSpec(peer.name, peer.priority, peer.address, peer.sync_address),
        vrid=cluster.vrid,
        interface=cluster.interface,
        sync_interface=cluster.sync_interface,
        state_dir=str(state_dir),
        handler=handler_argv(app, state_dir / "plan.json"),
        management=FloatingAddress(str(m), cluster.interface),
        vrrp_version=cluster.vrrp_version,
        advert_interval=cluster.advert_interval,
        auth_pass=cluster.auth_pass,
        preempt_delay=cluster.preempt_delay,
        track_interfaces=tuple(dict.fromkeys([cluster.interface, *cluster.track_interfaces.split()])),
        track_processes=("conntrackd",) if cluster.track_conntrackd else (),
        addresses=addresses,
        persistence=persistence,
        ignore_addresses=tuple(sorted({local.address, peer.address, local.sync_address, peer.sync_address})),
    )
