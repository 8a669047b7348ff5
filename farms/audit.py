"""The audit trail: every service call records who did what, with the object's state before and after.

Services are wrapped with :func:`audited`, which adds an optional ``actor`` keyword (a user, or None for
the system) and writes one :class:`~farms.models.AuditEvent` inside the service's own transaction: if
the change rolls back, so does its record. A service called by another audited service (maintenance
calls backend_update, an import calls many) is recorded once, by the outermost call.

Other apps audit their own objects the same way: they decorate their services with :func:`audited` and
give their models an ``audit_state()`` method (the JSON an operator reads as before/after); the entry
names the farm a row belongs to (its ``farm_id``, or its backend's farm), and a row that only extends
another (a farm's HTTP options) names that one by ``audit_as``. :func:`record` writes an event that is
no one object's change (a whole import, a set of tokens revoked, a cluster transition). A caller that
runs many services for one person (an import) wraps them in :func:`acting` so each is recorded with that
person, never as "system".
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Callable
from typing import Any

from django.db import models, transaction

from . import syslog_events
from .field_lists import BACKEND_FIELDS, FARM_FIELDS, HEALTH_CHECK_FIELDS, POLICY_FIELDS
from .models import AuditEvent, Backend, Farm, HealthCheck, Policy, StaticSession

_INSIDE = contextvars.ContextVar("lbweb_audited_service", default=False)
# Callbacks a service asked for with after_record(), called with the event its outermost call wrote.
_AFTER_RECORD: contextvars.ContextVar[list | None] = contextvars.ContextVar("lbweb_audit_after_record", default=None)
_ACTOR = contextvars.ContextVar("lbweb_audit_actor", default=None)


@contextlib.contextmanager
def acting(actor):
    """Service calls inside the block that name no actor are recorded with ``actor`` (an import's user)."""
    token = _ACTOR.set(actor)
    try:
        yield
    finally:
        _ACTOR.reset(token)


def current_actor():
    """The account of the enclosing :func:`acting` block (None outside one)."""
    return _ACTOR.get()


def state_of(obj: models.Model | None) -> dict[str, Any] | None:
    """The fields of ``obj`` an operator configures, as plain JSON (what before/after show)."""
    if obj is None:
        return None
    if hasattr(obj, "audit_state"):  # another app's model says what it shows
        return obj.audit_state()
    if isinstance(obj, HealthCheck):
        return {"farm": obj.farm.name, **{name: getattr(obj, name) for name in HEALTH_CHECK_FIELDS}}
    if isinstance(obj, Farm):
        state = {name: getattr(obj, name) for name in FARM_FIELDS}
        state["policies"] = sorted(p.name for p in obj.policies.all()) if obj.pk else []
        return state
    if isinstance(obj, Backend):
        return {"farm": obj.farm.name, **{name: getattr(obj, name) for name in BACKEND_FIELDS}}
    if isinstance(obj, Policy):
        return {name: getattr(obj, name) for name in POLICY_FIELDS}
    if isinstance(obj, StaticSession):
        return {"farm": obj.farm.name, "client": obj.client, "backend": str(obj.backend)}
    return None


def farm_ref_of(obj: models.Model | None) -> int | None:
    """The farm ``obj`` belongs to: itself, its farm, or its backend's farm."""
    if isinstance(obj, Farm):
        return obj.pk
    if getattr(obj, "farm_id", None) is not None:
        return obj.farm_id
    backend = getattr(obj, "backend", None)
    return backend.farm_id if isinstance(backend, Backend) else None


def identity_of(obj: models.Model) -> tuple[int | None, str, int | None]:
    """(object_id, object_name, farm_ref) of an entry about ``obj``: its own, or those of the row it extends."""
    shown = getattr(obj, "audit_as", obj)
    return shown.pk, str(shown), farm_ref_of(shown)


def record(
    *,
    actor,
    action: str,
    object_type: str,
    object_id: int | None = None,
    object_name: str = "",
    farm_ref: int | None = None,
    before: Any = None,
    after: Any = None,
) -> AuditEvent:
    """Write one audit event (inside the caller's transaction); no actor: the one of :func:`acting`, if any."""
    if actor is None:
        actor = _ACTOR.get()
    user = actor if getattr(actor, "is_authenticated", False) else None
    event = AuditEvent.objects.create(
        actor=user,
        actor_name=user.get_username() if user else "system",
        action=action,
        object_type=object_type,
        object_id=object_id,
        object_name=str(object_name)[:200],
        farm_ref=farm_ref,
        before=before,
        after=after,
    )
    syslog_events.audit(event)  # to the syslog servers once the change commits
    return event


def _current(obj: models.Model | None) -> models.Model | None:
    """The row as the database has it now (the caller's instance may carry unsaved values)."""
    if obj is None or obj.pk is None:  # nothing, or deleted (Django clears a deleted instance's pk)
        return None
    return type(obj).objects.filter(pk=obj.pk).first()


def _made(result: Any) -> models.Model | None:
    """The object a service returned: itself, or the first of a tuple (a token and its secret)."""
    if isinstance(result, tuple) and result:
        result = result[0]
    return result if isinstance(result, models.Model) else None


def audited(action: str | Callable[..., str], target: str | None = None) -> Callable:
    """Record a service call: ``target`` names the keyword that carries the object being changed.

    The object recorded is the service's return value when it is a model instance (a create; or the
    first item of a returned tuple), otherwise the target (an update, a delete, an action on an object).
    ``action`` is the entry's verb, or a function of the service's keywords that words it (a capacity
    declared with a token names the token).
    """

    def decorate(func: Callable) -> Callable:
        @functools.wraps(func)
        def wrapper(*args, actor=None, **kwargs):
            if _INSIDE.get():
                return func(*args, **kwargs)
            token = _INSIDE.set(True)
            hooks: list[Callable] = []
            hooks_token = _AFTER_RECORD.set(hooks)
            try:
                with transaction.atomic():
                    subject = kwargs.get(target) if target else None
                    before_obj = _current(subject)
                    before = state_of(before_obj)
                    identity = identity_of(before_obj) if before_obj else None
                    result = func(*args, **kwargs)
                    obj = _made(result) or subject
                    after_obj = _current(obj)
                    if after_obj is not None:
                        identity = identity_of(after_obj)
                    object_type = type(obj)._meta.model_name if obj is not None else ""
                    object_id, object_name, farm_ref = identity or (None, "", None)
                    event = record(
                        actor=actor,
                        action=action(**kwargs) if callable(action) else action,
                        object_type=object_type,
                        object_id=object_id,
                        object_name=object_name,
                        farm_ref=farm_ref,
                        before=before,
                        after=state_of(after_obj),
                    )
                    for hook in hooks:
                        hook(event)
                    return result
            finally:
                _AFTER_RECORD.reset(hooks_token)
                _INSIDE.reset(token)

        wrapper.audited_action = action
        return wrapper

    return decorate


def after_record(callback: Callable[[AuditEvent], None]) -> None:
    """Call ``callback`` with the audit event the running service writes (inside its transaction), e.g. to
    hand its id to a worker task that adds what only the worker learns (how many connections a cut ended).
    Outside an audited service it is called with None."""
    hooks = _AFTER_RECORD.get()
    if hooks is None:
        callback(None)
    else:
        hooks.append(callback)


def add_outcome(event_id: int | None, **outcome: Any) -> None:
    """Add what came of a recorded change once it is known (the worker's count of connections cut) to the
    event's ``after``: the record of the change then says what it did, not only what was asked."""
    if event_id is None:
        return
    with transaction.atomic():
        event = AuditEvent.objects.select_for_update().filter(pk=event_id).first()
        if event is None:
            return
        event.after = {**(event.after if isinstance(event.after, dict) else {}), **outcome}
        event.save(update_fields=["after"])


def quiet():
    """A block whose service calls are not recorded one by one (the caller records the whole)."""

    class _Quiet:
        def __enter__(self):
            self.token = _INSIDE.set(True)

        def __exit__(self, *exc):
            _INSIDE.reset(self.token)
            return False

    return _Quiet()
