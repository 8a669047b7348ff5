"""Hostile bodies against every operation of the API that takes one: never a 5xx, always a JSON answer.

The operations are those of the OpenAPI schema (drf-spectacular, as ``/api/schema/`` serves it), each with
a path to an object that exists (one of each kind is made first), so the body is read, not refused by a 404
before. Each gets a body nested 50,000 levels deep (arrays, then objects), a body larger than any endpoint
takes and one that is not JSON at all. tests/lbweb/test_api_schema_fuzz.py sends bodies that follow (or break) the
schema; these are the ones no schema describes.
"""

from __future__ import annotations

import re

import pytest
from django.urls import resolve

from farms import services
from tests.farms.test_api import farm_data

pytestmark = pytest.mark.django_db

DOCUMENT_LIMIT = 3 * 1024 * 1024  # the document endpoints' limit in this test (64 MB by default): 4 MB is too much
HOSTILE = {
    "arrays 50,000 deep": "[" * 50_000,
    "objects 50,000 deep": '{"a":' * 50_000,
    "4 MB": '{"a": "' + "x" * (4 * 1024 * 1024) + '"}',
    "not JSON": "{'farms': [",
}


def seed() -> None:
    """One object of each kind a path names (the HTTP farm first: the first farm is the one a path gets)."""
    from bgp.services import peer_create
    from farms.health_services import health_check_create
    from l7 import services as l7_services
    from monitoring.models import MetricsToken
    from network import services as network
    from remotelog.services import syslog_server_create

    web = services.farm_create(name="shop", vip="198.18.100.2", ports="80", mode="http")
    l7_services.service_create(farm=web, name="api", path_prefix="/api")
    l7_services.certificate_self_signed(name="shop", names=["shop.test"])
    policy = services.policy_create(name="deny", elements="198.18.9.0/24")
    farm = services.farm_create(**farm_data(scheduler="weight", persistence="srcip"), policies=[policy])
    backend = services.backend_create(farm=web, address="198.18.1.11", port=80)
    services.backend_create(farm=farm, address="198.18.1.12")
    services.session_create(farm=farm, client="198.18.0.2", backend=farm.backends.get())
    health_check_create(farm=web, type="tcp")
    eth = network.interface_create(name="eth9", kind="ethernet")
    network.route_create(destination="198.18.50.0/24", gateway="198.18.0.254", interface=eth)
    MetricsToken.issue(name="prometheus")
    syslog_server_create(name="siem", host="198.18.10.1", port=514)
    peer_create(name="router", address="198.18.10.2", asn=64512)
    assert backend.farm_id == web.id


def operations(client) -> list[tuple[str, str]]:
    schema = client.get("/api/schema/?format=json").json()
    found = []
    for path, items in schema["paths"].items():
        for method, operation in items.items():
            if method in ("post", "put", "patch") and "requestBody" in operation:
                found.append((method, path))
    return found


def concrete(path: str) -> str:
    """``path`` with each ``{parameter}`` the id of an object of the view's queryset (1 where it has none)."""
    if "{" not in path:
        return path
    guess = re.sub(r"\{[^}]+\}", "1", path)
    view = resolve(guess).func
    queryset = getattr(getattr(view, "cls", None), "queryset", None)
    first = queryset.order_by("pk").first() if queryset is not None else None
    return re.sub(r"\{[^}]+\}", str(first.pk) if first else "1", path)


def test_every_operation_with_a_body_answers_hostile_bodies_in_json_and_never_5xx(client, settings):
    settings.LBWEB_IMPORT_MAX_BYTES = DOCUMENT_LIMIT
    seed()
    found = operations(client)
    assert len(found) >= 40, found
    failures, reached = [], 0
    for method, path in found:
        url = concrete(path)
        for kind, body in HOSTILE.items():
            response = getattr(client, method)(url, body, content_type="application/json")
            reached += response.status_code != 404
            if response.status_code >= 500 or response["Content-Type"] != "application/json":
                failures.append(f"{method.upper()} {url} {kind}: {response.status_code} {response.content[:200]!r}")
    assert not failures, "\n".join(failures)
    assert reached == len(found) * len(HOSTILE), f"only {reached} requests reached a view (not a 404)"
