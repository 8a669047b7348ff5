"""The only writers of the cluster's tables; each write is audited in its own transaction (``farms.audit.record``).

- :func:`cluster_update`: the operator's settings and the two nodes (validated by the models' ``clean()``, then,
  for an enabled cluster, refused if this node's keepalived or conntrackd would refuse the files it makes).
- :func:`ingest_journal`: the transitions this node's handler wrote to its journal become :class:`Transition`
  rows and audit events (the handler itself never touches the database).
- :func:`apply_sync`: the configuration the master pushed replaces this node's (``cluster.sync``).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from django.conf import settings
from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.db import transaction

from compiler.cluster import render
from farms import syslog_events
from farms.audit import record
from lbweb import enqueue

from . import engine_check
from .models import Cluster, Node, Transition, pair_errors
from .specs import cluster_spec

CLUSTER_FIELDS = (
    "enabled",
    "vrid",
    "vrrp_version",
    "advert_interval",
    "auth_pass",
    "preempt_delay",
    "interface",
    "sync_interface",
    "track_interfaces",
    "track_conntrackd",
    "management_address",
    "extra_addresses",
    "token",
)
NODE_FIELDS = ("name", "address", "sync_address", "api_url", "tls_fingerprint", "priority")


def cluster_state(cluster: Cluster) -> dict:
    """What the audit trail shows (the token never: only whether one is set)."""
    state = {name: getattr(cluster, name) for name in CLUSTER_FIELDS if name != "token"}
    state["token_set"] = bool(cluster.token)
    state["nodes"] = [{name: getattr(n, name) for name in NODE_FIELDS} for n in Node.objects.order_by("name")]
    return state


def request_deploy() -> None:
    """The worker rewrites keepalived's and conntrackd's files after this commits (broker down: the heartbeat
    deploys when it comes back)."""
    enqueue.send_after_commit("cluster.tasks.deploy", what="cluster deploy")


@transaction.atomic
def cluster_update(*, actor=None, nodes: list[dict] | None = None, **values) -> Cluster:
    """Change the cluster's settings and, when given, its two nodes (matched by name; others removed)."""
    unknown = set(values) - set(CLUSTER_FIELDS)
    if unknown:
        raise TypeError(f"unknown field(s): {', '.join(sorted(unknown))}")
    cluster = Cluster.load()
    before = cluster_state(cluster) if cluster.pk and Cluster.objects.filter(pk=1).exists() else None
    for name, value in values.items():
        setattr(cluster, name, value)
    cluster.full_clean()
    cluster.save()
    if nodes is not None:
        if len(nodes) != 2:
            raise ValidationError({"nodes": "A cluster is two nodes."})
        names = [n.get("name") for n in nodes]
        if len(set(names)) != 2:
            raise ValidationError({"nodes": "The two nodes need different names."})
        Node.objects.exclude(name__in=names).delete()
        for i, data in enumerate(nodes):
            node = Node.objects.filter(name=data.get("name")).first() or Node()
            for name, value in data.items():
                if name not in NODE_FIELDS:
                    raise ValidationError({f"nodes[{i}]": f"unknown field {name}"})
                setattr(node, name, value)
            try:
                node.full_clean()
            except ValidationError as exc:
                raise ValidationError({f"nodes[{i}].{k}": v for k, v in exc.message_dict.items()}) from exc
            node.save()
    pair = _pair(nodes)
    if len(pair) == 2:
        errors = pair_errors(cluster, *pair)
        if errors:
            raise ValidationError({_key(name, field, nodes): message for (name, field), message in errors.items()})
    if cluster.enabled:
        local = Node.objects.filter(name=settings.LBWEB_NODE_NAME).exists()
        if len(pair) != 2 or not local:
            raise ValidationError(
                {"nodes": f"An enabled cluster has two nodes, one of them this one ({settings.LBWEB_NODE_NAME})."}
            )
        a, b = pair
        if a.priority == b.priority:
            raise ValidationError({"nodes": "Give the nodes different priorities: the higher one is preferred."})
        refused = engine_refusals(cluster)
        if refused:
            raise ValidationError(refused)
    record(
        actor=actor, action="update", object_type="cluster", object_id=1, object_name=str(cluster),
        before=before, after=cluster_state(cluster),
    )  # fmt: skip
    request_deploy()
    return cluster


def _pair(nodes: list[dict] | None) -> list[Node]:
    """The saved nodes, in the order the caller gave them (errors name ``nodes[i]`` as in its body)."""
    saved = list(Node.objects.all())
    order = [n.get("name") for n in nodes or ()]
    return sorted(saved, key=lambda n: order.index(n.name) if n.name in order else len(order))


def _key(name: str | None, field: str, nodes: list[dict] | None) -> str:
    if name is None:
        return field
    order = [n.get("name") for n in nodes or ()]
    return f"nodes[{order.index(name)}].{field}" if name in order else "nodes"


def engine_refusals(cluster: Cluster) -> dict[str, str | list[str]]:
    """What this node's worker would refuse of an enabled cluster, found the way it finds it: the interfaces it
    does not have (by field), then the same generators and the engines' own parsers on the very files it would
    write (``cluster.engine_check``). ``clean()`` refuses every value the engines cannot take, so the second part
    finding anything is a gap in the grammar: the change is refused all the same, with the engine's words."""
    missing = engine_check.missing_interfaces(cluster)
    if missing:
        return missing
    local = Node.objects.get(name=settings.LBWEB_NODE_NAME)
    peer = Node.objects.exclude(name=settings.LBWEB_NODE_NAME).get()
    spec = cluster_spec(cluster, local, peer, Path(settings.LBWEB_CLUSTER_DIR), Path(settings.BASE_DIR))
    try:
        texts = render.keepalived_conf(spec), render.conntrackd_conf(spec)
    except ValueError as exc:
        return {NON_FIELD_ERRORS: [f"The cluster's files cannot be written: {exc}"]}
    failures = engine_check.check_texts(*texts)
    if failures:
        return {NON_FIELD_ERRORS: [f"This node's {f.engine} refused {f.name}: {f.detail}" for f in failures]}
    return {}


def _state_word(state: str) -> str:
    return {"MASTER": "master", "BACKUP": "backup", "FAULT": "fault", "STOP": "stop"}.get(state, "unknown")


@transaction.atomic
def ingest_journal() -> int:
    """Record the handler's new journal lines (transitions) with their audit events; returns how many."""
    path = settings.LBWEB_CLUSTER_DIR / "transitions.jsonl"
    cluster = Cluster.objects.select_for_update().filter(pk=1).first()
    if cluster is None or not path.exists():
        return 0
    size = path.stat().st_size
    if size < cluster.journal_offset:  # a new journal (the state directory was reset)
        cluster.journal_offset = 0
    count = 0
    with open(path, "rb") as journal:
        journal.seek(cluster.journal_offset)
        for raw in journal:
            if not raw.endswith(b"\n"):
                break  # being written: next time
            cluster.journal_offset += len(raw)
            try:
                entry = json.loads(raw)
            except ValueError:
                continue
            count += 1
            up = next((s for s in entry.get("steps", []) if s["step"] == "addresses"), None)
            transition = Transition.objects.create(
                node=entry["node"][:64],
                at=datetime.fromtimestamp(entry["at"], tz=UTC),
                from_state=_state_word(entry.get("from", "")),
                to_state=_state_word(entry["state"]),
                reason=entry.get("reason", "")[:300],
                steps=entry.get("steps", []),
                addresses_up_ms=(up["ended"] - entry["at"]) * 1000 if up and entry["state"] == "MASTER" else None,
            )
            record(
                actor=None, action="transition", object_type="cluster-node", object_name=transition.node,
                before={"state": transition.from_state},
                after={"state": transition.to_state, "reason": transition.reason, "ok": transition.ok},
            )  # fmt: skip
            syslog_events.cluster(transition)
    cluster.save(update_fields=["journal_offset"])
    return count
