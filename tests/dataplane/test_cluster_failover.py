"""One failover of the HA pair under traffic, in the namespace lab of ``tests/support/lab_ha.py``: real keepalived and
conntrackd (configured by lbweb's generators, running as lbweb with only their capabilities), lbweb's compiled
ruleset on both nodes, lbweb's transition handler.

While 50 keep-alive connections stay open and new ones keep coming through a DNAT, a SNAT and a persistence
farm, the master's keepalived is killed: the backup commits conntrackd's copy of the connections before it adds
the addresses (checked in its journal), no established connection is lost, no new connection fails outside
the failover window, and the persistence entries are on the new master (nobody's persistence binding moves).
``bench/failover.py`` does the same over 10 failovers of every kind, beside the classic set-up.
"""

from __future__ import annotations

import os

import pytest

from tests.support.lab_ha import VIPS, HaLab, Traffic, analyse, failover, reachable_dir

pytestmark = pytest.mark.dataplane


@pytest.fixture
def ha_lab():
    if os.geteuid() != 0:
        pytest.fail("the HA lab builds network namespaces: run the suite as root")
    with reachable_dir("lbweb-ha") as work:
        lab = HaLab(work / "ha").build()
        try:
            lab.start()
            lab.wait_preferred(timeout=40)
            yield lab
        finally:
            lab.destroy()


def test_failover_keeps_every_connection_and_persistence(ha_lab):
    old = ha_lab.wait_master()
    assert all(ha_lab.holds(old, vip) for vip in VIPS.values())
    traffic = Traffic(ha_lab, keepalive=50)
    import time

    time.sleep(2)  # connections established and synchronised
    row = failover(ha_lab, "kill", settle=2)
    report = traffic.stop()
    result = analyse([row], report, traffic.ready)

    new = row["to"]
    assert new != old and ha_lab.role(old) in ("STOP", "BACKUP")
    assert all(ha_lab.holds(new, vip) for vip in VIPS.values())
    assert not any(ha_lab.holds(old, vip) for vip in VIPS.values()), "the old master kept the addresses"
    assert row["commit_before_addresses"] and row["steps_ok"], ha_lab.journal(new)[-1]
    assert row["failover_s"] < 5
    assert result["keepalive_connections"] == 50
    assert result["established_lost"] == 0, result["lost_detail"]
    assert result["new_failed_beyond_window"] == 0, result["beyond_detail"]
    assert row["persistence_entries"] >= 4  # one per client address, rebuilt from the synchronised conntrack
    assert result["persistence_sources_moved"] == []
    assert result["new_attempts"] > 50
