"""The web server's certificate: ensure_tls, validation of an upload field by field, replacement through
the API and the page (admins only, audited, atomic, 0600), and an invalid upload that changes nothing.

The TLS handshakes themselves (the new certificate served at the next connection) are in test_https.py.
"""

from __future__ import annotations

import datetime
import stat

import pytest
from django.core.management import call_command
from django.test import Client
from rest_framework.test import APIClient

from farms.models import AuditEvent
from lbweb.paths import tls_cert_path, tls_dir, tls_key_path
from system import tls
from tests.conftest import ROLE_PASSWORD, new_token
from tests.support import certs

pytestmark = pytest.mark.django_db
URL = "/api/v1/system/tls-certificate/"


@pytest.fixture(autouse=True)
def state_dir(tmp_path, monkeypatch):
    """A state directory of the test's own, with a self-signed certificate made by ensure_tls."""
    monkeypatch.setenv("LBWEB_VAR_DIR", str(tmp_path / "var"))
    monkeypatch.setenv("LBWEB_TLS_NAMES", "lb.test.example,198.18.0.10")
    call_command("ensure_tls")
    return tmp_path / "var"


def api_as(user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {new_token(user)}")
    return client


def mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_ensure_tls_makes_a_private_self_signed_certificate_once(state_dir):
    assert mode(tls_dir()) == 0o700 and mode(tls_cert_path()) == 0o600 and mode(tls_key_path()) == 0o600
    first = tls.current()
    assert first.self_signed and first.key_type == "EC secp256r1"
    assert {"localhost", "lb.test.example", "198.18.0.10", "127.0.0.1"} <= set(first.sans)
    call_command("ensure_tls")
    assert tls.current().serial == first.serial  # present and fine: left alone


def test_ensure_tls_renews_its_own_certificate_near_its_end_but_never_an_operators():
    assert tls.needs_new_self_signed() is None
    later = tls.current().not_after - datetime.timedelta(days=10)
    assert "ends on" in tls.needs_new_self_signed(now=later)
    _root, intermediate, leaf = certs.chain()
    tls.install([leaf.cert, intermediate.cert], leaf.key)
    assert tls.needs_new_self_signed(now=leaf.cert.not_valid_after_utc - datetime.timedelta(days=1)) is None


def errors_of(certificate="", key="", chain="") -> dict:
    with pytest.raises(tls.CertificateError) as raised:
        tls.validate(certificate, key, chain)
    return raised.value.errors


def test_validation_names_the_field_of_every_problem():
    root, intermediate, leaf = certs.chain()
    other = certs.issue("localhost", intermediate)
    assert set(errors_of("hello", leaf.key_pem)) == {"certificate"}
    assert "Not a PEM certificate" in errors_of("hello", leaf.key_pem)["certificate"][0]
    assert "Not a PEM private key" in errors_of(leaf.pem, "not a key")["key"][0]
    assert "Required" in errors_of("", "")["certificate"][0] and "Required" in errors_of("", "")["key"][0]
    assert "does not match" in errors_of(leaf.pem, other.key_pem, intermediate.pem)["key"][0]
    expired = certs.issue("old", intermediate, not_after=certs.NOW - datetime.timedelta(days=1))
    assert "expired on" in errors_of(expired.pem, expired.key_pem, intermediate.pem)["certificate"][0]
    future = certs.issue("soon", intermediate, not_before=certs.NOW + datetime.timedelta(days=2))
    assert "not valid before" in errors_of(future.pem, future.key_pem, intermediate.pem)["certificate"][0]
    wrong_order = errors_of(leaf.pem, leaf.key_pem, root.pem + intermediate.pem)["chain"][0]
    assert "did not issue the certificate" in wrong_order and "in order" in wrong_order
    weak = certs.issue("weak", intermediate, key=certs.rsa_key(1024))
    assert "too weak" in errors_of(weak.pem, weak.key_pem, intermediate.pem)["key"][0]


def test_a_good_chain_passes_in_either_place():
    root, intermediate, leaf = certs.chain()
    certs_in_file, _key = tls.validate(leaf.pem + intermediate.pem, leaf.key_pem)
    assert [c.subject for c in certs_in_file] == [leaf.cert.subject, intermediate.cert.subject]
    certs_apart, _key = tls.validate(leaf.pem, leaf.key_pem, intermediate.pem + root.pem)
    assert len(certs_apart) == 3
    rsa_leaf = certs.issue("localhost", intermediate, key=certs.rsa_key())
    assert tls.validate(rsa_leaf.pem, rsa_leaf.key_pem)[0][0] == rsa_leaf.cert


def test_api_shows_the_certificate_to_every_role_and_only_admins_replace_it(role_users):
    shown = api_as(role_users["viewer"]).get(URL).json()
    assert shown["self_signed"] and "lb.test.example" in shown["sans"] and shown["fingerprint_sha256"].count(":") == 31
    _root, intermediate, leaf = certs.chain()
    upload = {"certificate": leaf.pem, "chain": intermediate.pem, "key": leaf.key_pem}
    for role in ("viewer", "operator"):
        assert api_as(role_users[role]).put(URL, upload, format="json").status_code == 403
    assert tls.current().serial == shown["serial"]

    replaced = api_as(role_users["admin"]).put(URL, upload, format="json")
    assert replaced.status_code == 200, replaced.content
    body = replaced.json()
    assert body["serial"] == leaf.serial and body["chain"] == ["CN=lbweb test intermediate"] and "key" not in body
    assert tls.current().serial == leaf.serial
    assert tls_cert_path().read_text() == leaf.pem + intermediate.pem
    assert tls_key_path().read_text() == leaf.key_pem
    assert mode(tls_cert_path()) == 0o600 and mode(tls_key_path()) == 0o600
    event = AuditEvent.objects.get(object_type="certificate")
    assert event.actor_name == "admin-user" and event.action == "replace"
    assert event.before["serial"] == shown["serial"] and event.after["serial"] == leaf.serial


def test_api_takes_the_pem_files_as_a_multipart_upload(role_users):
    """What docs/operations.md's `curl -F certificate=@my.crt -F chain=@my-chain.pem -F key=@my.key` sends."""
    from django.core.files.uploadedfile import SimpleUploadedFile

    _root, intermediate, leaf = certs.chain()
    files = {
        "certificate": SimpleUploadedFile("my.crt", leaf.pem.encode()),
        "chain": SimpleUploadedFile("my-chain.pem", intermediate.pem.encode()),
        "key": SimpleUploadedFile("my.key", leaf.key_pem.encode()),
    }
    answer = api_as(role_users["admin"]).put(URL, files, format="multipart")
    assert answer.status_code == 200, answer.content
    assert tls.current().serial == leaf.serial and tls.current().chain == ["CN=lbweb test intermediate"]


@pytest.mark.parametrize("problem", ["not pem", "wrong key", "expired", "chain order", "no key"])
def test_an_invalid_upload_is_a_field_level_400_and_changes_nothing(role_users, problem):
    root, intermediate, leaf = certs.chain()
    expired = certs.issue("old", intermediate, not_after=certs.NOW - datetime.timedelta(minutes=1))
    upload, field = {
        "not pem": ({"certificate": "-----BEGIN CERTIFICATE-----\nnope\n", "key": leaf.key_pem}, "certificate"),
        "wrong key": ({"certificate": leaf.pem, "key": expired.key_pem}, "key"),
        "expired": ({"certificate": expired.pem, "key": expired.key_pem}, "certificate"),
        "chain order": ({"certificate": leaf.pem, "chain": root.pem + intermediate.pem, "key": leaf.key_pem}, "chain"),
        "no key": ({"certificate": leaf.pem}, "key"),
    }[problem]
    before = (tls_cert_path().read_bytes(), tls_key_path().read_bytes())
    answer = api_as(role_users["admin"]).put(URL, upload, format="json")
    assert answer.status_code == 400 and field in answer.json(), answer.content
    assert (tls_cert_path().read_bytes(), tls_key_path().read_bytes()) == before
    assert not AuditEvent.objects.filter(object_type="certificate").exists()
    assert sorted(p.name for p in tls_dir().iterdir()) == ["lbweb.crt", "lbweb.key"]  # no temporary file left


def test_the_page_shows_the_certificate_and_replaces_it_with_errors_next_to_fields(role_users):
    page = Client()
    page.post("/accounts/login/", {"username": "admin-user", "password": ROLE_PASSWORD})
    shown = page.get("/system/tls/").content.decode()
    assert tls.current().fingerprint_sha256 in shown and "lb.test.example" in shown and "self-signed" in shown
    _root, intermediate, leaf = certs.chain()
    other = certs.issue("localhost", intermediate)
    refused = page.post("/system/tls/", {"certificate": leaf.pem, "chain": intermediate.pem, "key": other.key_pem})
    assert refused.status_code == 400
    html = refused.content.decode()
    assert "Nothing was changed" in html and 'id="field-key"' in html and "does not match" in html
    assert tls.current().self_signed
    done = page.post("/system/tls/", {"certificate": leaf.pem, "chain": intermediate.pem, "key": leaf.key_pem})
    assert done.status_code == 302 and tls.current().serial == leaf.serial
    assert "Certificate replaced" in page.get("/system/tls/").content.decode()

    viewer = Client()
    viewer.post("/accounts/login/", {"username": "viewer-user", "password": ROLE_PASSWORD})
    assert "needs the admin role" in viewer.get("/system/tls/").content.decode()
    assert viewer.post("/system/tls/", {"certificate": leaf.pem, "key": leaf.key_pem}).status_code == 403


def test_secret_key_file_is_private(settings):
    path = settings.VAR_DIR / "secret_key"
    assert path.exists() and mode(path) == 0o600 and mode(settings.VAR_DIR) == 0o700
