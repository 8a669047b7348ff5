"""Schemathesis over every operation of ``/api/schema/``: zero 5xx, every response as the schema says.

Against the ``live_server`` (a throwaway test database) with an admin's token and the real Redis (no
worker: enqueued tasks stay queued). Each operation gets a few schema-conforming requests (positive) and
a few that break the schema on purpose (negative); every response is checked for a server error, a
status code the schema does not list, a content type, headers and a body that do not match it. An
operation left out is listed in ``EXCLUDED`` with the reason. Bounded: ``EXAMPLES`` per operation and
mode, no shrinking (the failure shows the request to replay), a few minutes at most on a busy machine.
"""

from __future__ import annotations

import json
import os
import time

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from farms import services
from tests.conftest import new_token
from tests.farms.test_api import farm_data

EXAMPLES = int(os.environ.get("LBWEB_SCHEMA_EXAMPLES", "6"))
BUDGET_SECONDS = 300
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]
MODES = [schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE]
# The directories' Tests connect to the saved server: a fuzzed server name would be reached on the network, and
# the tests may send nothing beyond this machine. tests/accounts/test_auth_*.py try them against servers of their own.
_REACHES_OUT = "connects to the saved directory server, which the fuzzer may have set to any address"
EXCLUDED: dict[str, str] = {
    f"POST /api/v1/system/authentication/{kind}/test/": _REACHES_OUT for kind in ("ldap", "radius", "oidc")
}


def seed(redis_url: str) -> None:
    """One of each kind of object, so lists and details answer with real objects, not only 404s, and
    the capabilities a worker publishes (no worker runs: its queued tasks stay queued)."""
    import redis

    from farms import capabilities

    redis.Redis.from_url(redis_url).set(capabilities.REDIS_KEY, json.dumps({"flowtable": True, "reject-nat": True}))
    capabilities.forget()
    policy = services.policy_create(name="deny", elements="198.18.9.0/24")
    farm = services.farm_create(**farm_data(scheduler="weight", persistence="srcip"), policies=[policy])
    backend = services.backend_create(farm=farm, address="198.18.1.11")
    services.session_create(farm=farm, client="198.18.0.2", backend=backend)


@pytest.fixture
def empty_redis(redis_server):
    """The requests enqueue worker tasks (flushes, cuts) for this test's objects: none may reach a later
    test's worker."""
    import redis

    store = redis.Redis.from_url(redis_server.url)
    store.flushdb()
    yield redis_server
    store.flushdb()


def test_every_operation_answers_as_the_schema_says_and_never_5xx(live_server, admin_user, empty_redis):
    seed(empty_redis.url)
    headers = {"Authorization": f"Token {new_token(admin_user)}"}
    session = requests.Session()
    document = session.get(f"{live_server.url}/api/schema/?format=json", headers=headers, timeout=30)
    assert document.status_code == 200, document.text
    schema = schemathesis.openapi.from_dict(document.json())
    failures: dict[str, str] = {}
    ran: list[str] = []
    started = time.monotonic()
    for result in schema.get_all_operations():
        operation = result.ok()
        if operation.label in EXCLUDED:
            continue
        ran.append(operation.label)
        for mode in MODES:

            @settings(
                max_examples=EXAMPLES,
                deadline=None,
                database=None,
                derandomize=True,
                phases=[Phase.explicit, Phase.generate],
                suppress_health_check=list(HealthCheck),
            )
            @given(case=operation.as_strategy(generation_mode=mode))
            def call(case):
                case.call_and_validate(base_url=live_server.url, session=session, headers=headers, checks=CHECKS)

            try:
                call()
            except Unsatisfiable:  # no parameter and no body: a negative request cannot be made
                assert mode == schemathesis.GenerationMode.NEGATIVE, operation.label
                assert not operation.body and not operation.query and not operation.path_parameters, operation.label
            except (Exception, BaseExceptionGroup) as exc:  # every operation runs; failures reported together
                failures[f"{operation.label} ({mode})"] = str(exc)[:3000]
    elapsed = time.monotonic() - started
    print(f"{len(ran)} operations, {EXAMPLES} examples per operation and mode, {elapsed:.0f} s")
    assert not failures, "\n\n".join(f"== {label}\n{text}" for label, text in failures.items())
    published = [result.ok().label for result in schema.get_all_operations()]
    assert set(EXCLUDED) <= set(published), "an exclusion names no operation"
    assert sorted(ran) == sorted(set(published) - set(EXCLUDED)) and len(ran) >= 40, ran
    assert elapsed < BUDGET_SECONDS, f"{elapsed:.0f} s: lower EXAMPLES"
