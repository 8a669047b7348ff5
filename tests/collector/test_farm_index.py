"""The collector's farm index against the compiler: the counters it adds up are the counters the compiler creates.

The kernel counts a NAT farm's bytes by backend and direction (one lookup per packet); the farm's bytes each
way and each backend's are sums the collector makes (``collector.sampler.add_sums``). A name that drifted
apart would show a farm as silent while its backends carry traffic, so this compares the two, without root.
The real-traffic proof is ``tests/monitoring/test_monitoring.py`` (the sums against the client's own interface).
"""

from __future__ import annotations

import pytest

import compiler
from collector.sampler import add_sums
from dataplane.kernel.interface import CounterValue
from farms import services
from farms.specs import farm_spec
from monitoring.farm_index import build_index, farm_info

pytestmark = pytest.mark.django_db


def kernel_counters(farm) -> set[str]:
    return {name for kind, name in compiler.compile_farm(farm_spec(farm)).objects.objects if kind == "counter"}


def test_every_counter_a_sum_adds_up_is_one_the_compiler_creates_and_every_traffic_counter_is_added():
    farm = services.farm_create(
        name="web-2",  # a "-" in the name: no two counter names may read alike
        vip="198.18.100.1",
        protocol="tcp",
        ports="80",
        mode="dnat",
        when_all_down="fallback",
        fallback_address="198.18.1.99",
    )
    first = services.backend_create(farm=farm, address="198.18.1.11")
    services.backend_create(farm=farm, address="198.18.1.11", port=8080)  # same address: counted on the first
    disabled = services.backend_create(farm=farm, address="198.18.1.12", state="disabled")  # draining: counted
    info = farm_info(farm)
    created = kernel_counters(farm)
    parts = {part for _name, group in info.sums for part in group}
    assert parts <= created
    assert {name for name in created if name.startswith("traffic-")} <= parts
    sums = dict(info.sums)
    assert list(sums)[:2] == [info.traffic_in_counter, info.traffic_out_counter]
    assert set(sums) - {info.traffic_in_counter, info.traffic_out_counter} == {b.traffic_counter for b in info.backends}
    assert f"traffic-be-web-2-{first.id}-in" in sums[info.traffic_in_counter]
    assert "traffic-be-web-2-fallback-out" in sums[info.traffic_out_counter]
    # What a reading asks the kernel for: its own counters, not the sums it makes of them.
    names = build_index([info]).counter_names
    assert parts <= names and names - created == {f"be-web-2-{disabled.id}"}  # no chain while it is disabled
    assert {info.new_connections_counter, *(b.new_connections_counter for b in info.backends)} <= names


def test_a_sum_is_read_only_when_every_counter_it_adds_is_there():
    farm = services.farm_create(name="web", vip="198.18.100.1", protocol="tcp", ports="80", mode="snat")
    one = services.backend_create(farm=farm, address="198.18.1.11")
    two = services.backend_create(farm=farm, address="198.18.1.12")
    info = farm_info(farm)
    reading = {name: CounterValue(2, 100) for name in kernel_counters(farm)}
    add_sums(reading, [info], backends=False)
    assert reading[info.traffic_in_counter] == reading[info.traffic_out_counter] == CounterValue(4, 200)
    assert info.backends[0].traffic_counter not in reading  # the backends' sums only when asked for
    add_sums(reading, [info], backends=True)
    assert reading[f"traffic-be-web-{one.id}"] == reading[f"traffic-be-web-{two.id}"] == CounterValue(4, 200)
    half = {name: CounterValue(2, 100) for name in kernel_counters(farm) if name != f"traffic-be-web-{two.id}-out"}
    add_sums(half, [info], backends=False)
    add_sums(half, [info], backends=True)
    assert info.traffic_out_counter not in half and f"traffic-be-web-{two.id}" not in half  # no figure, not a wrong one
    assert half[info.traffic_in_counter] == CounterValue(4, 200) and half[f"traffic-be-web-{one.id}"]


def test_a_local_farm_reads_its_own_counters():
    farm = services.farm_create(name="onbox", vip="198.18.100.30", protocol="tcp", ports="443", mode="local")
    info = farm_info(farm)
    assert info.sums == ()
    assert {info.traffic_in_counter, info.traffic_out_counter} <= kernel_counters(farm)
