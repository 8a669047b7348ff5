"""The only code that writes farms, backends, policies and sessions.

Each write validates with the model's ``clean()`` (the same words for the UI
and the API), saves inside one transaction, bumps the configuration
generation, and asks the worker for an apply once the transaction commits.

Every service also takes an optional ``actor`` keyword (the user, or None for
the system): :func:`farms.audit.audited` records who did what, with the
object's state before and after, inside the same transaction.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from lbweb import enqueue
from lbweb.writes import validated_save

from .audit import after_record, audited
from .choices import BackendStateChoices, FarmModeChoices
from .field_lists import BACKEND_FIELDS, FARM_FIELDS, POLICY_FIELDS
from .models import Backend, ConfigGeneration, Farm, Policy, StaticSession


def _enqueue(task_name: str, **kwargs) -> None:
    """Queue the worker task ``farms.tasks.<task_name>`` after commit (:mod:`lbweb.enqueue`)."""
    enqueue.send_after_commit(f"farms.tasks.{task_name}", kwargs=kwargs, what=f"{task_name}{kwargs}")


def request_apply(generation: int) -> None:
    """Enqueue an apply after commit, unless one is already waiting (it will see this change too: see
    ``apply_queue``); if the broker is down the change stays pending, never lost."""
    enqueue.after_commit(lambda: _send_apply(generation), what=f"apply of generation {generation}")


def _send_apply(generation: int) -> None:
    from . import apply_queue

    if not apply_queue.claim(generation):
        return
    try:
        enqueue.send("farms.tasks.apply_config", args=[generation])
    except Exception:
        apply_queue.unclaim()  # the next write asks again
        raise


def mark_farms_changed(farm_ids: Iterable[int]) -> int:
    """Give these farms one new generation and ask for one apply (inside the caller's transaction)."""
    generation = ConfigGeneration.bump()
    Farm.objects.filter(pk__in=list(farm_ids)).update(config_generation=generation, updated=timezone.now())
    request_apply(generation)
    return generation


def _mark_changed(farm: Farm) -> int:
    farm.config_generation = mark_farms_changed([farm.pk])
    return farm.config_generation


def _set_policies(farm: Farm, policies: Iterable[Policy] | None) -> None:
    if policies is None:
        return
    policies = list(policies)
    if policies and farm.mode in (FarmModeChoices.DSR, FarmModeChoices.STATELESS_DNAT):
        raise ValidationError({"policies": "Access policies need conntrack: not available with DSR or stateless DNAT."})
    farm.policies.set(policies)


@audited("create")
@transaction.atomic
def farm_create(*, policies: Iterable[Policy] | None = None, **values) -> Farm:
    """Create a farm from its field values (see FARM_FIELDS) and its access policies."""
    farm = Farm()
    validated_save(farm, FARM_FIELDS, values)
    _set_policies(farm, policies)
    _mark_changed(farm)
    return farm


@audited("update", "farm")
@transaction.atomic
def farm_update(*, farm: Farm, policies: Iterable[Policy] | None = None, **values) -> Farm:
    """Change some fields of a farm (and, if given, its access policies)."""
    validated_save(farm, FARM_FIELDS, values)
    _set_policies(farm, policies if policies is not None else (farm.policies.all() if "mode" in values else None))
    _mark_changed(farm)
    return farm


@audited("retry", "farm")
@transaction.atomic
def farm_retry(*, farm: Farm) -> Farm:
    """Apply a farm again as it is. The worker isolates a farm the kernel refused (or whose apply crashed
    its kernel writer) and tries it again only when it changes: this is that change, with nothing else."""
    _mark_changed(farm)
    return farm


@audited("delete", "farm")
@transaction.atomic
def farm_delete(*, farm: Farm) -> None:
    """Delete a farm and its backends; the worker removes its rules."""
    farm.delete()
    request_apply(ConfigGeneration.bump())


@audited("create")
@transaction.atomic
def backend_create(*, farm: Farm, **values) -> Backend:
    """Add a backend to a farm."""
    backend = Backend(farm=farm)
    validated_save(backend, BACKEND_FIELDS, values)
    _mark_changed(farm)
    return backend


@audited("update", "backend")
@transaction.atomic
def backend_update(*, backend: Backend, **values) -> Backend:
    """Change some fields of a backend (weight, state, priority, ...)."""
    validated_save(backend, BACKEND_FIELDS, values)
    _mark_changed(backend.farm)
    return backend


@audited("delete", "backend")
@transaction.atomic
def backend_delete(*, backend: Backend) -> None:
    """Remove a backend from its farm."""
    farm = backend.farm
    backend.delete()
    _mark_changed(farm)


@audited("maintenance", "backend")
@transaction.atomic
def backend_maintenance(*, backend: Backend, mode: str) -> Backend:
    """Take a backend out of service: ``drain`` keeps its connections and sessions to end by themselves;
    ``cut`` also deletes its conntrack entries and persistence sessions at once."""
    if mode not in ("drain", "cut"):
        raise ValidationError({"mode": "Maintenance is 'drain' (keep connections) or 'cut' (end them now)."})
    state = BackendStateChoices.DRAIN if mode == "drain" else BackendStateChoices.DISABLED
    backend_update(backend=backend, state=state)
    if mode == "cut":
        backend.static_sessions.all().delete()
        # The worker ends the connections and adds how many it ended to this change's audit event.
        after_record(
            lambda event: _enqueue("cut_backend", backend_id=backend.id, audit_event_id=event.pk if event else None)
        )
    return backend


class BackendRowsError(ValidationError):
    """Some rows of a backends edit were refused: ``rows`` maps each row's index to its ValidationError."""

    def __init__(self, rows: dict[int, ValidationError]):
        self.rows = rows
        super().__init__([message for error in rows.values() for message in error.messages])


@transaction.atomic
def backends_edit(
    *, farm: Farm, rows: list[tuple[Backend | None, dict]], removed: Iterable[Backend] = (), actor=None
) -> list[Backend]:
    """Change, add and remove several backends of ``farm`` at once (the farm page's editor), all or nothing:
    ``rows`` are (backend, values) to update, or (None, values) to create. Each change is audited as the
    single one is. Every row is tried, so every refusal is reported (BackendRowsError); then nothing stays."""
    for backend in removed:
        backend_delete(backend=backend, actor=actor)
    saved, refused = [], {}
    for index, (backend, values) in enumerate(rows):
        try:
            if backend is None:
                saved.append(backend_create(farm=farm, actor=actor, **values))
            else:
                saved.append(backend_update(backend=backend, actor=actor, **values))
        except ValidationError as exc:
            refused[index] = exc
    if refused:
        raise BackendRowsError(refused)
    return saved


@transaction.atomic
def backends_set_state(*, backends: Iterable[Backend], state: str, actor=None) -> list[Backend]:
    """Put several backends in one state at once (the farm page's and the API's bulk enable, drain, disable):
    all or nothing, each change audited as the single-backend one is. Backends already in ``state`` are left
    alone; the ones changed are returned."""
    if state not in BackendStateChoices.values:
        raise ValidationError({"state": f"A backend's state is one of {', '.join(BackendStateChoices.values)}."})
    changed = []
    for backend in backends:
        if backend.state != state:
            changed.append(backend_update(backend=backend, state=state, actor=actor))
    return changed


@audited("create")
@transaction.atomic
def policy_create(**values) -> Policy:
    """Create a shared access policy (deny or allow list)."""
    policy = Policy()
    validated_save(policy, POLICY_FIELDS, values)
    _policy_changed(policy)
    return policy


@audited("update", "policy")
@transaction.atomic
def policy_update(*, policy: Policy, **values) -> Policy:
    """Change a policy; its farms are not rebuilt, only the policy's sets change in the kernel."""
    validated_save(policy, POLICY_FIELDS, values)
    _policy_changed(policy)
    return policy


@audited("delete", "policy")
@transaction.atomic
def policy_delete(*, policy: Policy) -> None:
    """Delete a policy that no farm uses."""
    users = list(policy.farms.values_list("name", flat=True))
    if users:
        raise ValidationError({"policy": f"Policy '{policy.name}' is used by farm(s) {', '.join(users)}."})
    policy.delete()
    request_apply(ConfigGeneration.bump())


def _policy_changed(policy: Policy) -> None:
    generation = ConfigGeneration.bump()
    Policy.objects.filter(pk=policy.pk).update(config_generation=generation)
    policy.farms.update(config_generation=generation, updated=timezone.now())
    request_apply(generation)


@audited("create")
@transaction.atomic
def session_create(*, farm: Farm, client: str, backend: Backend) -> StaticSession:
    """Pin a client to a backend (a static persistence entry, no expiry)."""
    session = StaticSession(farm=farm, client=client, backend=backend)
    session.full_clean()
    from .validation import session_key_parts

    parts = session_key_parts(client, farm)
    session.client = parts[0] if len(parts) == 1 else f"{parts[0]}:{parts[1]}"
    session.save()
    _mark_changed(farm)
    return session


@audited("delete", "session")
@transaction.atomic
def session_delete(*, session: StaticSession) -> None:
    """Remove a static session."""
    farm = session.farm
    session.delete()
    _mark_changed(farm)


@audited("flush sessions", "farm")
def flush_learnt_sessions(*, farm: Farm, backend: Backend | None = None, client: str | None = None) -> None:
    """Forget learnt persistence entries in the kernel: all of a backend's, or one client's."""
    _enqueue_now("flush_sessions", farm_id=farm.id, backend_id=backend.id if backend else None, client=client or None)


def _enqueue_now(task_name: str, **kwargs) -> None:
    with transaction.atomic():
        _enqueue(task_name, **kwargs)
