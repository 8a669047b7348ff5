"""The worker's long reads (its snapshot of every farm, the export behind a configuration version) keep no web write
waiting: on SQLite they run in a DEFERRED transaction (lbweb/db.py), where every other transaction takes the write
lock at BEGIN. Proof with two real connections to the test database: the write commits while the read is held open
in the middle, and the read still sees one state."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection

from farms import config_io, services, specs, versions
from farms.models import Farm
from lbweb.db import read_snapshot
from tests.farms.test_config_versions import applied

pytestmark = pytest.mark.django_db(transaction=True)


def write_while(hold: threading.Event, release: threading.Event, reader, seconds: float = 5.0) -> float:
    """Run ``reader`` in a thread (it sets ``hold`` in the middle of its read and waits for ``release``), write a
    farm from this thread meanwhile, and return how long the write took."""
    failure: list[BaseException] = []

    def run():
        try:
            reader()
        except BaseException as exc:  # noqa: BLE001 (reported by the test)
            failure.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    try:
        assert hold.wait(10), "the reader never reached the middle of its read"
        started = time.monotonic()
        writer = threading.Thread(
            target=lambda: (
                services.farm_create(name="written", vip="198.18.100.99", ports="80", mode="dnat"),
                connection.close(),
            )
        )
        writer.start()
        writer.join(seconds)
        took = time.monotonic() - started
        assert not writer.is_alive(), f"the web's write waited more than {seconds} s for the worker's read"
        return took
    finally:
        release.set()
        thread.join(30)
        assert not failure, failure


def test_a_read_snapshot_sees_one_state_and_keeps_no_writer_waiting():
    services.farm_create(name="before", vip="198.18.100.1", ports="80", mode="dnat")
    hold, release, seen = threading.Event(), threading.Event(), []

    def reader():
        with read_snapshot():
            seen.append(Farm.objects.count())
            hold.set()
            release.wait(10)
            seen.append(Farm.objects.count())  # the same state, though a farm was committed meanwhile

    write_while(hold, release, reader)
    assert seen == [1, 1] and Farm.objects.count() == 2


def test_the_workers_snapshot_of_every_farm_keeps_no_writer_waiting(monkeypatch):
    for i in range(3):
        services.farm_create(name=f"f{i}", vip=f"198.18.100.{i + 1}", ports="80", mode="dnat")
    hold, release, read = threading.Event(), threading.Event(), []
    real = specs.policy_spec

    def slow_policy_spec(policy):  # called after every farm was read, still inside the snapshot
        hold.set()
        release.wait(10)
        return real(policy)

    services.policy_create(name="p", elements="198.18.9.0/24")
    monkeypatch.setattr(specs, "policy_spec", slow_policy_spec)
    write_while(hold, release, lambda: read.append(specs.snapshot()))
    assert len(read[0].specs) == 3  # the farm written meanwhile is the next snapshot's


def test_the_export_behind_a_version_keeps_no_writer_waiting(monkeypatch):
    services.farm_create(name="web", vip="198.18.100.1", ports="80", mode="dnat")
    run = applied()
    versions.PARTS.reset()
    hold, release, kept = threading.Event(), threading.Event(), []
    real = config_io.farm_entries

    def slow_entries(ids):
        hold.set()
        release.wait(10)
        return real(ids)

    monkeypatch.setattr(config_io, "farm_entries", slow_entries)
    write_while(hold, release, lambda: kept.append(versions.record_applied(run)))
    assert kept[0] is not None and [f["name"] for f in versions.document_of(kept[0])["farms"]] == ["web"]
