"""The backup that restores the appliance (system/backup): the sealed archive, a restore onto a fresh database that
reproduces every section, and a wrong passphrase, a damaged archive or a refused value that change nothing."""

from __future__ import annotations

import json
import os
import stat

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from farms.models import AuditEvent
from system.backup import archive, sections
from system.backup import services as backup
from tests.conftest import new_token
from tests.support import backup_appliance

PASSPHRASE = "correct horse battery staple"


# -- the archive (pure) -----------------------------------------------------------------------------


def test_an_archive_opens_with_its_passphrase_only():
    sealed = archive.seal(b'{"a": 1}', PASSPHRASE)
    assert archive.open_(sealed, PASSPHRASE) == b'{"a": 1}'
    assert b'"a"' not in sealed
    with pytest.raises(archive.WrongPassphrase):
        archive.open_(sealed, PASSPHRASE + "!")


@pytest.mark.parametrize("where", ["body", "tag", "header", "truncated", "magic"])
def test_a_damaged_archive_is_named_damaged(where):
    sealed = bytearray(archive.seal(b"x" * 1000, PASSPHRASE))
    if where == "body":
        sealed[archive.HEADER.size + 5] ^= 1
    elif where == "tag":
        sealed[-1] ^= 1
    elif where == "header":
        sealed[archive.HEADER.size - 20] ^= 1  # the nonce: authenticated as associated data
    elif where == "truncated":
        del sealed[-200:]
    else:
        sealed[0] ^= 1
    with pytest.raises(archive.ArchiveError) as caught:
        archive.open_(bytes(sealed), PASSPHRASE)
    assert caught.value.field == "archive"


def test_a_hostile_header_cannot_ask_for_a_huge_key_derivation():
    sealed = bytearray(archive.seal(b"x", PASSPHRASE))
    sealed[16] = 30  # log2 N: 2**30 would need 1 TiB of memory
    with pytest.raises(archive.DamagedArchive):
        archive.open_(bytes(sealed), PASSPHRASE)


# -- restore onto a fresh appliance --------------------------------------------------------------------


@pytest.fixture
def admin_client(admin_user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {new_token(admin_user)}")
    return client


def download(client: APIClient, passphrase: str = PASSPHRASE) -> bytes:
    response = client.post("/api/v1/system/backup/", {"passphrase": passphrase}, format="json")
    assert response.status_code == 200, response.content
    assert response["Content-Disposition"].startswith('attachment; filename="lbweb-')
    return response.content


def restore(client: APIClient, data: bytes, passphrase: str = PASSPHRASE, **extra):
    from django.core.files.uploadedfile import SimpleUploadedFile

    upload = SimpleUploadedFile("appliance.lbbackup", data, content_type="application/octet-stream")
    return client.post("/api/v1/system/backup/restore/", {"archive": upload, "passphrase": passphrase, **extra})


def sections_now() -> dict:
    return backup.document()["sections"]


@pytest.mark.django_db
def test_a_restore_onto_a_fresh_appliance_reproduces_every_section(admin_user, admin_client):
    backup_appliance.build(admin_user)
    before = sections_now()
    data = download(admin_client)
    assert set(before) == set(sections.SECTIONS) >= {
        "configuration", "health_checks", "certificates", "accounts", "authentication", "network", "cluster",
        "syslog_servers", "bgp",
    }  # fmt: skip
    for secret in (backup_appliance.BIND_PASSWORD, "PRIVATE KEY", backup_appliance.TOTP_KEY):
        assert secret in json.dumps(before) and secret.encode() not in data

    backup_appliance.wipe()
    assert sections_now() != before
    response = restore(admin_client, data)
    assert response.status_code == 200, response.json()
    after = sections_now()
    assert after == before  # every section: farms, HTTP farms, certificates with keys, accounts, secrets...
    counts = response.json()["counts"]
    assert counts["farms"]["created"] == 2 and counts["certificates"]["created"] == 1
    assert counts["accounts"]["created"] == 3 and counts["accounts"]["updated"] == 1  # admin's own row updated
    event = AuditEvent.objects.filter(action="restore", object_type="appliance").get()
    assert event.actor_name == "admin" and "farms" in event.after["counts"]
    recorded = json.dumps([[e.before, e.after] for e in AuditEvent.objects.all()])
    for secret in (backup_appliance.BIND_PASSWORD, "radius-shared-secret", "PRIVATE KEY", backup_appliance.TOTP_KEY):
        assert secret not in recorded


@pytest.mark.django_db
def test_the_restoring_account_that_the_archive_lacks_is_deleted_and_named_on_the_record(admin_user, admin_client):
    data = download(admin_client)
    stranger = get_user_model().objects.create_superuser("stranger", "", "stranger-password")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {new_token(stranger)}")
    response = restore(client, data)
    assert response.status_code == 200, response.json()
    assert response.json()["changes"]["accounts"]["deleted"] == ["stranger"]
    assert not get_user_model().objects.filter(username="stranger").exists()
    event = AuditEvent.objects.get(action="restore")
    assert event.actor is None and event.actor_name == "stranger"


@pytest.mark.django_db
def test_no_secret_reaches_a_log_the_api_or_the_audit_trail(admin_user, admin_client, caplog, tmp_path):
    import logging

    caplog.set_level(logging.DEBUG)
    backup_appliance.build(admin_user)
    schedule = {"enabled": True, "directory": str(tmp_path), "passphrase": PASSPHRASE}
    assert admin_client.put("/api/v1/system/backup/schedule/", schedule, format="json").status_code == 200
    data = download(admin_client)
    backup.scheduled_backup(force=True)
    backup_appliance.wipe()
    assert restore(admin_client, data).status_code == 200
    shown = json.dumps(admin_client.get("/api/v1/system/backup/schedule/").json())
    recorded = json.dumps([[e.before, e.after] for e in AuditEvent.objects.all()])
    secrets = (
        PASSPHRASE,
        backup_appliance.BIND_PASSWORD,
        "radius-shared-secret",
        "PRIVATE KEY",
        "cluster-token",
        "tcp-md5-secret",
    )
    for secret in secrets:
        assert secret not in shown and secret not in recorded and secret not in caplog.text, secret


@pytest.mark.django_db
def test_restored_accounts_log_in_with_their_password_and_second_factor(admin_user, admin_client, client):
    from accounts import second_factor
    from tests.support import totp

    backup_appliance.build(admin_user)
    data = download(admin_client)
    backup_appliance.wipe()
    assert restore(admin_client, data).status_code == 200
    secured = get_user_model().objects.get(username="secured")
    assert secured.check_password("secured-password-1") and second_factor.enrolled(secured)
    assert second_factor.verify(secured, totp.code(bytes.fromhex(backup_appliance.TOTP_KEY))) is not None
    assert second_factor.recovery_codes_left(secured) == 10 or second_factor.recovery_codes_left(secured) > 0
    assert [g.name for g in get_user_model().objects.get(username="operator-1").groups.all()] == ["operator"]


@pytest.mark.django_db
@pytest.mark.parametrize("damage", ["passphrase", "archive", "short-passphrase"])
def test_a_wrong_passphrase_or_a_damaged_archive_changes_nothing_and_says_so(admin_user, admin_client, damage):
    backup_appliance.build(admin_user)
    data = bytearray(download(admin_client))
    backup_appliance.wipe()
    before, events = sections_now(), AuditEvent.objects.count()
    passphrase = {"passphrase": "not the passphrase", "short-passphrase": "short"}.get(damage, PASSPHRASE)
    if damage == "archive":
        data[len(data) // 2] ^= 0x40
    response = restore(admin_client, bytes(data), passphrase)
    assert response.status_code == 400
    field = "archive" if damage == "archive" else "passphrase"
    assert list(response.json()) == [field], response.json()
    assert {"passphrase": "does not open", "archive": "damaged", "short-passphrase": "at least 12"}[damage] in (
        response.json()[field][0]
    )
    assert sections_now() == before and AuditEvent.objects.count() == events


@pytest.mark.django_db
def test_a_value_this_appliance_refuses_rolls_the_whole_restore_back_with_its_place(admin_user, admin_client):
    backup_appliance.build(admin_user)
    doc = backup.document()
    doc["sections"]["network"]["settings"]["dns_servers"] = "not-an-address"
    doc["sections"]["accounts"][0]["is_active"] = "yes"
    data = archive.seal(json.dumps(doc).encode(), PASSPHRASE)
    backup_appliance.wipe()
    before = sections_now()
    response = restore(admin_client, data)
    assert response.status_code == 400
    errors = {(e["location"], e["field"]) for e in response.json()["errors"]}
    assert errors == {("network.settings", "dns_servers"), ("accounts[0]", "is_active")}, response.json()
    assert sections_now() == before
    assert not AuditEvent.objects.filter(action="restore").exists()


@pytest.mark.django_db
def test_a_dry_run_names_what_would_change_and_changes_nothing(admin_user, admin_client):
    backup_appliance.build(admin_user)
    data = download(admin_client)
    backup_appliance.wipe()
    before = sections_now()
    response = restore(admin_client, data, dry_run="1")
    assert response.status_code == 200 and response.json()["dry_run"] is True
    assert sorted(response.json()["changes"]["farms"]["created"]) == ["shop", "web"]
    assert sections_now() == before


@pytest.mark.django_db
def test_backup_and_restore_are_for_admins_only(admin_user, role_users, admin_client):
    data = download(admin_client)
    for role in ("operator", "viewer"):
        other = APIClient()
        other.credentials(HTTP_AUTHORIZATION=f"Token {new_token(role_users[role])}")
        assert other.post("/api/v1/system/backup/", {"passphrase": PASSPHRASE}, format="json").status_code == 403
        assert restore(other, data).status_code == 403
    assert AuditEvent.objects.filter(action="backup", actor_name="admin").count() == 1


@pytest.mark.django_db
def test_the_schedule_writes_private_files_and_keeps_the_newest(admin_user, admin_client, tmp_path):
    directory = tmp_path / "backups"
    response = admin_client.put(
        "/api/v1/system/backup/schedule/",
        {"enabled": True, "directory": str(directory), "keep": 2, "passphrase": PASSPHRASE},
        format="json",
    )
    assert response.status_code == 200, response.json()
    assert "passphrase" not in response.json() and response.json()["passphrase_set"] is True
    written = [backup.scheduled_backup(force=True) for _ in range(3)]
    assert backup.scheduled_backup() is None  # not due: the last one is younger than interval_hours
    names = sorted(p.name for p in directory.iterdir())
    assert len(names) == 2 and written[-1].name in names
    assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(written[-1]).st_mode) == 0o600
    assert backup.read_archive(written[-1].read_bytes(), PASSPHRASE)["sections"]["accounts"][0]["username"] == "admin"


@pytest.mark.django_db
def test_the_schedule_refuses_bad_input_field_by_field(admin_client):
    response = admin_client.put(
        "/api/v1/system/backup/schedule/",
        {"enabled": True, "directory": "relative/dir", "passphrase": "short", "interval_hours": 0},
        format="json",
    )
    assert response.status_code == 400
    assert set(response.json()) == {"directory", "passphrase", "interval_hours"}, response.json()
    assert admin_client.get("/api/v1/system/backup/schedule/").json()["enabled"] is False


# -- System › Backup ------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_page_downloads_and_restores_and_says_what_is_wrong_at_its_field(admin_user, role_users):
    from django.core.files.uploadedfile import SimpleUploadedFile
    from django.test import Client

    from accounts import services as accounts

    backup_appliance.build(admin_user)
    accounts.login_policy_update(second_factor_role="")  # this test's admin logs in without a second factor
    page = Client()
    page.force_login(admin_user)
    assert page.get("/system/backup/").status_code == 200
    response = page.post("/system/backup/", {"action": "download", "passphrase": PASSPHRASE})
    assert response.status_code == 200 and response["Content-Type"] == "application/octet-stream"
    data = response.content
    assert page.post("/system/backup/", {"action": "download", "passphrase": "short"}).status_code == 400

    backup_appliance.wipe()
    page.force_login(get_user_model().objects.get(username="admin"))  # the fresh appliance's admin
    before = sections_now()
    upload = SimpleUploadedFile("a.lbbackup", data)
    refused = page.post("/system/backup/", {"action": "restore", "archive": upload, "passphrase": "wrong passphrase"})
    assert refused.status_code == 400
    assert "does not open the archive" in refused.context["restore"].errors["passphrase"][0]
    assert sections_now() == before
    upload = SimpleUploadedFile("a.lbbackup", data)
    done = page.post("/system/backup/", {"action": "restore", "archive": upload, "passphrase": PASSPHRASE})
    assert done.status_code == 302 and sections_now()["configuration"]["farms"]

    viewer = Client()
    viewer.force_login(get_user_model().objects.get(username="viewer-1"))
    assert viewer.get("/system/backup/").status_code == 200
    assert viewer.post("/system/backup/", {"action": "download", "passphrase": PASSPHRASE}).status_code == 403


@pytest.mark.django_db
def test_the_console_commands_back_up_and_restore_and_refuse_a_wrong_passphrase(admin_user, tmp_path, monkeypatch):
    from django.core.management import CommandError, call_command

    backup_appliance.build(admin_user)
    before = sections_now()
    monkeypatch.setenv("LBWEB_BACKUP_PASSPHRASE", PASSPHRASE)
    file = tmp_path / "console.lbbackup"
    call_command("backup", str(file))
    assert stat.S_IMODE(os.stat(file).st_mode) == 0o600
    backup_appliance.wipe()
    monkeypatch.setenv("LBWEB_BACKUP_PASSPHRASE", "not the passphrase")
    with pytest.raises(CommandError, match="passphrase: This passphrase does not open"):
        call_command("restore", str(file))
    monkeypatch.setenv("LBWEB_BACKUP_PASSPHRASE", PASSPHRASE)
    call_command("restore", str(file), "--dry-run")
    assert sections_now() != before
    call_command("restore", str(file))
    assert sections_now() == before
