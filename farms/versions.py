"""Configuration history: every configuration the kernel held, kept as a version; diffs; restore.

The worker calls :func:`record_applied` after each apply (``dataplane/tasks.py``). A version is the export
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
from typing import Any

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction
from django.db.models import F, Q

from compiler.types import Json
from lbweb.db import read_snapshot

from . import config_io
from .models import ApplyRun, ConfigGeneration, ConfigPart, ConfigVersion, Farm

log = logging.getLogger("lbweb.versions")


def canonical(document: Json) -> Json:
    """The document without its export time: two exports of one configuration are equal."""
    return {k: v for k, v in document.items() if k != "exported_at"}


def digest_of(document: Json) -> str:
    text = json.dumps(canonical(document), sort_keys=True, cls=DjangoJSONEncoder, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def part_digest(content: Any) -> str:
    text = json.dumps(content, sort_keys=True, cls=DjangoJSONEncoder, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def fully_applied(generation: int) -> bool:
    """The kernel holds every farm as saved, and nothing was saved after ``generation``."""
    if ConfigGeneration.current() != generation:
        return False
    behind = Farm.objects.filter(Q(applied_generation__lt=F("config_generation")) | ~Q(apply_error=""))
    return not behind.exists()


class FarmParts:
    """The worker's memory of each farm's part (its export entry's digest), so that a version after a
    change of one farm exports that farm alone: a whole export at 10,000 farms took 1.6-1.9 s, and
    ran after every apply, in front of the next one (``bench/versions.py``).

    A farm is exported again when its configuration generation is newer than the last version's: every
    service that changes what the export shows (the farm's fields and policies, its backends and static
    sessions, a policy it uses) gives the farm a new generation, the same test the worker's compile
    cache makes, so a version says what the kernel got. New farms are exported, deleted ones dropped.
    Empty at start: the worker's first version exports every farm; a generation counter that went back
    (a database restored under a running worker) empties it again."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.farms: dict[int, tuple[str, str, int]] = {}  # id -> (name, part digest, backends)
        self.seen = -1  # every remembered part is of this configuration generation or newer
        self.exported = 0  # farm entries exported by the last call (for tests and the log)

    def backends(self) -> int:
        return sum(farm[2] for farm in self.farms.values())

    def manifest(self) -> tuple[Json, dict[str, Any]]:
        """(this configuration's manifest, the parts it needs by digest, at least every part not stored
        before by this process). Costs the changed farms' export plus one list of farm ids."""
        current = ConfigGeneration.current()
        if current < self.seen:
            self.reset()
        ids = set(Farm.objects.values_list("id", flat=True))
        stale = ids - self.farms.keys()
        if self.seen >= 0:
            stale |= set(Farm.objects.filter(config_generation__gt=self.seen).values_list("id", flat=True))
        parts: dict[str, Any] = {}
        for fid, entry in (config_io.farm_entries(sorted(stale)) if stale else {}).items():
            digest = part_digest(entry)
            parts[digest] = entry
            self.farms[fid] = (entry["name"], digest, len(entry["backends"]))
        for gone in self.farms.keys() - ids:
            del self.farms[gone]
        self.seen = current
        self.exported = len(stale)
        policies = config_io.export_policies()
        parts[part_digest(policies)] = policies
        sections = {}
        for key, content in config_io.export_sections().items():
            sections[key] = part_digest(content)
            parts[sections[key]] = content
        manifest = {
            "policies": part_digest(policies),
            "farms": [digest for _name, digest, _n in sorted(self.farms.values())],
            "sections": sections,
        }
        return manifest, parts


PARTS = FarmParts()


def manifest_digests(manifest: Json) -> set[str]:
    return {manifest["policies"], *manifest["farms"], *manifest["sections"].values()}


def assemble(manifest: Json) -> Json:
    """The (canonical) export document a manifest describes."""
    wanted = sorted(manifest_digests(manifest))
    parts: dict[str, Any] = {}
    for start in range(0, len(wanted), 500):
        parts.update(ConfigPart.objects.filter(digest__in=wanted[start : start + 500]).values_list("digest", "content"))
    missing = set(wanted) - set(parts)
    if missing:
        raise ConfigPart.DoesNotExist(f"configuration parts missing: {', '.join(sorted(missing)[:5])}")
    return {
        config_io.FORMAT_KEY: config_io.FORMAT_VERSION,
        "policies": parts[manifest["policies"]],
        "farms": [parts[d] for d in manifest["farms"]],
        **{key: parts[d] for key, d in sorted(manifest["sections"].items())},
    }


def document_of(version: ConfigVersion) -> Json:
    """The export document of a configuration version: put together from its parts (a version kept before parts
    existed holds it whole)."""
    return version.whole if version.manifest is None else assemble(version.manifest)


def record_applied(run: ApplyRun | None) -> ConfigVersion | None:
    """Keep the configuration the kernel holds after ``run``, when it is new (see the module's doc).

    The apply stands whatever happens here: a failure to keep the version is logged, never raised."""
    if run is None or not run.ok:
        return None
    try:
        return _record(run)
    except Exception:
        PARTS.reset()  # what it remembers may not have been stored
        log.exception("configuration version after %s not kept", run)
        return None


def _record(run: ApplyRun) -> ConfigVersion | None:
    with read_snapshot():  # the export reads every farm: web writes must not wait for it (lbweb/db.py)
        if not fully_applied(run.generation):
            return None
        manifest, parts = PARTS.manifest()
    digest = hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()
    with transaction.atomic():
        newest = ConfigVersion.objects.only("digest").first()
        if newest is not None and newest.digest == digest:
            return None
        ConfigPart.objects.bulk_create(
            [ConfigPart(digest=d, content=c) for d, c in parts.items()], ignore_conflicts=True, batch_size=500
        )
        version = ConfigVersion.objects.create(
            generation=run.generation,
            digest=digest,
            manifest=manifest,
            apply_run=run,
            farms=len(manifest["farms"]),
            backends=PARTS.backends(),
            policies=len(parts[manifest["policies"]]),
        )
        prune()
    log.info("configuration %s kept (%d farm(s) exported)", version, PARTS.exported)
    return version


PARTS_SLACK = 1000


def prune() -> None:
    """Only the newest ``LBWEB_CONFIG_VERSIONS_KEEP`` versions stay; parts no version holds any more go
    once they outnumber the parts of the newest version twice over (reading every manifest is the cost
    of a collection: seldom, not after every version)."""
    keep = settings.LBWEB_CONFIG_VERSIONS_KEEP
    old = ConfigVersion.objects.values_list("id", flat=True)[keep:]
    deleted, _ = ConfigVersion.objects.filter(id__in=list(old)).delete()
    newest = ConfigVersion.objects.only("farms").first()
    if deleted and newest is not None and ConfigPart.objects.count() > 2 * newest.farms + PARTS_SLACK:
        collect_parts()


def collect_parts() -> int:
    """Delete the parts no version holds; how many."""
    used: set[str] = set()
    for manifest in ConfigVersion.objects.exclude(manifest=None).values_list("manifest", flat=True).iterator():
        used |= manifest_digests(manifest)
    unused = [d for d in ConfigPart.objects.values_list("digest", flat=True).iterator() if d not in used]
    for start in range(0, len(unused), 500):
        ConfigPart.objects.filter(digest__in=unused[start : start + 500]).delete()
    return len(unused)


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
    document = {config_io.FORMAT_KEY: config_io.FORMAT_VERSION, **canonical(document_of(version))}
    return config_io.import_config(
        document,
        actor=actor,
        dry_run=dry_run,
        action="restore",
        object_name=f"version {version.pk}",
        object_id=version.pk,
    )
