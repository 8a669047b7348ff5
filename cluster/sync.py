"""One configuration for the pair: the master pushes its configuration to the peer's API over TLS.

Why a push and not one shared PostgreSQL: a shared database is a third machine both nodes need, so the pair
would only be as available as it (and PostgreSQL's own HA is another cluster to run); every write and every
apply would cross the network; and a node cut off from it could not even restart its data plane. With a push,
each node keeps its whole configuration in its own database and runs alone when the other is gone; the price
is a copy that can lag, which the heartbeat bounds (it pushes again whatever the peer has not acknowledged).

The payload is the configuration tables row for row, primary keys included: farm ids are the conntrack marks
(``FarmSpec.mark``) that conntrackd synchronises, so they must mean the same farm on both nodes. The peer is
reached at its ``api_url``; its certificate is pinned by SHA-256 (``Node.tls_fingerprint``) since each node's
is self-signed, and both sides present the cluster token. The receiver is ``ClusterSyncView``.
"""

from __future__ import annotations

import hmac
import json
import logging
import warnings

import requests
import urllib3
from django.conf import settings
from django.core import serializers
from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction
from django.utils import timezone
from requests.adapters import HTTPAdapter

from farms.audit import record
from farms.models import Backend, ConfigGeneration, Farm, HealthCheck, Policy, StaticSession

from .models import Cluster, Node
from .services import request_deploy

log = logging.getLogger("lbweb.cluster")

# In dependency order: a row's foreign keys point to rows of earlier models.
CONFIG_MODELS = (Policy, Farm, Backend, StaticSession, HealthCheck)
UNIQUE = {Policy: ("name",), Farm: ("name",), Backend: ("farm", "address", "port"), StaticSession: ("farm", "client")}
SYNC_PATH = "/api/v1/cluster/sync/"
TIMEOUT = (1, 3)  # seconds to connect, to answer: the worker that pushes also applies


def payload() -> dict:
    """This node's configuration and generation, as JSON-ready data."""
    objects = []
    for model in CONFIG_MODELS:
        objects += serializers.serialize("python", model.objects.order_by("pk"))
    return {"generation": ConfigGeneration.current(), "objects": json.loads(json.dumps(objects, cls=DjangoJSONEncoder))}


def authorised(header: str, cluster: Cluster) -> bool:
    """``Authorization: Cluster <token>``, compared in constant time."""
    scheme, _, token = (header or "").partition(" ")
    return bool(cluster.token) and scheme == "Cluster" and hmac.compare_digest(token.encode(), cluster.token.encode())


@transaction.atomic
def apply_sync(config: dict, *, sender: str) -> int:
    """Make this node's configuration tables equal to the master's ``config``; returns the rows written.

    Rows keep their primary keys; local rows the master does not have are deleted (their dependants with them),
    and a local row holding a unique name the master gives another row is removed first. Nothing is validated
    again: the master did, with the same code. Then every farm is marked changed and applied.
    """
    incoming = list(serializers.deserialize("python", config["objects"]))
    by_model: dict = {model: [] for model in CONFIG_MODELS}
    for item in incoming:
        by_model[type(item.object)].append(item)
    for model in reversed(CONFIG_MODELS):
        keep = [item.object.pk for item in by_model[model]]
        model.objects.exclude(pk__in=keep).delete()
    written = 0
    for model in CONFIG_MODELS:
        fields = UNIQUE.get(model)
        for item in by_model[model]:
            obj = item.object
            if fields:
                keys = [f"{name}_id" if name == "farm" else name for name in fields]
                clash = {key: getattr(obj, key) for key in keys}
                model.objects.filter(**clash).exclude(pk=obj.pk).delete()
            item.save()
            written += 1
    generation = ConfigGeneration.bump()
    Farm.objects.update(config_generation=generation)
    from farms.services import request_apply

    request_apply(generation)
    cluster = Cluster.objects.select_for_update().get(pk=1)
    cluster.received_generation = config["generation"]
    cluster.received_at = timezone.now()
    cluster.received_from = sender[:64]
    cluster.save(update_fields=["received_generation", "received_at", "received_from"])
    record(
        actor=None, action="sync", object_type="cluster", object_id=1, object_name=f"from {sender}",
        after={"generation": config["generation"], "rows": written, "from": sender},
    )  # fmt: skip
    request_deploy()
    return written


class PinnedAdapter(HTTPAdapter):
    """Trust exactly the certificate whose SHA-256 is ``fingerprint`` (the peer's own, self-signed)."""

    def __init__(self, fingerprint: str):
        self.fingerprint = fingerprint.replace(":", "").lower()
        super().__init__()

    def init_poolmanager(self, *args, **kwargs):
        kwargs.update(assert_fingerprint=self.fingerprint, cert_reqs="CERT_NONE", assert_hostname=False)
        return super().init_poolmanager(*args, **kwargs)


def session_for(peer: Node) -> requests.Session:
    session = requests.Session()
    session.trust_env = False  # never through a proxy, nor with a CA bundle, from the environment
    if peer.tls_fingerprint:
        session.mount(peer.api_url.rstrip("/") + "/", PinnedAdapter(peer.tls_fingerprint))
        # no CA check (the peer's certificate is self-signed): urllib3 compares the fingerprint instead, and
        # refuses the connection before anything is sent when it differs
        session.verify = False
    return session


def peer_of(cluster: Cluster) -> Node | None:
    return Node.objects.exclude(name=settings.LBWEB_NODE_NAME).first()


def push(status: dict, with_config: bool) -> dict:
    """Send this node's status (and, from the master, its configuration) to the peer; returns its answer."""
    cluster = Cluster.load()
    peer = peer_of(cluster)
    if not cluster.enabled or peer is None:
        return {"skipped": "no cluster"}
    body = {"sender": settings.LBWEB_NODE_NAME, "status": status}
    if with_config:
        body["config"] = payload()
    try:
        with session_for(peer) as session, warnings.catch_warnings():
            warnings.simplefilter("ignore", urllib3.exceptions.InsecureRequestWarning)  # pinned, see session_for
            response = session.post(
                peer.api_url.rstrip("/") + SYNC_PATH,
                json=body,
                headers={"Authorization": f"Cluster {cluster.token}"},
                timeout=TIMEOUT,
            )
        answer = response.json() if response.headers.get("content-type", "").startswith("application/json") else {}
        error = "" if response.ok else f"{response.status_code}: {answer.get('detail') or response.text[:200]}"
    except (requests.RequestException, ValueError) as exc:
        answer, error = {}, f"{type(exc).__name__}: {exc}"[:500]
    updates = {"push_error": error}
    if with_config and not error:
        updates.update(pushed_generation=body["config"]["generation"], pushed_at=timezone.now())
    Cluster.objects.filter(pk=1).update(**updates)
    return {"error": error, **answer}
