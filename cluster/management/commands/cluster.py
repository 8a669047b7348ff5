"""``manage.py cluster``: set up and look at the HA pair from the node itself.

manage.py cluster fingerprint          this node's web certificate SHA-256 (the peer pins it: Node.tls_fingerprint)
manage.py cluster configure FILE       the cluster's settings and nodes from a JSON file (the body of
                                       PUT /api/v1/cluster/), on each node (audited as the system)
manage.py cluster status               roles, sync state, conntrackd counters, last transitions (JSON)
"""

from __future__ import annotations

import json

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.core.serializers.json import DjangoJSONEncoder


class Command(BaseCommand):
    help = "The HA pair: this node's certificate fingerprint, configure from a JSON file, status."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        sub.add_parser("fingerprint", help="this node's web certificate SHA-256")
        configure = sub.add_parser("configure", help="settings and nodes from a JSON file (PUT /api/v1/cluster/'s)")
        configure.add_argument("file")
        sub.add_parser("status", help="roles, sync, conntrackd counters, transitions")

    def handle(self, *args, action: str, **options):
        if action == "fingerprint":
            from system import tls

            current = tls.current()
            if current is None:
                raise CommandError("no certificate yet: run manage.py ensure_tls")
            self.stdout.write(current.fingerprint_sha256)
        elif action == "configure":
            from cluster.services import cluster_update

            with open(options["file"]) as f:
                body = json.load(f)
            try:
                cluster_update(actor=None, nodes=body.pop("nodes", None), **body)
            except (ValidationError, TypeError) as exc:
                detail = exc.message_dict if hasattr(exc, "error_dict") else str(exc)
                raise CommandError(f"refused: {detail}") from exc
            self.stdout.write("cluster configured")
        else:
            from cluster.status import cluster_status

            self.stdout.write(json.dumps(cluster_status(), indent=2, cls=DjangoJSONEncoder))
