"""The whole configuration as one JSON document: export (backup, move) and import (restore), all or nothing.

An import makes the configuration equal to the document: farms, backends and policies are matched by
name (backends by address and port within their farm); matched ones are updated in place (keeping their
ids, so their conntrack marks and history), new ones created, the others deleted. A field the document
leaves out takes the model's default. Everything goes through the services (the models' ``clean()``
validates every object) inside one transaction; every error is collected with its location, and if
there is any, the transaction is rolled back: nothing changes.

Other apps put their part of the appliance's configuration into the same document with
:func:`register_section`; it then rides along in every export, import, configuration version and restore.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models, transaction
from django.utils import timezone

from compiler.types import Json

from . import audit, services
from .models import Backend, Farm, Policy, StaticSession

FORMAT_KEY = "lbweb_config"
FORMAT_VERSION = 1
SESSION_FIELDS = ("client", "backend")


def _values(obj, fields: tuple[str, ...]) -> Json:
    return {name: getattr(obj, name) for name in fields}


@dataclass(frozen=True)
class Section:
    """Another app's part of the configuration document (HTTP farms, the cluster, the network...).

    ``export()`` returns its part as JSON. ``load(data, result)`` makes the app's configuration equal to
    ``data`` through the app's services, inside the import's transaction (audited as the one import or
    restore, never one event per object), and reports each problem with
    ``result.errors.append(ImportError_(location, field, message))`` and each object with
    ``result.count(kind, "created"|"updated"|"deleted"|"unchanged", name)``. A document without the key
    (one exported before the app had a section) leaves that part as it is.
    """

    key: str
    export: Callable[[], Any]
    load: Callable[[Any, ImportResult], None]


SECTIONS: dict[str, Section] = {}


def register_section(key: str, export: Callable[[], Any], load: Callable[[Any, ImportResult], None]) -> None:
    """Put an app's part into every export, import, configuration version and restore (from ``ready()``)."""
    if key in (FORMAT_KEY, "exported_at", "policies", "farms"):
        raise ValueError(f"'{key}' is the farms' own part of the document")
    SECTIONS[key] = Section(key, export, load)


def export_config() -> Json:
    """Every policy and farm (with its backends and static sessions), in a stable order.

    Flat reads, one query per kind grouped in Python: Django's prefetching costs ~0.8 ms per farm here
    (a cloned queryset per farm and relation), 8 s at 10,000 farms; ``bench/versions.py`` measures it."""
    entries = farm_entries(None)
    return {
        FORMAT_KEY: FORMAT_VERSION,
        "exported_at": timezone.now().isoformat(timespec="seconds"),
        "policies": export_policies(),
        "farms": sorted(entries.values(), key=lambda entry: entry["name"]),
        **export_sections(),
    }


def export_policies() -> list[Json]:
    return list(Policy.objects.order_by("name").values(*services.POLICY_FIELDS))


def export_sections() -> Json:
    return {key: section.export() for key, section in sorted(SECTIONS.items())}


def farm_entries(ids: list[int] | None) -> dict[int, Json]:
    """The export entries of the farms ``ids`` (None: every farm), by id. The configuration
    history exports only the farms that changed since its last version (``versions.py``)."""
    from collections import defaultdict

    def only(queryset, field: str):
        return queryset if ids is None else queryset.filter(**{f"{field}__in": ids})

    backends: dict[int, list[Json]] = defaultdict(list)
    for row in only(Backend.objects, "farm_id").values("farm_id", *services.BACKEND_FIELDS):
        backends[row.pop("farm_id")].append(row)
    policies: dict[int, list[str]] = defaultdict(list)
    for farm_id, name in only(Farm.policies.through.objects, "farm_id").values_list("farm_id", "policy__name"):
        policies[farm_id].append(name)
    sessions: dict[int, list[Json]] = defaultdict(list)
    for farm_id, client, address, port in only(StaticSession.objects, "farm_id").values_list(
        "farm_id", "client", "backend__address", "backend__port"
    ):
        sessions[farm_id].append({"client": client, "backend": {"address": address, "port": port}})
    return {
        farm["id"]: {
            **{name: farm[name] for name in services.FARM_FIELDS},
            "policies": sorted(policies[farm["id"]]),
            "backends": sorted(backends[farm["id"]], key=lambda b: (b["address"], b["port"] or 0)),
            "static_sessions": sorted(sessions[farm["id"]], key=lambda s: s["client"]),
        }
        for farm in only(Farm.objects, "id").values("id", *services.FARM_FIELDS)
    }


@dataclass
class ImportError_:
    """One problem, where it is: ``farms[2].backends[0]`` and the field (``__all__`` for the object)."""

    location: str
    field: str
    message: str

    def to_json(self) -> Json:
        return {"location": self.location, "field": self.field, "message": self.message}


@dataclass
class ImportResult:
    ok: bool = True
    dry_run: bool = False
    errors: list[ImportError_] = field(default_factory=list)
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    changes: dict[str, dict[str, list[str]]] = field(default_factory=dict)

    def count(self, kind: str, what: str, name: str = "") -> None:
        """One object of ``kind`` (farms, backends, policies) created, updated, deleted or unchanged;
        ``name`` lists it under ``changes`` (a backend as ``farm/address:port``) so a dry run says which."""
        bucket = self.counts.setdefault(kind, {"created": 0, "updated": 0, "deleted": 0, "unchanged": 0})
        bucket[what] += 1
        if what != "unchanged":
            self.changes.setdefault(kind, {"created": [], "updated": [], "deleted": []})[what].append(name)

    def to_json(self) -> Json:
        return {
            "ok": self.ok,
            "dry_run": self.dry_run,
            "errors": [e.to_json() for e in self.errors],
            "counts": self.counts,
            "changes": self.changes,
        }


def validation_errors(location: str, exc: ValidationError) -> list[ImportError_]:
    """The errors of a refused write, located (each message once)."""
    if hasattr(exc, "error_dict"):  # a field check and clean() may word the same problem alike: once
        return [
            ImportError_(location, name, msg) for name, msgs in exc.message_dict.items() for msg in dict.fromkeys(msgs)
        ]
    return [ImportError_(location, "__all__", msg) for msg in dict.fromkeys(exc.messages)]


class _Importer:
    def __init__(self, actor) -> None:
        self.actor = actor
        self.result = ImportResult()

    # -- errors ---------------------------------------------------------------------------

    def error(self, location: str, field_name: str, message: str) -> None:
        self.result.errors.append(ImportError_(location, field_name, message))

    def attempt(self, location: str, write) -> bool:
        """Run one service call in a savepoint; on a validation error record it and go on."""
        try:
            with transaction.atomic():
                write()
            return True
        except ValidationError as exc:
            self.result.errors.extend(validation_errors(location, exc))
            return False

    # -- structure ------------------------------------------------------------------------

    def items(
        self, document: Json, key: str, allowed: set[str], required: tuple[str, ...], model=None, parts=None
    ) -> list[tuple[str, Json]]:
        raw = document.get(key, [])
        if not isinstance(raw, list):
            self.error(key, "__all__", f"'{key}' must be a list.")
            return []
        good = []
        for index, item in enumerate(raw):
            location = f"{key}[{index}]"
            ok = self.check_object(location, item, allowed, required, model)
            if parts is not None and isinstance(item, dict):
                ok = parts(location, item) and ok  # every error is reported, not only the first object's
            if ok:
                good.append((location, item))
        return good

    def check_object(self, location: str, item: Any, allowed: set[str], required: tuple[str, ...], model=None) -> bool:
        if not isinstance(item, dict):
            self.error(location, "__all__", "Must be an object.")
            return False
        ok = True
        for name in sorted(set(item) - allowed):  # reported; the rest of the object is still checked
            self.error(location, name, f"Unknown field '{name}'.")
        for name in required:
            if item.get(name) in (None, ""):
                self.error(location, name, "This field is required.")
                ok = False
        if model is not None:
            for name, message in type_errors(model, item):
                self.error(location, name, message)
                ok = False
        return ok

    def check_farm_parts(self, location: str, item: Json) -> bool:
        """The lists inside a farm, typed before anything is matched by them (names, addresses, ports)."""
        ok = True
        names = item.get("policies", [])
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            self.error(location, "policies", "Must be a list of policy names.")
            ok = False
        for key, model in (("backends", Backend), ("static_sessions", None)):
            entries = item.get(key, [])
            if not isinstance(entries, list):
                self.error(location, key, f"'{key}' must be a list.")
                ok = False
                continue
            for index, entry in enumerate(entries):
                where = f"{location}.{key}[{index}]"
                if not isinstance(entry, dict):
                    continue  # reported with the farm's other objects, once it is saved
                if model is None:
                    ok = self.check_session(where, entry) and ok
                for name, message in type_errors(model, entry) if model is not None else ():
                    self.error(where, name, message)
                    ok = False
        return ok

    def check_session(self, location: str, entry: Json) -> bool:
        ref = entry.get("backend")
        ok = isinstance(entry.get("client", ""), str)
        if not ok:
            self.error(location, "client", "Must be a string.")
        if ref is not None and not (
            isinstance(ref, dict)
            and isinstance(ref.get("address"), str)
            and (ref.get("port") is None or _is_integer(ref.get("port")))
        ):
            self.error(location, "backend", 'Must name a backend of this farm: {"address": ..., "port": ...}.')
            ok = False
        return ok

    def duplicates(self, entries: list[tuple[str, Json]], key, what: str) -> list[tuple[str, Json]]:
        seen: dict[Any, str] = {}
        unique = []
        for location, item in entries:
            k = key(item)
            if k in seen:
                self.error(location, "name", f"{what} {k} appears twice (also at {seen[k]}).")
            else:
                seen[k] = location
                unique.append((location, item))
        return unique

    # -- objects --------------------------------------------------------------------------

    @staticmethod
    def with_defaults(model, fields: tuple[str, ...], item: Json) -> Json:
        return {n: item[n] if n in item else model._meta.get_field(n).get_default() for n in fields}

    def policies(self, entries: list[tuple[str, Json]]) -> dict[str, Policy]:
        existing = {p.name: p for p in Policy.objects.all()}
        for location, item in entries:
            values = self.with_defaults(Policy, services.POLICY_FIELDS, item)
            policy = existing.get(item["name"])
            if policy is None:
                if self.attempt(location, lambda v=values: services.policy_create(**v)):
                    self.result.count("policies", "created", item["name"])
            elif _values(policy, services.POLICY_FIELDS) == values:
                self.result.count("policies", "unchanged")
            elif self.attempt(location, lambda p=policy, v=values: services.policy_update(policy=p, **v)):
                self.result.count("policies", "updated", item["name"])
        return {p.name: p for p in Policy.objects.all()}

    def farm_policies(self, location: str, item: Json, by_name: dict[str, Policy]) -> list[Policy] | None:
        names = item.get("policies", [])
        if not isinstance(names, list):
            self.error(location, "policies", "Must be a list of policy names.")
            return None
        missing = [n for n in names if n not in by_name]
        for name in missing:
            self.error(location, "policies", f"No policy named '{name}' (neither here nor in the document).")
        return None if missing else [by_name[n] for n in names]

    def farms(self, entries: list[tuple[str, Json]], by_name: dict[str, Policy]) -> list[tuple[str, Json, Farm]]:
        """Farms first without their backends; a farm refused only because another one has not moved
        yet (a port handed over) is tried again after the others, until nothing more succeeds.
        The backends of a farm that cannot be saved are still checked on their own."""
        existing = {f.name: f for f in Farm.objects.prefetch_related("policies", "backends")}
        for farm in existing.values():
            if farm.name not in {item["name"] for _, item in entries}:
                services.farm_delete(farm=farm)
                self.result.count("farms", "deleted", farm.name)
        pending = []
        for location, item in entries:
            policies = self.farm_policies(location, item, by_name)
            if policies is None:
                self.backends_alone(location, item)
                continue
            farm = existing.get(item["name"])
            if farm is not None:
                self.drop_missing_backends(farm, item)
            pending.append((location, item, farm, policies))
        done: list[tuple[str, Json, Farm]] = []
        while pending:
            failed, errors = [], []
            for location, item, farm, policies in pending:
                saved, problems = self.save_farm(location, item, farm, policies)
                if saved is None:
                    failed.append((location, item, farm, policies))
                    errors.extend(problems)
                else:
                    done.append((location, item, saved))
            if len(failed) == len(pending):
                self.result.errors.extend(errors)
                for location, item, _farm, _policies in failed:
                    self.backends_alone(location, item)
                break
            pending = failed
        return done

    def save_farm(self, location: str, item: Json, farm: Farm | None, policies: list[Policy]):
        values = self.with_defaults(Farm, services.FARM_FIELDS, item)
        try:
            with transaction.atomic():
                if farm is None:
                    saved = services.farm_create(policies=policies, **values)
                    self.result.count("farms", "created", saved.name)
                elif _values(farm, services.FARM_FIELDS) == values and set(farm.policies.all()) == set(policies):
                    saved = farm
                    self.result.count("farms", "unchanged")
                else:
                    saved = services.farm_update(farm=farm, policies=policies, **values)
                    self.result.count("farms", "updated", saved.name)
            return saved, []
        except ValidationError as exc:
            if farm is not None:
                farm.refresh_from_db()  # the failed attempt left its values on the instance
            return None, validation_errors(location, exc)

    @staticmethod
    def backend_key(item: Json) -> tuple[str, Any]:
        return (str(item.get("address")), item.get("port"))

    def drop_missing_backends(self, farm: Farm, item: Json) -> None:
        wanted = {self.backend_key(b) for b in item.get("backends", []) if isinstance(b, dict)}
        for backend in list(farm.backends.all()):
            if (backend.address, backend.port) not in wanted:
                services.backend_delete(backend=backend)
                self.result.count("backends", "deleted", _backend_name(farm.name, backend.address, backend.port))

    def backends(self, location: str, item: Json, farm: Farm) -> None:
        entries = self.items(item, "backends", set(services.BACKEND_FIELDS), ("address",))
        entries = [(f"{location}.{loc}", b) for loc, b in entries]
        entries = self.duplicates(entries, self.backend_key, "Backend")
        existing = {(b.address, b.port): b for b in Backend.objects.filter(farm=farm)}
        for loc, b in entries:
            values = self.with_defaults(Backend, services.BACKEND_FIELDS, b)
            backend = existing.get(self.backend_key(b))
            name = _backend_name(farm.name, values["address"], values["port"])
            if backend is None:
                if self.attempt(loc, lambda v=values: services.backend_create(farm=farm, **v)):
                    self.result.count("backends", "created", name)
            elif _values(backend, services.BACKEND_FIELDS) == values:
                self.result.count("backends", "unchanged")
            elif self.attempt(loc, lambda bk=backend, v=values: services.backend_update(backend=bk, **v)):
                self.result.count("backends", "updated", name)

    def backends_alone(self, location: str, item: Json) -> None:
        """Field checks of the backends of a farm that could not be saved (their farm checks need it)."""
        for loc, b in self.items(item, "backends", set(services.BACKEND_FIELDS), ("address",)):
            candidate = Backend(**self.with_defaults(Backend, services.BACKEND_FIELDS, b))
            try:
                candidate.full_clean(exclude=["farm"])
            except ValidationError as exc:
                self.result.errors.extend(validation_errors(f"{location}.{loc}", exc))

    def sessions(self, location: str, item: Json, farm: Farm) -> None:
        entries = self.items(item, "static_sessions", set(SESSION_FIELDS), SESSION_FIELDS)
        backends = {(b.address, b.port): b for b in Backend.objects.filter(farm=farm)}
        wanted = {}
        for loc, s in entries:
            loc = f"{location}.{loc}"
            ref = s["backend"] if isinstance(s["backend"], dict) else {}
            backend = backends.get((str(ref.get("address")), ref.get("port")))
            if backend is None:
                self.error(loc, "backend", 'Must name a backend of this farm: {"address": ..., "port": ...}.')
            else:
                wanted[(str(s["client"]), backend.pk)] = (loc, backend)
        for session in list(farm.static_sessions.all()):
            if wanted.pop((session.client, session.backend_id), None) is None:
                services.session_delete(session=session)
        for (client, _), (loc, backend) in wanted.items():
            self.attempt(loc, lambda c=client, bk=backend: services.session_create(farm=farm, client=c, backend=bk))

    def run(self, document: Any) -> None:
        if not isinstance(document, dict) or document.get(FORMAT_KEY) != FORMAT_VERSION:
            self.error("", FORMAT_KEY, f'Not an lbweb configuration: expected "{FORMAT_KEY}": {FORMAT_VERSION}.')
            return
        for name in sorted(set(document) - {FORMAT_KEY, "exported_at", "policies", "farms", *SECTIONS}):
            self.error("", name, f"Unknown field '{name}'.")
        policy_entries = self.items(document, "policies", set(services.POLICY_FIELDS), ("name",), Policy)
        policy_entries = self.duplicates(policy_entries, lambda p: p["name"], "Policy")
        farm_fields = set(services.FARM_FIELDS) | {"policies", "backends", "static_sessions"}
        farm_entries = self.items(document, "farms", farm_fields, ("name", "vip"), Farm, self.check_farm_parts)
        farm_entries = self.duplicates(farm_entries, lambda f: f["name"], "Farm")
        by_name = self.policies(policy_entries)
        for location, item, farm in self.farms(farm_entries, by_name):
            self.backends(location, item, farm)
            self.sessions(location, item, farm)
        wanted = {item["name"] for _, item in policy_entries}
        for policy in Policy.objects.exclude(name__in=wanted):
            if self.attempt("policies", lambda p=policy: services.policy_delete(policy=p)):
                self.result.count("policies", "deleted", policy.name)
        for key, section in sorted(SECTIONS.items()):
            if key in document:
                try:
                    with transaction.atomic():
                        section.load(document[key], self.result)
                except ValidationError as exc:
                    self.result.errors.extend(validation_errors(key, exc))


def _backend_name(farm: str, address: Any, port: Any) -> str:
    return f"{farm}/{address}" + (f":{port}" if port else "")


def _is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def type_errors(model, item: Json) -> list[tuple[str, str]]:
    """(field, message) for every value of ``item`` whose JSON type the model field cannot hold.

    Django would turn a list given for a name into the text "['a']", and a list used as a backend's
    port cannot even be looked up: each value is checked against its field's kind first.
    """
    errors = []
    for name, value in item.items():
        try:
            field_ = model._meta.get_field(name)
        except Exception:  # not a model field (nested lists, unknown names): checked elsewhere
            continue
        if value is None:
            ok, message = field_.null, "This field cannot be null."
        elif isinstance(field_, models.BooleanField):
            ok, message = isinstance(value, bool), "Must be true or false."
        elif isinstance(field_, models.IntegerField):
            ok, message = _is_integer(value), "Must be a whole number."
        elif isinstance(field_, models.CharField | models.TextField | models.GenericIPAddressField):
            ok, message = isinstance(value, str), "Must be a string."
        else:
            ok, message = True, ""
        if not ok:
            errors.append((name, message))
    return errors


def load_document(document: Any, result: ImportResult, *, actor=None) -> None:
    """Make the configuration equal to ``document`` inside the caller's transaction, errors and counts into
    ``result``, recording nothing (a backup's restore: the caller audits the whole and rolls back on errors)."""
    importer = _Importer(actor)
    importer.result = result
    with audit.quiet(), audit.acting(actor):
        importer.run(document)


def import_config(
    document: Any,
    *,
    actor=None,
    dry_run: bool = False,
    action: str = "import",
    object_name: str = "whole configuration",
    object_id: int | None = None,
) -> ImportResult:
    """Make the configuration equal to ``document``, or change nothing and say why (every error, located).

    ``dry_run``: validate everything the same way, then roll back; the result still names what would be
    created, updated and deleted. ``action``, ``object_name`` and ``object_id`` label the one audit
    event of the whole import (a restore of a configuration version is an import of its document).
    """
    importer = _Importer(actor)
    with transaction.atomic():
        before = export_config()
        with audit.quiet():
            importer.run(document)
        result = importer.result
        result.ok, result.dry_run = not result.errors, dry_run
        if result.ok and not dry_run:
            after = export_config()
            for snapshot in (before, after):
                snapshot.pop("exported_at")
            audit.record(
                actor=actor, action=action, object_type="configuration", object_name=object_name,
                object_id=object_id, before=before, after=after,
            )  # fmt: skip
        else:
            transaction.set_rollback(True)
    return result
