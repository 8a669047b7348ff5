"""A single-backend change costs the same number of database queries with 10 farms as with 200 (issue 13:
a single-backend change at 10,000 farms stays within 2x its cost at 100). Counted, not timed: the machine
is shared, the count is exact."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from farms.models import Backend, Farm

pytestmark = pytest.mark.django_db


def add_farms(count: int, start: int = 0) -> None:
    farms = Farm.objects.bulk_create(
        Farm(
            name=f"q{i:05d}",
            vip=f"198.18.{128 + i // 250}.{1 + i % 250}",
            protocol="tcp",
            ports="80",
            mode="dnat",
            scheduler="weight",
        )  # fmt: skip
        for i in range(start, start + count)
    )
    Backend.objects.bulk_create(
        Backend(farm=f, address=f"198.19.{(n := i * 3 + j) // 250}.{1 + n % 250}", port=80, weight=1 + j)
        for i, f in enumerate(farms, start)
        for j in range(3)
    )


def patch_queries(client, backend_id: int, weight: int) -> list[str]:
    with CaptureQueriesContext(connection) as queries:
        response = client.patch(f"/api/v1/backends/{backend_id}/", {"weight": weight}, format="json")
    assert response.status_code == 200, response.content
    return [q["sql"] for q in queries.captured_queries]


def test_a_backend_patch_queries_the_same_with_10_and_200_farms(client):
    add_farms(10)
    backend = Backend.objects.filter(farm__name="q00005").order_by("id").first()
    patch_queries(client, backend.id, 7)  # warm: first-use queries (content types, sessions) are not the farms'
    small = patch_queries(client, backend.id, 8)
    add_farms(190, start=10)
    large = patch_queries(client, backend.id, 9)
    assert len(large) == len(small), "\n".join(large)
