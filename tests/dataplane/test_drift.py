"""Drift, unit by unit, on the real kernel: every kind of hand edit of lbweb's tables is reported by
``manage.py kernel --check`` (exit 1, naming the unit and what differs) and repaired by the next reconcile,
which rewrites only the drifted unit: another farm's persistence entries and counters stay as they were."""

from __future__ import annotations

import html
import json
import re
import subprocess

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from farms.models import ApplyRun
from tests.conftest import wait_for
from tests.dataplane.test_dataplane import kernel_check, make_farm
from tests.dataplane.test_dsr_stateless import l2lab, l2worker  # noqa: F401 (the one-segment lab's fixtures)
from tests.support.lab import CLIENT4, vip4

pytestmark = [pytest.mark.dataplane, pytest.mark.django_db(transaction=True)]

TARGET_VIP, OTHER_VIP = vip4(80), vip4(81)


def nft(lab, *args, check=True):
    return lab.ns(lab.lb, "nft", *args, check=check)


def handle_of(lab, chain: str, needle: str) -> int:
    """The handle of the first rule of ``chain`` (in lbweb's table) whose listing contains ``needle``."""
    for line in nft(lab, "-a", "list", "chain", "inet", "lbweb", chain).stdout.splitlines():
        if needle in line and "# handle" in line:
            return int(re.search(r"# handle (\d+)", line).group(1))
    raise AssertionError(f"no rule with {needle!r} in {chain}")


def persistence_entries(lab, farm: str) -> list:
    sets = json.loads(nft(lab, "-j", "list", "sets", "inet").stdout)["nftables"]
    names = [s["set"]["name"] for s in sets if "set" in s and s["set"]["name"].startswith(f"persist-{farm}-")]
    entries = []
    for name in names:
        listing = json.loads(nft(lab, "-j", "list", "set", "inet", "lbweb", name).stdout)["nftables"]
        entries += [str(e) for item in listing if "set" in item for e in item["set"].get("elem", [])]
    return entries


def counter_packets(lab, name: str) -> int:
    return lab.lbweb_counter(name)["packets"]


@pytest.fixture
def farms(api, worker, lab):
    """A farm to tamper with (behind a deny policy), and another with a persistence entry and counted traffic."""
    policy = api.post("policies/", {"name": "blocklist", "type": "deny", "elements": "198.18.0.99, 198.18.0.98"})
    target = make_farm(api, "target", TARGET_VIP, policies=["blocklist"])
    make_farm(api, "other", OTHER_VIP, scheduler="weight", persistence="srcip", persist_ttl=3600)
    assert len(lab.http_get(OTHER_VIP, 80, count=3)) == 3
    ok, report = kernel_check(lab, worker)
    assert ok, report
    return {
        "target": f"farm:{target['id']}",
        "policy": f"policy:{policy['id']}",
        "skeleton": "skeleton",
        "prerouting": "hook:prerouting",
        "id": target["id"],
    }


def tamper_and_repair(api, worker, lab, farms, script: str, unit: str, differences: list[str]) -> ApplyRun:
    """Run the nft ``script`` in the LB namespace; check the report, the repair, and the bystander's state."""
    from dataplane.tasks import reconcile

    unit = farms[unit]
    entries = persistence_entries(lab, "other")
    assert any(CLIENT4 in e for e in entries), entries
    packets = counter_packets(lab, "farm-other")
    assert packets > 0
    subprocess.run(["ip", "netns", "exec", lab.lb, "nft", "-f", "-"], input=script, text=True, check=True)
    ok, report = kernel_check(lab, worker)
    assert not ok, report
    assert unit in report, report
    for difference in differences:
        assert difference in report, report
    first = ApplyRun.objects.order_by("-id").first().id
    reconcile.apply_async(kwargs={"reason": "tamper test"})
    run = wait_for(
        lambda: ApplyRun.objects.filter(id__gt=first, reason__startswith="tamper test").first(), what="the repair"
    )
    assert run.ok, run.error
    assert run.kind == "repair", (run.kind, run.reason, run.drift)
    assert [d["unit"] for d in run.drift] == [unit], run.drift
    for difference in differences:
        assert any(difference in text for d in run.drift for text in d["differences"]), run.drift
    ok, report = kernel_check(lab, worker)
    assert ok, report
    # only the drifted unit was rewritten: the other farm kept its persistence entry and its counter
    assert persistence_entries(lab, "other") and any(CLIENT4 in e for e in persistence_entries(lab, "other"))
    assert counter_packets(lab, "farm-other") >= packets
    assert {a["backend"] for a in lab.http_get(TARGET_VIP, 80, count=3)} == {"b1", "b2", "b3"}
    # the apply history says what differed, through the API and on its page
    listed = api.get("apply-runs/?limit=1")["results"][0]
    assert listed["kind"] == "repair" and listed["drift"] == run.drift
    client = Client()
    client.force_login(get_user_model().objects.get(username="admin"))
    page = client.get("/apply-runs/").content.decode()
    assert all(html.escape(text) in page for d in run.drift for text in d["differences"]), page
    return run


def test_a_policy_rule_deleted_from_a_farm_chain(api, worker, lab, farms):
    handle = handle_of(lab, "guard-target", "@policy-blocklist-v4")  # policies: every packet, the guard chain
    script = f"delete rule inet lbweb guard-target handle {handle}"
    tamper_and_repair(api, worker, lab, farms, script, "target", ["chain guard-target: rule 1 of"])
    assert handle_of(lab, "guard-target", "@policy-blocklist-v4")  # the deny rule is back


def test_a_rule_added_to_a_farm_chain(api, worker, lab, farms):
    script = "insert rule inet lbweb farm-target ip saddr 198.18.0.2 drop"
    tamper_and_repair(api, worker, lab, farms, script, "target", ["chain farm-target: 1 rule(s) added at position 1"])


def test_a_rule_changed_in_a_farm_chain(api, worker, lab, farms):
    handle = handle_of(lab, "guard-target", "@policy-blocklist-v4")
    script = f"replace rule inet lbweb guard-target handle {handle} ip saddr 198.18.0.77 drop"
    tamper_and_repair(api, worker, lab, farms, script, "target", ["chain guard-target: rule 1 of", "changed"])


def test_a_chain_deleted(api, worker, lab, farms):
    script = f"delete element inet lbweb dispatch4 {{ {TARGET_VIP} . tcp . 80 }}\ndelete chain inet lbweb farm-target"
    # the chain goes with its rules; its counters are still used by nothing and stay
    run = tamper_and_repair(
        api,
        worker,
        lab,
        farms,
        script,
        "target",
        ["chain farm-target missing", "elements of dispatch4: 1 missing"],
    )
    assert "farm-target" in nft(lab, "list", "chain", "inet", "lbweb", "farm-target").stdout
    assert run.farms_changed == 1


def test_a_shared_map_element_deleted(api, worker, lab, farms):
    script = f"delete element inet lbweb dispatch4 {{ {TARGET_VIP} . tcp . 80 }}"
    tamper_and_repair(api, worker, lab, farms, script, "target", ["elements of dispatch4: 1 missing"])


def test_a_shared_map_element_added(api, worker, lab, farms):
    script = "add element inet lbweb dispatch4 { 198.18.100.99 . tcp . 80 : jump farm-target }"
    tamper_and_repair(api, worker, lab, farms, script, "target", ["elements of dispatch4: 1 added"])
    assert "198.18.100.99" not in nft(lab, "list", "map", "inet", "lbweb", "dispatch4").stdout


def test_a_static_set_element_deleted(api, worker, lab, farms):
    script = "delete element inet lbweb policy-blocklist-v4 { 198.18.0.99 }"
    tamper_and_repair(api, worker, lab, farms, script, "policy", ["elements of policy-blocklist-v4: 2 missing"])


def test_a_set_definition_changed(api, worker, lab, farms):
    script = (
        "delete set inet lbweb policy-blocklist-v6\nadd set inet lbweb policy-blocklist-v6 { type ipv6_addr; size 7; }"
    )
    tamper_and_repair(api, worker, lab, farms, script, "policy", ["set policy-blocklist-v6 changed"])


def test_a_counter_deleted(api, worker, lab, farms):
    handle = handle_of(lab, "guard-target", "@policy-blocklist-v4")
    drops = "drop-target-policy-blocklist"  # logs the policy's drops at the log rate, then counts them
    script = (
        f"delete rule inet lbweb guard-target handle {handle}\nflush chain inet lbweb {drops}\n"
        f"delete chain inet lbweb {drops}\ndelete counter inet lbweb farm-target-policy"
    )
    tamper_and_repair(api, worker, lab, farms, script, "target", ["counter farm-target-policy missing"])


def test_an_extra_chain_in_lbwebs_table(api, worker, lab, farms):
    script = "add chain inet lbweb intruder\nadd rule inet lbweb intruder counter accept"
    tamper_and_repair(api, worker, lab, farms, script, "skeleton", ["chain intruder added"])
    assert "intruder" not in nft(lab, "list", "table", "inet", "lbweb").stdout


def test_a_rule_added_to_a_base_chain(api, worker, lab, farms):
    script = "insert rule inet lbweb prerouting ip saddr 198.18.0.2 accept"
    differences = ["chain prerouting: 1 rule(s) added at position 1"]
    tamper_and_repair(api, worker, lab, farms, script, "prerouting", differences)  # the NAT farms' hook unit


def test_a_dsr_table_tampered_is_rewritten_alone(api, l2worker, l2lab):  # noqa: F811
    """A DSR farm owns a netdev table: a rule added to it is drift of that farm; the next reconcile re-makes
    that table and leaves the other DSR farm's table (and its counter) as it was."""
    from dataplane.tasks import reconcile
    from tests.dataplane.test_dsr_stateless import dsr_farm
    from tests.dataplane.test_dsr_stateless import kernel_check as l2_check
    from tests.support import lab_l2 as l2

    victim = api.wait_applied(
        dsr_farm(api, "dsr-victim", l2.vip4(5), ["b1"], scheduler="hash", sched_param="srcip")["id"]
    )
    bystander = dsr_farm(api, "dsr-bystander", l2.vip4(6), ["b2"], scheduler="hash", sched_param="srcip")
    api.wait_applied(bystander["id"])
    assert l2lab.http_get(l2.vip4(6), 80)[0]["backend"] == "b2"
    table = "lbweb-dsr-dsr-bystander"
    counted = json.loads(
        l2lab.ns(l2lab.lb, "nft", "-j", "list", "counter", "netdev", table, "farm-dsr-bystander").stdout
    )
    before = next(i["counter"]["packets"] for i in counted["nftables"] if "counter" in i)
    assert before > 0
    ok, report = l2_check(l2lab, l2worker)
    assert ok, report
    l2lab.ns(
        l2lab.lb,
        "nft",
        "insert",
        "rule",
        "netdev",
        "lbweb-dsr-dsr-victim",
        "ingress",
        "ip",
        "saddr",
        "198.18.0.2",
        "drop",
    )
    ok, report = l2_check(l2lab, l2worker)
    assert not ok and f"farm:{victim['id']}" in report, report
    assert "chain netdev lbweb-dsr-dsr-victim:ingress: 1 rule(s) added at position 1" in report, report
    reconcile.apply_async(kwargs={"reason": "tamper test"})
    run = wait_for(lambda: ApplyRun.objects.filter(reason__startswith="tamper test").first(), what="the repair")
    assert run.ok and run.kind == "repair", (run.kind, run.error)
    assert [d["unit"] for d in run.drift] == [f"farm:{victim['id']}"], run.drift
    ok, report = l2_check(l2lab, l2worker)
    assert ok, report
    counted = json.loads(
        l2lab.ns(l2lab.lb, "nft", "-j", "list", "counter", "netdev", table, "farm-dsr-bystander").stdout
    )
    assert next(i["counter"]["packets"] for i in counted["nftables"] if "counter" in i) >= before  # not re-made
    assert l2lab.http_get(l2.vip4(5), 80)[0]["backend"] == "b1"
