"""Configuration history: a version after each successful apply (deduplicated, only when the kernel holds
everything), diffs by name, and a restore that is an import: previewed (dry run names what changes),
audited as ``restore``, applied like any change."""

from __future__ import annotations

import pytest
from django.db.models import F
from django.test import Client

from dataplane.tasks import apply_config, keep_version
from farms import services, versions
from farms.models import ApplyRun, AuditEvent, ConfigGeneration, ConfigVersion, Farm

pytestmark = pytest.mark.django_db


def applied() -> ApplyRun:
    """What the worker's apply leaves behind, without a kernel: every farm applied, an ok run."""
    generation = ConfigGeneration.current()
    Farm.objects.update(applied_generation=F("config_generation"))
    return ApplyRun.objects.create(generation=generation, kind="incremental", started="2026-11-24T00:00Z", ok=True)


def version_now() -> ConfigVersion | None:
    return versions.record_applied(applied())


@pytest.fixture
def history(admin_user):
    """Three versions: v1 web alone, v2 web + a backend + a policy, v3 web changed, db added, policy gone."""
    web = services.farm_create(name="web", vip="198.18.100.1", ports="80", mode="dnat", actor=admin_user)
    v1 = version_now()
    services.backend_create(farm=web, address="198.18.1.11", actor=admin_user)
    services.policy_create(name="blocked", elements="198.18.9.0/24", actor=admin_user)
    v2 = version_now()
    services.farm_update(farm=web, ports="80,443", actor=admin_user)
    services.backend_update(backend=web.backends.get(), weight=5, actor=admin_user)
    services.farm_create(name="db", vip="198.18.100.2", ports="5432", mode="dnat", actor=admin_user)
    services.policy_delete(policy=services.Policy.objects.get(), actor=admin_user)
    v3 = version_now()
    return v1, v2, v3


def test_a_version_per_applied_configuration_deduplicated(history):
    v1, v2, v3 = history
    assert [v.pk for v in ConfigVersion.objects.all()] == [v3.pk, v2.pk, v1.pk]
    assert (v2.farms, v2.backends, v2.policies) == (1, 1, 1)
    assert "exported_at" not in versions.document_of(v3)
    assert version_now() is None  # same document: nothing new (a health transition, a quiet reconcile)
    assert ConfigVersion.objects.count() == 3


def test_no_version_while_the_kernel_lacks_something(history):
    web = Farm.objects.get(name="web")
    run = applied()
    services.backend_update(backend=web.backends.get(), weight=7)  # saved after the run: not applied yet
    assert versions.record_applied(run) is None
    run = applied()
    Farm.objects.filter(pk=web.pk).update(apply_error="isolated, retried when the farm changes: refused")
    assert versions.record_applied(run) is None  # an isolated farm is not in the kernel
    Farm.objects.filter(pk=web.pk).update(apply_error="")
    failed = applied()
    ApplyRun.objects.filter(pk=failed.pk).update(ok=False)
    failed.refresh_from_db()
    assert versions.record_applied(failed) is None
    assert versions.document_of(versions.record_applied(applied()))["farms"][1]["backends"][0]["weight"] == 7


def test_the_worker_task_keeps_a_version(admin_user, monkeypatch):
    services.farm_create(name="web", vip="198.18.100.1", ports="80", mode="dnat")

    class FakeApplier:
        def __init__(self, kernel=None, cache=None):
            pass

        def apply_pending(self, requested=None, reason="change"):
            return applied()

    queued = []
    monkeypatch.setattr("dataplane.applier.Applier", FakeApplier)
    monkeypatch.setattr("dataplane.tasks.keep_version.apply_async", lambda args, retry: queued.append(args))
    apply_config(ConfigGeneration.current())
    assert not ConfigVersion.objects.exists() and len(queued) == 1  # behind the applies already queued
    keep_version(*queued[0])
    assert versions.document_of(ConfigVersion.objects.get())["farms"][0]["name"] == "web"

    def no_broker(args, retry):
        raise OSError("broker unreachable")

    monkeypatch.setattr("dataplane.tasks.keep_version.apply_async", no_broker)
    services.farm_update(farm=Farm.objects.get(), ports="81")
    apply_config(ConfigGeneration.current())
    assert versions.document_of(ConfigVersion.objects.first())["farms"][0]["ports"] == "81"  # kept at once


def test_diff_names_what_changed(client, history):
    v1, v2, v3 = history
    change = client.get(f"/api/v1/config-versions/{v3.pk}/diff/?against={v2.pk}").json()
    assert change["farms"]["added"] == ["db"] and change["farms"]["removed"] == []
    assert change["farms"]["changed"] == [{"name": "web", "fields": [{"field": "ports", "old": "80", "new": "80,443"}]}]
    assert change["backends"]["changed"] == [
        {"name": "web/198.18.1.11", "fields": [{"field": "weight", "old": 1, "new": 5}]}
    ]
    assert change["policies"]["removed"] == ["blocked"]
    assert '-      "ports": "80",' in change["text"] and '+      "ports": "80,443",' in change["text"]
    default = client.get(f"/api/v1/config-versions/{v2.pk}/diff/").json()  # against the one before
    assert default["old"] == v1.pk and default["backends"]["added"] == ["web/198.18.1.11"]
    listed = client.get("/api/v1/config-versions/").json()["results"]
    assert [v["id"] for v in listed] == [v3.pk, v2.pk, v1.pk] and "document" not in listed[0]
    assert client.get(f"/api/v1/config-versions/{v1.pk}/").json()["document"]["farms"][0]["name"] == "web"


def test_restore_previews_by_name_then_restores_audited(client, admin_user, history):
    v1, v2, v3 = history
    generation = ConfigGeneration.current()
    preview = client.post(f"/api/v1/config-versions/{v2.pk}/restore/?dry_run=1")
    assert preview.status_code == 200, preview.content
    body = preview.json()
    assert body["dry_run"] and body["changes"]["farms"] == {"created": [], "updated": ["web"], "deleted": ["db"]}
    assert body["changes"]["backends"]["updated"] == ["web/198.18.1.11"]
    assert body["changes"]["policies"]["created"] == ["blocked"]
    assert ConfigGeneration.current() == generation and Farm.objects.filter(name="db").exists()

    done = client.post(f"/api/v1/config-versions/{v2.pk}/restore/")
    assert done.status_code == 200 and not done.json()["dry_run"]
    web = Farm.objects.get()
    assert (web.name, web.ports, web.backends.get().weight) == ("web", "80", 1)
    assert ConfigGeneration.current() > generation  # the apply pipeline takes it from here
    event = AuditEvent.objects.first()
    assert (event.action, event.object_type, event.object_id, event.actor_name) == (
        "restore",
        "configuration",
        v2.pk,
        "admin",
    )
    assert versions.diff(versions.canonical(event.after), versions.document_of(v2))["text"] == ""
    assert version_now().digest == v2.digest  # the restored configuration, once applied, is a version again


def test_restore_needs_the_admin_role(history, role_users):
    from rest_framework.test import APIClient

    from tests.conftest import new_token

    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {new_token(role_users['operator'])}")
    assert api.post(f"/api/v1/config-versions/{history[0].pk}/restore/").status_code == 403
    assert api.get(f"/api/v1/config-versions/{history[0].pk}/diff/").status_code == 200


def test_import_dry_run_lists_names(client, admin_user):
    services.farm_create(name="old", vip="198.18.100.3", ports="80", mode="dnat")
    document = {
        "lbweb_config": 1,
        "policies": [],
        "farms": [{"name": "new", "vip": "198.18.100.4", "ports": "80", "backends": [{"address": "198.18.1.20"}]}],
    }
    body = client.post("/api/v1/config/import/?dry_run=1", document, format="json").json()
    assert body["changes"]["farms"] == {"created": ["new"], "updated": [], "deleted": ["old"]}
    assert body["changes"]["backends"]["created"] == ["new/198.18.1.20"]
    assert Farm.objects.get().name == "old"
    page = Client()
    page.force_login(admin_user)
    import json

    from django.core.files.uploadedfile import SimpleUploadedFile

    shown = page.post(
        "/config/",
        {"dry_run": "on", "file": SimpleUploadedFile("c.json", json.dumps(document).encode())},
    ).content.decode()
    assert 'id="import-changes"' in shown and "new/198.18.1.20" in shown and "old" in shown


def test_pages_list_compare_preview_and_restore(admin_user, role_users, history):
    v1, v2, v3 = history
    page = Client()
    page.force_login(admin_user)
    listed = page.get("/config/versions/").content.decode()
    assert all(f'id="version-{v.pk}"' in listed for v in history) and "Restore…" in listed
    shown = page.get(f"/config/versions/diff/?old={v2.pk}&new={v3.pk}").content.decode()
    assert "+ db" in shown and "− blocked" in shown and "~ web/198.18.1.11" in shown
    preview = page.get(f"/config/versions/{v1.pk}/restore/").content.decode()
    assert "What would change" in preview and "− db" in preview and "− web/198.18.1.11" in preview
    assert Farm.objects.count() == 2  # the preview changed nothing
    done = page.post(f"/config/versions/{v1.pk}/restore/")
    assert done.status_code == 302 and list(Farm.objects.values_list("name", flat=True)) == ["web"]
    assert AuditEvent.objects.first().action == "restore"

    viewer = Client()
    viewer.force_login(role_users["viewer"])
    assert viewer.get("/config/versions/").status_code == 200
    assert "Restore…" not in viewer.get("/config/versions/").content.decode()
    assert viewer.get(f"/config/versions/{v1.pk}/restore/").status_code == 403
    assert viewer.post(f"/config/versions/{v1.pk}/restore/").status_code == 403


def test_another_apps_section_rides_along_in_export_import_versions_and_restore(admin_user):
    """An app registers its part of the document (here: the network's DNS servers, through its service)."""
    from django.core.exceptions import ValidationError

    from farms import config_io
    from network import services as network_services
    from network.models import NetworkSettings

    def export():
        return {"dns_servers": NetworkSettings.load().dns_servers}

    def load(data, result):
        if not isinstance(data, dict) or set(data) != {"dns_servers"}:
            raise ValidationError({"dns_servers": "Give dns_servers, and nothing else."})
        settings = NetworkSettings.load()
        if settings.dns_servers == data["dns_servers"]:
            result.count("dns", "unchanged")
            return
        network_services.settings_update(settings=settings, dns_servers=data["dns_servers"])
        result.count("dns", "updated", "dns_servers")

    config_io.register_section("dns", export, load)
    try:
        network_services.settings_update(settings=NetworkSettings.load(), dns_servers="198.18.0.53")
        services.farm_create(name="web", vip="198.18.100.1", ports="80", mode="dnat")
        before = version_now()
        assert versions.document_of(before)["dns"] == {"dns_servers": "198.18.0.53"}
        network_services.settings_update(settings=NetworkSettings.load(), dns_servers="198.18.0.54")
        after = version_now()
        assert (
            '+    "dns_servers": "198.18.0.54"'
            in versions.diff(versions.document_of(before), versions.document_of(after))["text"]
        )

        preview = versions.restore(version=before, actor=admin_user, dry_run=True)
        assert preview.changes["dns"]["updated"] == ["dns_servers"]
        assert NetworkSettings.load().dns_servers == "198.18.0.54"  # a dry run changes nothing
        assert versions.restore(version=before, actor=admin_user).ok
        assert NetworkSettings.load().dns_servers == "198.18.0.53"
        assert AuditEvent.objects.first().action == "restore"  # one event, not one per object

        bad = config_io.import_config({**config_io.export_config(), "dns": ["nope"]}, actor=admin_user)
        assert not bad.ok and [(e.location, e.field) for e in bad.errors] == [("dns", "dns_servers")]
        old = {k: v for k, v in config_io.export_config().items() if k != "dns"}
        assert config_io.import_config(old, actor=admin_user).ok  # a document without the part leaves it
        assert NetworkSettings.load().dns_servers == "198.18.0.53"
    finally:
        config_io.SECTIONS.pop("dns")
    assert config_io.import_config({**config_io.export_config(), "dns": {}}).errors[0].message == "Unknown field 'dns'."


def test_a_version_after_a_change_of_one_farm_exports_that_farm_alone(monkeypatch):
    """Issue 13: a version costs what its change touched. The worker remembers each farm's part; after a
    change of one backend only that farm is exported again, and the version's document is the full export."""
    from farms import config_io
    from farms.models import ConfigPart

    farms = [services.farm_create(name=f"f{i}", vip=f"198.18.100.{i + 1}", ports="80", mode="dnat") for i in range(20)]
    for farm in farms:
        services.backend_create(farm=farm, address=f"198.18.1.{farm.pk % 200 + 1}")
    versions.PARTS.reset()
    first = version_now()
    assert versions.PARTS.exported == 20
    exported = []
    real = config_io.farm_entries
    monkeypatch.setattr(config_io, "farm_entries", lambda ids: exported.append(ids) or real(ids))
    services.backend_update(backend=farms[7].backends.get(), weight=9)
    second = version_now()
    assert exported == [[farms[7].pk]] and versions.PARTS.exported == 1
    assert (
        ConfigPart.objects.count() == 20 + 1 + 1 + 1
    )  # each farm once, f7's new part, the (empty) policy list, l7's http section
    fresh = ConfigVersion.objects.get(pk=second.pk)
    assert versions.document_of(fresh) == versions.canonical(config_io.export_config())
    assert (fresh.farms, fresh.backends) == (20, 20)
    assert versions.diff(versions.document_of(first), versions.document_of(fresh))["backends"]["changed"] == [
        {"name": f"f7/{farms[7].backends.get()}", "fields": [{"field": "weight", "old": 1, "new": 9}]}
    ]
    services.farm_update(farm=farms[3], policies=[services.policy_create(name="blocked", elements="198.18.9.0/24")])
    services.policy_update(policy=services.Policy.objects.get(), name="denied")  # its farms' generation moves
    (f3,) = [f for f in versions.document_of(version_now())["farms"] if f["name"] == "f3"]
    assert f3["policies"] == ["denied"]


def test_parts_no_version_holds_are_collected(settings):
    from farms.models import ConfigPart

    settings.LBWEB_CONFIG_VERSIONS_KEEP = 2
    farm = services.farm_create(name="web", vip="198.18.100.1", ports="80", mode="dnat")
    backend = services.backend_create(farm=farm, address="198.18.1.11")
    for weight in range(2, 6):
        services.backend_update(backend=backend, weight=weight)
        version_now()
    assert ConfigVersion.objects.count() == 2
    assert versions.collect_parts() == 2  # the farm's parts at weights 2 and 3
    assert ConfigPart.objects.count() == 4  # the farm at weights 4 and 5, the policy list, l7's http section
    assert [versions.document_of(v)["farms"][0]["backends"][0]["weight"] for v in ConfigVersion.objects.all()] == [5, 4]


def test_a_version_kept_whole_before_parts_reads_as_before():
    old = ConfigVersion.objects.create(generation=1, digest="x", whole={"lbweb_config": 1, "farms": [], "policies": []})
    assert versions.document_of(ConfigVersion.objects.get(pk=old.pk)) == {
        "lbweb_config": 1,
        "farms": [],
        "policies": [],
    }
