"""The sessions call never waits on the worker (issue 12: viewers of it held the web threads for 5 s each).

Real Redis, no worker: what the worker would publish is published through the same function it calls.
"""

from __future__ import annotations

import time

import pytest
import redis as redis_lib

from farms import session_snapshots
from tests.farms.test_api import create_farm

pytestmark = pytest.mark.django_db
SESSION = {"client": "198.18.0.2", "backend": 7, "static": False, "expires_in": 99_000}


@pytest.fixture
def farm(client, redis_server):
    redis_lib.Redis.from_url(redis_server.url).flushdb()  # no snapshot, no request, no queued task
    return create_farm(client)


def timed_get(client, url: str):
    started = time.monotonic()
    response = client.get(url)
    return response, time.monotonic() - started


def queued(redis_server) -> int:
    return redis_lib.Redis.from_url(redis_server.url).llen("dataplane")


def test_with_the_worker_stopped_the_call_answers_202_at_once_and_asks_once(client, farm, redis_server):
    url = f"/api/v1/farms/{farm['id']}/sessions/"
    for _ in range(4):  # four viewers
        response, seconds = timed_get(client, url)
        assert response.status_code == 202, response.content
        # "At once": no wait for the worker (which would last until a timeout); the first call also opens the
        # broker connection, 0.31 s once in a full run, so the bound leaves room for that and no more.
        assert seconds < 1.0, f"the call waited {seconds:.2f} s"
        assert response["Retry-After"] == "1" and response.json()["retry_after"] == 1
    assert queued(redis_server) == 1  # one read asked of the worker, not one per viewer
    assert "reading them" in response.json()["detail"]


def test_a_request_unanswered_for_long_says_the_worker_may_be_down(client, farm, redis_server):
    redis = redis_lib.Redis.from_url(redis_server.url)
    redis.set(session_snapshots.asked_key(farm["id"]), str(time.time() - 8), ex=10)
    body = client.get(f"/api/v1/farms/{farm['id']}/sessions/").json()
    assert "has not answered: is it running?" in body["detail"] and body["asked_seconds_ago"] >= 8


def test_a_published_snapshot_is_served_with_its_age(client, farm):
    session_snapshots.publish(farm["id"], [SESSION])  # what the worker does after reading the kernel
    response, seconds = timed_get(client, f"/api/v1/farms/{farm['id']}/sessions/")
    assert response.status_code == 200 and seconds < 0.3
    body = response.json()
    assert body["sessions"] == [SESSION] and 0 <= body["age"] < 2 and response["Age"] in ("0", "1")
    assert body["read_at"].endswith("Z") or "+00:00" in body["read_at"]


def test_a_snapshot_older_than_max_age_is_read_again(client, farm, redis_server):
    session_snapshots.publish(farm["id"], [SESSION])
    time.sleep(1.1)
    response = client.get(f"/api/v1/farms/{farm['id']}/sessions/?max_age=1")
    assert response.status_code == 202 and queued(redis_server) == 1
    assert client.get(f"/api/v1/farms/{farm['id']}/sessions/?max_age=5").status_code == 200


def test_a_failed_read_is_a_502_with_the_kernels_words(client, farm):
    session_snapshots.publish(farm["id"], None, "Could not process rule: No such file or directory")
    response = client.get(f"/api/v1/farms/{farm['id']}/sessions/")
    assert response.status_code == 502 and "No such file" in response.json()["detail"]


@pytest.mark.parametrize("max_age", ["-1", "3601", "٥", "x"])
def test_a_bad_max_age_is_a_field_level_400(client, farm, max_age):
    response = client.get(f"/api/v1/farms/{farm['id']}/sessions/?max_age={max_age}")
    assert response.status_code == 400 and "max_age" in response.json()
