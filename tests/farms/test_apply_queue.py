"""A burst of writes, however large, queues a bounded number of apply tasks (one waiting at a time).

Real Redis as the Celery broker, no worker: the tasks stay in the broker's queue, where they are counted.
Before ``farms/apply_queue.py`` a 1,000-farm import queued one task per farm and per backend (11,000).
"""

from __future__ import annotations

import pytest
import redis

from farms import apply_queue, config_io, services
from farms.models import Backend, Farm

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = "dataplane"  # CELERY_TASK_DEFAULT_QUEUE: a Redis list on the broker


@pytest.fixture
def broker(redis_server):
    client = redis.Redis.from_url(redis_server.url)
    client.flushdb()
    yield client
    client.flushdb()


def queued(client) -> int:
    return client.llen(QUEUE)


def thousand_farms() -> dict:
    farms = []
    for i in range(1000):
        farms.append(
            {
                "name": f"f{i}",
                "vip": f"198.18.{128 + i // 250}.{i % 250 + 1}",
                "protocol": "tcp",
                "ports": "80",
                "mode": "dnat",
                "scheduler": "rr",
                "backends": [{"address": f"198.19.{(i * 2 + j) // 250}.{(i * 2 + j) % 250 + 1}"} for j in range(2)],
            }
        )
    return {config_io.FORMAT_KEY: config_io.FORMAT_VERSION, "farms": farms, "policies": []}


def test_an_import_of_1000_farms_queues_one_apply(broker):
    result = config_io.import_config(thousand_farms())
    assert result.ok, result.errors
    assert Farm.objects.count() == 1000 and Backend.objects.count() == 2000
    assert queued(broker) == 1


def test_writes_in_their_own_transactions_queue_one_apply_until_the_worker_takes_it(broker):
    farm = services.farm_create(name="web", vip="198.18.100.1", ports="80", mode="dnat", scheduler="weight")
    backend = services.backend_create(farm=farm, address="198.18.1.11")
    for weight in range(2, 200):
        services.backend_update(backend=backend, weight=weight)
    assert queued(broker) == 1
    apply_queue.started()  # what the worker does as the waiting task starts: later writes need a task of their own
    services.backend_update(backend=backend, weight=1)
    services.backend_update(backend=backend, weight=2)
    assert queued(broker) == 2


def test_a_starting_worker_releases_a_claim_left_behind(broker, monkeypatch):
    """A task queued for a worker that died (or lost with the broker's data) must not hold back later writes."""
    from dataplane import boot, tasks

    farm = services.farm_create(name="web", vip="198.18.100.1", ports="80", mode="dnat")
    broker.delete(QUEUE)  # the queued task is lost; its claim stays
    services.farm_update(farm=farm, ports="81")
    assert queued(broker) == 0
    for name in ("ensure_forwarding", "publish_capabilities"):
        monkeypatch.setattr(boot, name, lambda: None)
    monkeypatch.setattr(tasks.heartbeat, "start_publisher", lambda _name: None)
    tasks.restore_at_boot()  # queues its reconcile, which applies what is pending
    broker.delete(QUEUE)
    services.farm_update(farm=farm, ports="82")
    assert queued(broker) == 1


def test_a_broker_that_refuses_leaves_no_claim_behind(broker, monkeypatch):
    from lbweb.celery import app

    def refuse(*_args, **_kwargs):
        raise ConnectionError("broker down")

    monkeypatch.setattr(app, "send_task", refuse)
    services.farm_create(name="web", vip="198.18.100.1", ports="80", mode="dnat")
    assert broker.get(apply_queue.APPLY_QUEUED_KEY) is None  # the next write tries again
    monkeypatch.undo()
    services.farm_create(name="dns", vip="198.18.100.2", ports="53", protocol="udp", mode="dnat")
    assert queued(broker) == 1
