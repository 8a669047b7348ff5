"""What the cluster page and ``GET /api/v1/cluster/status/`` show: roles, last transitions, sync, conntrackd."""

from __future__ import annotations

import re
import subprocess
import time
from datetime import UTC, datetime

from django.conf import settings

from farms.models import ConfigGeneration

from .models import Cluster, Node, Transition
from .roles import local_role

COUNTER = re.compile(r"^(connections (?:created|updated|destroyed)):\s+(\d+)\s+failed:\s+(\d+)", re.M)


def conntrackd_counters(directory) -> dict:
    """``conntrackd -s`` over its socket (one request to a daemon, no kernel access): each cache's counters."""
    conf = directory / "conntrackd.conf"
    if not conf.exists():
        return {"available": False, "error": "no cluster configured on this node"}
    try:
        result = subprocess.run(
            ["/usr/sbin/conntrackd", "-C", str(conf), "-s"], capture_output=True, text=True, timeout=2
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"available": False, "error": str(exc)}
    if result.returncode:
        return {"available": False, "error": (result.stderr or result.stdout).strip()[-300:] or "not running"}
    caches = {}
    for name, text in re.findall(r"cache (internal|external):\n(.*?)(?:\n\n|\Z)", result.stdout, re.S):
        active = re.search(r"current active connections:\s+(\d+)", text)
        cache = {"active": int(active.group(1)) if active else 0}
        for label, count, failed in COUNTER.findall(text):
            key = label.split()[1]
            cache[key], cache[f"{key}_failed"] = int(count), int(failed)
        caches[name] = cache
    return {"available": True, **caches}


def cluster_status() -> dict:
    cluster = Cluster.objects.filter(pk=1).first()
    if cluster is None or not cluster.enabled:
        return {"enabled": False, "node": settings.LBWEB_NODE_NAME}
    local = local_role()
    peer_status = cluster.peer_status or {}
    peer_fresh = bool(cluster.peer_seen_at) and time.time() - cluster.peer_seen_at.timestamp() < 10
    nodes = []
    for node in Node.objects.all():
        if node.name == settings.LBWEB_NODE_NAME:
            role, since = str(local["role"]), local["since"]
        else:
            role = peer_status.get("role", "unknown") if peer_fresh else "unknown"
            since = peer_status.get("since") if peer_fresh else None
        since = datetime.fromtimestamp(since, tz=UTC) if isinstance(since, int | float) else None
        nodes.append({"name": node.name, "priority": node.priority, "address": node.address,
                      "api_url": node.api_url, "local": node.name == settings.LBWEB_NODE_NAME,
                      "role": role, "since": since})  # fmt: skip
    masters = [n["name"] for n in nodes if n["role"] == "master"]
    generation = ConfigGeneration.current()
    return {
        "enabled": True,
        "node": settings.LBWEB_NODE_NAME,
        "master": masters[0] if len(masters) == 1 else None,
        "nodes": nodes,
        "peer_seen_at": cluster.peer_seen_at,
        "sync": {
            "generation": generation,
            "pushed_generation": cluster.pushed_generation,
            "pushed_at": cluster.pushed_at,
            "push_error": cluster.push_error,
            "received_generation": cluster.received_generation,
            "received_at": cluster.received_at,
            "received_from": cluster.received_from,
            "in_sync": str(local["role"]) != "master" or cluster.pushed_generation == generation,
        },
        "conntrackd": conntrackd_counters(settings.LBWEB_CLUSTER_DIR),
        "transitions": [
            {
                "node": t.node,
                "at": t.at,
                "from": t.from_state,
                "to": t.to_state,
                "reason": t.reason,
                "ok": t.ok,
                "addresses_up_ms": t.addresses_up_ms,
            }
            for t in Transition.objects.all()[:10]
        ],  # fmt: skip
    }
