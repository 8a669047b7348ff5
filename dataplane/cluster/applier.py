"""Worker side: the cluster's files from the database, checked before use, and the addresses kept current.

:func:`build_spec` turns the database into a :class:`~compiler.cluster.spec.ClusterSpec`; :func:`deploy` writes
keepalived's and conntrackd's configuration and the handler's plan into ``LBWEB_CLUSTER_DIR`` (each file
replaced in one rename, keepalived's only after ``keepalived -t -f`` accepted it). The supervised wrappers
(``dataplane.cluster.run``) start the daemons once the files exist and reload keepalived when its file changes. While
this node is master, a farm added or removed adds or removes its VIP at once (the handler does it at each
transition).
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import subprocess
from pathlib import Path

from django.conf import settings

import compiler
import compiler.names
from cluster.models import Cluster, Node
from compiler.cluster import render
from compiler.cluster.spec import ClusterSpec, FloatingAddress, NodeSpec, PersistenceSpec
from farms.specs import farm_spec, farms_queryset

log = logging.getLogger("lbweb.cluster")
KEEPALIVED = "/usr/sbin/keepalived"
SNAT_RANGE_LIMIT = 64  # a SNAT source range floats address by address; larger ones are refused here


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


def _host(address: str) -> str:
    return f"{address}/{128 if ipaddress.ip_address(address).version == 6 else 32}"


def _snat_sources(source_addr: str) -> list[str]:
    if not source_addr:
        return []
    first, _, last = source_addr.partition("-")
    start, end = ipaddress.ip_address(first), ipaddress.ip_address(last or first)
    count = int(end) - int(start) + 1
    if count > SNAT_RANGE_LIMIT:
        raise ValueError(f"a SNAT range of {count} addresses cannot float (at most {SNAT_RANGE_LIMIT})")
    return [str(start + i) for i in range(count)]


def _route_interface(address: str, default: str) -> str:
    """The interface this node reaches ``address`` through (where a SNAT source must live), or ``default``."""
    try:
        from pyroute2 import IPRoute

        with IPRoute() as ipr:
            routes = ipr.route("get", dst=address)
            index = routes[0].get_attr("RTA_OIF")
            return ipr.get_links(index)[0].get_attr("IFLA_IFNAME")
    except Exception:
        return default


def build_spec(cluster: Cluster, local: Node, peer: Node, state_dir: Path, app: Path) -> ClusterSpec:
    floating: dict[str, FloatingAddress] = {}
    persistence = []
    for farm in farms_queryset():
        spec = farm_spec(farm)
        floating.setdefault(spec.vip, FloatingAddress(_host(spec.vip), cluster.interface))
        if spec.mode == "snat" and spec.backends:
            out = _route_interface(spec.backends[0].address, cluster.interface)
            for source in _snat_sources(spec.source_addr):
                floating.setdefault(source, FloatingAddress(_host(source), out))
        if spec.persistence == ("srcip",):
            persistence.append(
                PersistenceSpec(
                    farm=spec.name, mark=spec.mark, ttl=spec.persist_ttl, family=spec.family,
                    sets=tuple((b.address, compiler.names.persist_set_name(spec, b.id)) for b in spec.backends),
                )
            )  # fmt: skip
    for address, interface in cluster.floating_extra():
        ip = str(ipaddress.ip_interface(address).ip)
        floating.setdefault(ip, FloatingAddress(address, interface))
    m = ipaddress.ip_interface(cluster.management_address)
    plan = state_dir / "plan.json"
    return ClusterSpec(
        local=NodeSpec(local.name, local.priority, local.address, local.sync_address),
        peer=NodeSpec(peer.name, peer.priority, peer.address, peer.sync_address),
        vrid=cluster.vrid,
        interface=cluster.interface,
        sync_interface=cluster.sync_interface,
        state_dir=str(state_dir),
        handler=handler_argv(app, plan),
        management=FloatingAddress(str(m), cluster.interface),
        vrrp_version=cluster.vrrp_version,
        advert_interval=cluster.advert_interval,
        auth_pass=cluster.auth_pass,
        preempt_delay=cluster.preempt_delay,
        track_interfaces=tuple(dict.fromkeys([cluster.interface, *cluster.track_interfaces.split()])),
        track_processes=("conntrackd",) if cluster.track_conntrackd else (),
        addresses=tuple(sorted(floating.values(), key=lambda a: (a.version, ipaddress.ip_interface(a.address)))),
        persistence=tuple(persistence),
        ignore_addresses=tuple(sorted({local.address, peer.address, local.sync_address, peer.sync_address})),
    )


class CheckFailed(Exception):
    pass


def check_keepalived(path: Path) -> None:
    """``keepalived -t -f``: refuse a file keepalived would refuse, before it replaces the one in use.

    As keepalived's user (lbweb, the worker's too): keepalived 2.2.7 run as root with a ``vrrp_script`` in its file
    ends its own test run with SIGTERM, so root (the test suite) checks a copy lbweb can read, as lbweb. keepalived
    -t also exits 0 on a file it cannot read ("Config files missing"): that is a refusal here.
    """
    if os.geteuid() != 0:
        return _keepalived_test([KEEPALIVED, "-t", "-f", str(path)], path)
    import tempfile

    with tempfile.NamedTemporaryFile("w", prefix="lbweb-keepalived-", suffix=".conf") as copy:
        copy.write(path.read_text())
        copy.flush()
        os.chmod(copy.name, 0o644)
        privdrop = str(Path(settings.BASE_DIR) / "deploy" / "privdrop")
        _keepalived_test([privdrop, "lbweb", "", KEEPALIVED, "-t", "-f", copy.name], path)


def _keepalived_test(argv: list[str], path: Path) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=20)
    output = (result.stdout + result.stderr).strip()
    if result.returncode or "missing" in output.lower():
        raise CheckFailed(f"keepalived -t refused {path.name}: {output[-800:] or f'exit status {result.returncode}'}")


def _replace(path: Path, text: str, check=None) -> bool:
    if path.exists() and path.read_text() == text:
        return False
    tmp = path.with_name(path.name + ".new")
    tmp.write_text(text)
    os.chmod(tmp, 0o600)
    try:
        if check:
            check(tmp)
    except Exception:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)
    return True


def current_spec() -> ClusterSpec | None:
    cluster = Cluster.objects.filter(pk=1, enabled=True).first()
    if cluster is None:
        return None
    local = Node.objects.filter(name=settings.LBWEB_NODE_NAME).first()
    peer = Node.objects.exclude(name=settings.LBWEB_NODE_NAME).first()
    if local is None or peer is None:
        return None
    return build_spec(cluster, local, peer, Path(settings.LBWEB_CLUSTER_DIR), Path(settings.BASE_DIR))


SYSCTLS = {
    # A committed conntrack entry carries no TCP window, and one left from an earlier term as master keeps a stale
    # one: without this, their packets are "invalid" to the new master and the connections hang.
    "/proc/sys/net/netfilter/nf_conntrack_tcp_be_liberal": "1",
}


def ensure_sysctls() -> list[str]:
    """What a cluster node needs of the kernel (the worker may write kernel tunables; CAP_NET_ADMIN in its netns)."""
    failed = []
    for path, value in SYSCTLS.items():
        try:
            if Path(path).read_text().strip() != value:
                Path(path).write_text(value + "\n")
        except OSError as exc:
            log.warning("cannot set %s (%s)", path, exc)
            failed.append(path)
    return failed


def deploy() -> dict:
    """Bring the files in ``LBWEB_CLUSTER_DIR`` to the database's cluster; with no cluster, remove them (the
    wrappers then stop keepalived and conntrackd, and the addresses are given up)."""
    directory = Path(settings.LBWEB_CLUSTER_DIR)
    spec = current_spec()
    names = ("keepalived.conf", "conntrackd.conf", "plan.json")
    if spec is None:
        removed = [n for n in names if (directory / n).exists()]
        for name in removed:
            (directory / name).unlink()
        return {"enabled": False, "removed": removed}
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    ensure_sysctls()
    old = _load_plan(directory / "plan.json")
    changed = []
    if _replace(directory / "conntrackd.conf", render.conntrackd_conf(spec)):
        changed.append("conntrackd.conf")
    if _replace(directory / "plan.json", render.plan(spec)):
        changed.append("plan.json")
    if _replace(directory / "keepalived.conf", render.keepalived_conf(spec), check_keepalived):
        changed.append("keepalived.conf")
    moved = follow_addresses(old, spec) if "plan.json" in changed else {}
    return {"enabled": True, "changed": changed, **moved}


def _load_plan(path: Path) -> ClusterSpec | None:
    try:
        return ClusterSpec.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError, KeyError):
        return None


def follow_addresses(old: ClusterSpec | None, new: ClusterSpec) -> dict:
    """While master: add the new plan's addresses, remove those it dropped (a farm deleted)."""
    from cluster.roles import local_role

    from .transition import Handler

    if local_role()["role"] != "master":
        return {}
    gone = set(old.addresses) - set(new.addresses) if old else set()
    handler = Handler(Path(new.plan_path))
    added = handler.add_addresses(new)
    removed = handler.remove_addresses(_with_addresses(new, tuple(gone))) if gone else []
    return {"added": added, "removed": removed}


def _with_addresses(spec: ClusterSpec, addresses: tuple[FloatingAddress, ...]) -> ClusterSpec:
    from dataclasses import replace

    return replace(spec, addresses=addresses)
