"""The BGP page and its edit pages: every role reads the page; admins change the settings, peers and a farm's
announcement through the same services as the API (the same refusals, on the field), and drain the node."""

from __future__ import annotations

import pytest
from django.test import Client

from bgp.models import BgpPeer, BgpSettings, FarmAnnouncement
from farms.models import AuditEvent, Farm

pytestmark = pytest.mark.django_db


def test_admins_configure_bgp_through_the_pages(admin_client):
    farm = Farm.objects.create(name="web", vip="198.18.100.1", ports="80")
    assert admin_client.get("/bgp/").status_code == 200
    response = admin_client.post(
        "/bgp/settings/",
        {
            "local_asn": 65000,
            "router_id": "198.18.40.1",
            "enabled": "on",
            "bfd_interval_ms": 100,
            "bfd_multiplier": 3,
            "drain_seconds": 30,
        },
    )
    assert response.status_code == 302, response.content.decode()[-2000:]
    peer = {"name": "r1", "address": "198.18.40.2", "asn": 65001, "password": "pw # x", "hold_time": 9,
            "keepalive_time": 3, "multihop": 0, "bfd": "on", "source_address": ""}  # fmt: skip
    assert admin_client.post("/bgp/peers/new/", peer).status_code == 302
    stored = BgpPeer.objects.get()
    assert stored.password == "pw # x"
    page = admin_client.get(f"/bgp/peers/{stored.pk}/").content.decode()
    assert "pw # x" not in page  # write-only here too
    assert admin_client.post(f"/bgp/peers/{stored.pk}/", {**peer, "password": "", "hold_time": 30,
                                                          "keepalive_time": 10}).status_code == 302  # fmt: skip
    assert BgpPeer.objects.get().password == "pw # x"  # an empty field keeps it
    refused = admin_client.post(f"/bgp/farms/{farm.pk}/", {"announce": "on", "communities": "65000:1;}", "med": ""})
    assert refused.status_code == 200 and "ASN:VALUE" in refused.content.decode()
    assert not FarmAnnouncement.objects.exists()
    saved = admin_client.post(f"/bgp/farms/{farm.pk}/", {"announce": "on", "communities": "65000:1", "med": "7"})
    assert saved.status_code == 302 and FarmAnnouncement.objects.get().med == 7
    assert admin_client.post("/bgp/drain/", {"drained": "1"}).status_code == 302
    assert BgpSettings.load().drained is True
    page = admin_client.get("/bgp/").content.decode()
    assert "drained" in page and "r1" in page and "65000:1" in page
    assert AuditEvent.objects.filter(action="drain").exists()


def test_only_admins_write(role_users):
    for role, allowed in (("viewer", False), ("operator", False), ("admin", True)):
        browser = Client()
        browser.force_login(role_users[role])
        page = browser.get("/bgp/")
        assert page.status_code == 200 and ("Drain this node" in page.content.decode()) == allowed
        response = browser.post("/bgp/drain/", {"drained": "1"})
        assert (response.status_code == 302) == allowed, (role, response.status_code)
