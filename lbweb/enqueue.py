"""Asking the worker for a task, by name: how every web app hands work to the worker.

The web process never imports the worker's code (an import contract says so): it sends a task by its Celery name
(``farms.tasks.apply_config``) with ids in its arguments, and the worker reads the database itself.

A change is committed first, then sent for (:func:`send_after_commit`): a task sent before the commit could run
before the row it names is visible, and one sent for a change that rolled back would apply what was never saved.
When the broker is down the change stays saved and shows as pending; the worker applies whatever is pending when it
starts and at every reconcile, so a lost message is logged, never raised into the request that saved the change.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from django.db import transaction

log = logging.getLogger("lbweb.enqueue")


def send(task: str, *, args: Iterable = (), kwargs: dict | None = None, **options) -> None:
    """Send the worker task named ``task`` now; raises when the broker cannot take it (the caller says so)."""
    from lbweb.celery import app

    app.send_task(task, args=list(args), kwargs=kwargs or {}, retry=False, **options)


def after_commit(deliver: Callable[[], object], *, what: str) -> None:
    """Call ``deliver`` once the transaction commits (at once outside one); when it fails (broker or Redis down)
    log that ``what`` stays pending."""

    def run() -> None:
        try:
            deliver()
        except Exception as exc:  # broker down: the worker reconciles what is pending at start and periodically
            log.warning("%s not enqueued (%s); it stays pending", what, exc)

    transaction.on_commit(run)


def send_after_commit(task: str, *, args: Iterable = (), kwargs: dict | None = None, what: str) -> None:
    """Send the worker task named ``task`` once the transaction commits; if the broker is down, ``what`` stays
    pending (logged)."""
    args = list(args)
    after_commit(lambda: send(task, args=args, kwargs=kwargs), what=what)
