"""The nftlb import service: a document's farms and policies created or updated by name, all or nothing.

Every write goes through :mod:`farms.services` (the model's ``clean()`` validates, each write bumps the
generation and asks for an apply after commit). The whole import is one transaction: if any value is
refused, or on a dry run, it is rolled back and nothing is written or applied.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.db import transaction

from .. import audit, services
from ..models import Farm, Policy
from .plans import FarmPlan, ImportPlan
from .reader import import_document
from .schema import BACKEND_FIELD_ATTRIBUTE, FARM_FIELD_ATTRIBUTE

SESSION_FIELD_ATTRIBUTE = {"client": "client", "backend": "backend"}
POLICY_FIELD_ATTRIBUTE = {"name": "name", "type": "type", "description": "description", "elements": "elements"}


@dataclass
class ImportResult:
    """What an import did (or, on a dry run or with errors, would have done) and what it found."""

    dry_run: bool
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    policies_created: list[str] = field(default_factory=list)
    policies_updated: list[str] = field(default_factory=list)
    errors: list[dict[str, str]] = field(default_factory=list)
    unknown: list[dict[str, str]] = field(default_factory=list)
    ignored: list[dict[str, str]] = field(default_factory=list)
    warnings: list[dict[str, str]] = field(default_factory=list)
    differences: list[dict[str, str]] = field(default_factory=list)
    partial: bool = False
    skipped: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors

    def as_dict(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "farms_created": self.created,
            "farms_updated": self.updated,
            "policies_created": self.policies_created,
            "policies_updated": self.policies_updated,
            "errors": self.errors,
            "unknown": self.unknown,
            "ignored": self.ignored,
            "warnings": self.warnings,
            "differences": self.differences,
            "partial": self.partial,
            "skipped": self.skipped,
        }

    def refused(self, path: str, exc: ValidationError, attributes: dict[str, str]) -> None:
        """A model's ValidationError, each message at the path of the nftlb attribute it is about."""
        by_field = exc.message_dict if hasattr(exc, "error_dict") else {NON_FIELD_ERRORS: exc.messages}
        for name, messages in by_field.items():
            where = path if name == NON_FIELD_ERRORS or name not in attributes else f"{path}.{attributes[name]}"
            for message in messages:
                self.errors.append({"path": where, "message": message})


def nftlb_import(
    *, document: Any, dry_run: bool = False, strict: bool = False, partial: bool = False, actor=None
) -> ImportResult:
    """Create or update, by name, the farms and policies of an nftlb document in one transaction.

    A farm of the document replaces the farm of that name: attributes left out take their defaults, and
    its backends (matched by address and port), static sessions and policies become the document's.
    Unknown attributes are listed and skipped, or refused with ``strict``. With any error, or ``dry_run``,
    the transaction is rolled back; with ``partial``, only the farms and policies that have an error are
    left out (each in ``skipped`` with its errors) and the rest is imported. Every object written is
    audited with ``actor`` (the person importing).
    """
    plan = import_document(document, strict=strict)
    result = ImportResult(
        dry_run=dry_run,
        errors=list(plan.errors),
        unknown=plan.unknown,
        ignored=plan.ignored,
        warnings=plan.warnings,
        differences=plan.differences,
        partial=partial,
    )
    with transaction.atomic(), audit.acting(actor):
        policies = _import_policies(plan, result)
        for farm_plan in plan.farms:
            if partial:
                _import_farm_alone(farm_plan, policies, result)
            else:
                _import_farm(farm_plan, policies, result)
        if partial:
            _skip_refused(plan, result)
        if result.errors or dry_run:
            transaction.set_rollback(True)
    if result.errors:
        result.created, result.updated, result.policies_created, result.policies_updated = [], [], [], []
    return result


def _import_farm_alone(plan: FarmPlan, policies: dict[str, Policy | None], result: ImportResult) -> None:
    """Partial import: one farm whole or not at all (a savepoint), never without a refused backend."""
    if any(_owner(e["path"]) == plan.path for e in result.errors):
        return
    refused = [name for _, name in plan.policies if name in policies and policies[name] is None]
    if refused:
        result.errors.append({"path": plan.path, "message": f"its policy '{refused[0]}' was refused"})
        return
    before = (len(result.errors), len(result.created), len(result.updated))
    savepoint = transaction.savepoint()
    _import_farm(plan, policies, result)
    if len(result.errors) > before[0]:
        transaction.savepoint_rollback(savepoint)
        del result.created[before[1] :], result.updated[before[2] :]
    else:
        transaction.savepoint_commit(savepoint)


def _owner(path: str) -> str:
    """The top-level object an error belongs to: ``farms[2]`` of ``farms[2].backends[0].ip-addr``."""
    head = path.split(".", 1)[0]
    return head if "[" in head else path


def _skip_refused(plan: ImportPlan, result: ImportResult) -> None:
    """Partial import: the errors move to ``skipped``, grouped by the farm or policy they belong to."""
    by_owner: dict[str, list[dict[str, str]]] = {}
    for error in result.errors:
        by_owner.setdefault(_owner(error["path"]), []).append(error)
    names = {p.path: ("farm", p.name) for p in plan.farms} | {p.path: ("policy", p.name) for p in plan.policies}
    for owner, errors in by_owner.items():
        kind, name = names.get(owner, ("document", ""))
        result.skipped.append({"path": owner, "kind": kind, "name": name, "errors": errors})
    result.errors = []


def _import_policies(plan: ImportPlan, result: ImportResult) -> dict[str, Policy | None]:
    """The document's policies by name (None for one that was refused)."""
    out: dict[str, Policy | None] = {}
    for policy_plan in plan.policies:
        existing = Policy.objects.filter(name=policy_plan.name).first()
        try:
            if existing:
                out[policy_plan.name] = services.policy_update(policy=existing, **policy_plan.values)
                result.policies_updated.append(policy_plan.name)
            else:
                out[policy_plan.name] = services.policy_create(name=policy_plan.name, **policy_plan.values)
                result.policies_created.append(policy_plan.name)
        except ValidationError as exc:
            out[policy_plan.name] = None
            result.refused(policy_plan.path, exc, POLICY_FIELD_ATTRIBUTE)
    return out


def _farm_policies(plan: FarmPlan, policies: dict[str, Policy | None], result: ImportResult) -> list[Policy] | None:
    found = []
    for path, name in plan.policies:
        policy = policies[name] if name in policies else Policy.objects.filter(name=name).first()
        if policy is None:
            if name not in policies:
                result.errors.append({"path": path, "message": f"no policy '{name}' in the document or in lbweb"})
            return None
        found.append(policy)
    return found


def _import_farm(plan: FarmPlan, policies: dict[str, Policy | None], result: ImportResult) -> None:
    farm_policies = _farm_policies(plan, policies, result)
    if not plan.valid or farm_policies is None:
        return
    farm = Farm.objects.filter(name=plan.name).first()
    try:
        if farm:
            _clear_for_update(farm, plan)
            services.farm_update(farm=farm, policies=farm_policies, **plan.values)
            result.updated.append(plan.name)
        else:
            farm = services.farm_create(policies=farm_policies, **plan.values)
            result.created.append(plan.name)
    except ValidationError as exc:
        result.refused(plan.path, exc, FARM_FIELD_ATTRIBUTE)
        return
    existing = {(b.address, b.port): b for b in farm.backends.all()}
    by_name = {}
    for backend_plan in plan.backends:
        if not backend_plan.valid:
            continue
        values = backend_plan.values
        try:
            backend = existing.get((values["address"], values["port"]))
            if backend:
                backend = services.backend_update(backend=backend, **values)
            else:
                backend = services.backend_create(farm=farm, **values)
        except ValidationError as exc:
            result.refused(backend_plan.path, exc, BACKEND_FIELD_ATTRIBUTE)
            continue
        by_name[backend_plan.name] = backend
    for session in plan.sessions:
        backend = by_name.get(session.backend)
        if backend is None:
            continue  # its backend was refused, and reported
        try:
            services.session_create(farm=farm, client=session.client, backend=backend)
        except ValidationError as exc:
            messages = exc.message_dict if hasattr(exc, "error_dict") else {}
            if "farm" in messages:  # the farm has no persistence: say where to fix it
                result.errors += [{"path": f"{plan.path}.persistence", "message": m} for m in messages.pop("farm")]
                exc = ValidationError(messages) if messages else None
            if exc is not None:
                result.refused(session.path, exc, SESSION_FIELD_ATTRIBUTE)


def _clear_for_update(farm: Farm, plan: FarmPlan) -> None:
    """Before a farm takes the document's values: its static sessions and the backends the document
    no longer lists go (so a change of family, mode or ports does not trip over them)."""
    keep = {(b.values["address"], b.values["port"]) for b in plan.backends}
    for session in farm.static_sessions.all():
        services.session_delete(session=session)
    for backend in farm.backends.all():
        if (backend.address, backend.port) not in keep:
            services.backend_delete(backend=backend)
