"""Configuration history: every configuration the kernel held, kept as a version; diffs; restore.

The worker calls :func:`record_applied` after each apply (``farms/tasks.py``). A version is the export
document (``config_io.export_config``) of the whole configuration, taken only when it is exactly what
the kernel holds: the run succeeded, no farm waits for an apply or is isolated, and the configuration
generation has not moved since the run (a change saved meanwhile is recorded by its own apply). A
document equal to the newest version's is not stored again, so health transitions and quiet
reconciles add nothing.

Restoring a version is an import of its document (:func:`config_io.import_config`): the same checks,
the same one-transaction write through the services, one audit event (``restore``, naming the
version) and the usual apply. Its dry run is the preview: what would be created, updated and deleted,
by name.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import logging

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction
from django.db.models import F, Q

from farms.types import Json

from . import config_io
from .models import ApplyRun, ConfigGeneration, ConfigVersion, Farm

log = logging.getLogger("lbweb.versions")


def canonical(document: Json) -> Json:
    """The document without its export time: two exports of one configuration are equal."""
    return {k: v for k, v in document.items() if k != "exported_at"}


def digest_of(document: Json) -> str:
    text = json.dumps(canonical(document), sort_keys=True, cls=DjangoJSONEncoder, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def fully_applied(generation: int) -> bool:
    """The kernel holds every farm as saved, and nothing was saved after ``generation``."""
    if ConfigGeneration.current() != generation:
        return False
    behind = Farm.objects.filter(Q(applied_generation__lt=F("config_generation")) | ~Q(apply_error=""))
    return not behind.exists()


def record_applied(run: ApplyRun | None) -> ConfigVersion | None:
    """Keep the configuration the kernel holds after ``run``, when it is new (see the module's doc).

    The apply stands whatever happens here: a failure to keep the version is logged, never raised."""
    if run is None or not run.ok:
        return None
    try:
        return _record(run)
    except Exception:
        log.exception("configuration version after %s not kept", run)
        return None


def _record(run: ApplyRun) -> ConfigVersion | None:
    with transaction.atomic():
        if not fully_applied(run.generation):
            return None
        document = canonical(config_io.export_config())
        digest = digest_of(document)
        newest = ConfigVersion.objects.only("digest").first()
        if newest is not None and newest.digest == digest:
            return None
        version = ConfigVersion.objects.create(
            generation=run.generation,
            digest=digest,
            document=document,
            apply_run=run,
            farms=len(document["farms"]),
            backends=sum(len(f["backends"]) for f in document["farms"]),
            policies=len(document["policies"]),
        )
        prune()
    log.info("configuration %s kept", version)
    return version


def prune() -> None:
    """Only the newest ``LBWEB_CONFIG_VERSIONS_KEEP`` versions stay (each holds the whole document)."""
    keep = settings.LBWEB_CONFIG_VERSIONS_KEEP
    old = ConfigVersion.objects.values_list("id", flat=True)[keep:]
    ConfigVersion.objects.filter(id__in=list(old)).delete()


# -- diff ---------------------------------------------------------------------------------------


def _by(items: list[Json], key) -> dict[str, Json]:
    return {key(item): item for item in items}


def _backend_key(backend: Json) -> str:
    return f"{backend['address']}:{backend['port']}" if backend.get("port") else str(backend["address"])


def _fields(old: Json, new: Json, skip: tuple[str, ...] = ()) -> list[Json]:
    names = [k for k in old if k not in skip] + [k for k in new if k not in old and k not in skip]
    return [{"field": k, "old": old.get(k), "new": new.get(k)} for k in names if old.get(k) != new.get(k)]


def _compare(old: dict[str, Json], new: dict[str, Json], skip: tuple[str, ...] = ()) -> Json:
    return {
        "added": sorted(set(new) - set(old)),
        "removed": sorted(set(old) - set(new)),
        "changed": [
            {"name": name, "fields": changes}
            for name in sorted(set(old) & set(new))
            if (changes := _fields(old[name], new[name], skip))
        ],
    }


def diff(old: Json, new: Json) -> Json:
    """What changes from ``old`` to ``new``, by name: policies, farms (their fields), and backends
    (``farm/address:port``, their fields); plus a unified diff of the two documents as pretty JSON."""
    old_farms, new_farms = _by(old.get("farms", []), _name), _by(new.get("farms", []), _name)
    backends: Json = {"added": [], "removed": [], "changed": []}
    for farm in sorted(set(old_farms) | set(new_farms)):
        before = _by(old_farms.get(farm, {}).get("backends", []), _backend_key)
        after = _by(new_farms.get(farm, {}).get("backends", []), _backend_key)
        part = _compare(before, after)
        backends["added"] += [f"{farm}/{b}" for b in part["added"]]
        backends["removed"] += [f"{farm}/{b}" for b in part["removed"]]
        backends["changed"] += [{**c, "name": f"{farm}/{c['name']}"} for c in part["changed"]]
    text = difflib.unified_diff(_pretty(old).splitlines(), _pretty(new).splitlines(), "old", "new", lineterm="", n=2)
    return {
        "policies": _compare(_by(old.get("policies", []), _name), _by(new.get("policies", []), _name)),
        "farms": _compare(old_farms, new_farms, skip=("backends",)),
        "backends": backends,
        "text": "\n".join(text),
    }


def _name(item: Json) -> str:
    return item["name"]


def _pretty(document: Json) -> str:
    return json.dumps(canonical(document), indent=2, sort_keys=True, cls=DjangoJSONEncoder)


def is_empty(change: Json) -> bool:
    return not any(change[kind][what] for kind in ("policies", "farms", "backends") for what in change[kind])


# -- restore ------------------------------------------------------------------------------------


def restore(*, version: ConfigVersion, actor=None, dry_run: bool = False) -> config_io.ImportResult:
    """Make the configuration the version's, through the import (all or nothing, audited as ``restore``)."""
    document = {config_io.FORMAT_KEY: config_io.FORMAT_VERSION, **canonical(version.document)}
    return config_io.import_config(
        document,
        actor=actor,
        dry_run=dry_run,
        action="restore",
        object_name=f"version {version.pk}",
        object_id=version.pk,
    )
