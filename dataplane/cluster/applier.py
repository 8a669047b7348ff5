"""Worker side: the cluster's files from the database, checked before use, and the addresses kept current.

:func:`build_spec` turns the database into a :class:`~compiler.cluster.spec.ClusterSpec`; :func:`deploy` writes
keepalived's and conntrackd's configuration and the handler's plan into ``LBWEB_CLUSTER_DIR`` as one set: every
changed file is written beside the one in use and checked (``keepalived -t``, conntrackd's parser, the plan read
back), and only when all of them pass is each renamed into place; a refusal leaves every file in use as it was.
The web runs the same checks before it saves a change (``cluster.engine_check``). The supervised wrappers
(``dataplane.cluster.run``) start the daemons once the files exist and reload keepalived when its file changes. While
this node is master, a farm added or removed adds or removes its VIP at once (the handler does it at each
transition).
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path

from django.conf import settings

import compiler
import compiler.names
from cluster.engine_check import CheckFailed, check_conntrackd, check_keepalived
from cluster.models import Cluster, Node
from cluster.specs import cluster_spec
from compiler.cluster import render
from compiler.cluster.spec import ClusterSpec, FloatingAddress, PersistenceSpec
from farms.specs import farm_spec, farms_queryset

log = logging.getLogger("lbweb.cluster")
SNAT_RANGE_LIMIT = 64  # a SNAT source range floats address by address; larger ones are refused here
FILES = ("conntrackd.conf", "plan.json", "keepalived.conf")  # renamed in this order: keepalived reloads last


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
    return cluster_spec(
        cluster, local, peer, state_dir, app,
        addresses=tuple(sorted(floating.values(), key=lambda a: (a.version, ipaddress.ip_interface(a.address)))),
        persistence=tuple(persistence),
    )  # fmt: skip


def render_files(spec: ClusterSpec) -> dict[str, str]:
    """The set of files, or CheckFailed if a value cannot be written (a row saved before its field was checked)."""
    try:
        texts = {
            "keepalived.conf": render.keepalived_conf(spec),
            "conntrackd.conf": render.conntrackd_conf(spec),
            "plan.json": render.plan(spec),
        }
    except ValueError as exc:
        raise CheckFailed("lbweb", "the cluster's files", str(exc)) from exc
    return {name: texts[name] for name in FILES}


def _check_plan(spec: ClusterSpec) -> Callable[[Path], None]:
    def check(path: Path) -> None:
        if ClusterSpec.from_dict(json.loads(path.read_text())) != spec:
            raise CheckFailed("lbweb", path.name, "the plan does not read back as the spec it was written from")

    return check


def replace_all(directory: Path, texts: dict[str, str], checks: dict[str, Callable[[Path], None]]) -> list[str]:
    """Every file that differs is written to ``NAME.new`` and checked; only when all pass is each renamed into
    place (in ``texts``' order). Any refusal removes the new files and raises: every file in use stays as it was."""
    changed = [name for name, text in texts.items() if not _same(directory / name, text)]
    staged = []
    try:
        for name in changed:
            tmp = directory / f"{name}.new"
            staged.append(tmp)
            tmp.write_text(texts[name])
            os.chmod(tmp, 0o600)
            if name in checks:
                checks[name](tmp)
    except BaseException:
        for tmp in staged:
            tmp.unlink(missing_ok=True)
        raise
    for name in changed:
        os.replace(directory / f"{name}.new", directory / name)
    return changed


def _same(path: Path, text: str) -> bool:
    return path.exists() and path.read_text() == text


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
    checks = {"keepalived.conf": check_keepalived, "conntrackd.conf": check_conntrackd, "plan.json": _check_plan(spec)}
    changed = replace_all(directory, render_files(spec), checks)
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
