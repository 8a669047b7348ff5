"""``manage.py kernel``: what lbweb's table in this namespace holds, compared with the database."""

import json

from django.core.management.base import BaseCommand, CommandError

from farms import dataplane
from farms.nft import compiler
from farms.nft.applier import Kernel


class Command(BaseCommand):
    help = "Compare the kernel's lbweb table with the database (run it where the worker runs)."

    def add_arguments(self, parser):
        parser.add_argument("--check", action="store_true", help="exit with status 1 when they differ")

    def handle(self, *args, check: bool, **options):
        snap = dataplane.localise(dataplane.snapshot())  # DSR farms compile with the MACs seen from here
        isolated = dataplane.isolated_farms()  # the kernel keeps what it held of them: that is what is expected
        compiled = dataplane.hold(snap.compiled(), isolated, dataplane.CACHE.applied())
        state = Kernel().observe()
        matches = dataplane.kernel_matches(state, compiled)
        report = {
            "generation": snap.generation,
            "matches": matches,
            "table_present": state.table_present,
            "base_ok": state.base_digest == compiler.base_digest(),
            "farms": {
                r.name: {
                    "expected": r.digest if dataplane.anchor(r) else None,
                    "kernel": state.farm_digests.get(dataplane.anchor(r)) if dataplane.anchor(r) else None,
                }
                for r in compiled.values()
            },
            "dispatch_entries": state.dispatch_size(),
            "isolated_farms": {str(fid): reason for fid, reason in sorted(isolated.items())},
        }
        self.stdout.write(json.dumps(report, indent=2))
        if check and not matches:
            raise CommandError("the kernel differs from the database")
