"""beat's schedule: every entry names a task the worker has, and every periodic job of the worker is scheduled.

A periodic task nobody schedules never runs: leastconn farms kept the weights of their first apply until this
test named ``balance_least_connections`` here.
"""

from __future__ import annotations

from django.conf import settings

from lbweb.celery import app

PERIODIC = {  # the worker's tasks that only beat starts
    "farms.tasks.reconcile",
    "farms.tasks.balance_least_connections",
    "l7.tasks.acme_renew",
    "cluster.tasks.heartbeat",
    "system.tasks.scheduled_backup",
}


def test_every_beat_entry_names_a_task_the_worker_has():
    app.loader.import_default_modules()  # what the worker imports at start (CELERY_IMPORTS)
    scheduled = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert scheduled - set(app.tasks) == set()


def test_every_periodic_task_is_scheduled():
    scheduled = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert PERIODIC - scheduled == set()
    least = next(e for e in settings.CELERY_BEAT_SCHEDULE.values() if e["task"].endswith("balance_least_connections"))
    assert 0 < least["schedule"] <= 30  # leastconn follows the connections, not the reconcile
