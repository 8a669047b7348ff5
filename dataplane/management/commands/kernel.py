"""``manage.py kernel``: what lbweb's tables in this namespace hold, compared with the database.

Two comparisons, both needed for "matches": every unit's objects as the kernel holds them now
against the fingerprint the worker kept when it wrote them (drift: a rule, chain, set, element,
counter or DSR table changed, deleted or added behind lbweb's back), and what the worker wrote
against what the database wants now (pending: a change not applied yet, or a farm that failed).
"""

import json

from django.core.management.base import BaseCommand, CommandError

import compiler
from compiler.units import UnitObjects
from dataplane import fingerprints, isolation
from dataplane.kernel import drift
from dataplane.kernel.applier import Kernel
from dataplane.localise import localise
from dataplane.unit_cache import hold
from farms.models import KernelUnit
from farms.specs import snapshot


class Command(BaseCommand):
    help = "Compare the kernel's lbweb tables with the database (run it where the worker runs)."

    def add_arguments(self, parser):
        parser.add_argument("--check", action="store_true", help="exit with status 1 when they differ")

    def handle(self, *args, check: bool, **options):
        snap = localise(snapshot())  # DSR farms compile with the MACs seen from here
        rows = list(KernelUnit.objects.all())
        applied = {u.key: UnitObjects.from_json(u.objects_json) for u in rows}
        isolated = isolation.isolated_farms()  # the kernel keeps what it held of them: that is what is expected
        compiled = hold(snap.compiled(), isolated, applied)
        names = {u.key: u.name for u in rows} | {k: u.name for k, u in compiled.items()}
        expected = fingerprints.load_fingerprints()
        if drift.SKELETON in expected:
            report = fingerprints.find_drift(applied, expected)
            present, found = report.present, report.units
        else:  # a table written before fingerprints were kept: digests and names only
            state = fingerprints.observe(Kernel())
            present = state.table_present
            found = {} if fingerprints.kernel_matches(state, compiled) else {"table": ["digests or names differ"]}
        pending = compiler.changed_units(applied, compiled)
        failed = {names.get(compiler.farm_key(fid), fid): message for fid, message in snap.failures.items()}
        matches = present and not found and not pending and not failed
        result = {
            "generation": snap.generation,
            "matches": matches,
            "table_present": present,
            "base_ok": Kernel().base_digest() == compiler.base_digest(),
            "drift": [{"unit": k, "name": names.get(k, k), "differences": d} for k, d in sorted(found.items())],
            "pending": [{"unit": k, "name": names.get(k, k)} for k in pending],
            "failed": failed,
            "units": len(applied),
            "isolated_farms": {str(fid): reason for fid, reason in sorted(isolated.items())},
        }
        self.stdout.write(json.dumps(result, indent=2))
        if check and not matches:
            what = [f"{d['name']} ({d['unit']}): {'; '.join(d['differences'])}" for d in result["drift"]]
            what += [f"{p['name']} ({p['unit']}): not applied" for p in result["pending"]]
            raise CommandError("the kernel differs from the database: " + " | ".join(what or ["table missing"]))
