"""HTTP farms through the REST API (no HAProxy here): validation with field-level errors, certificates refused with
the field to fix and nothing saved, capacity declared by a backend's own token (audited), the preview's diff."""

from __future__ import annotations

import datetime

import pytest
from rest_framework.test import APIClient

from farms.models import AuditEvent, ConfigGeneration
from l7.models import Certificate
from tests.conftest import new_token
from tests.support import certs

pytestmark = pytest.mark.django_db


def http_farm(client, **overrides) -> dict:
    data = {"name": "web", "vip": "198.18.100.1", "protocol": "tcp", "ports": "80", "mode": "http", **overrides}
    response = client.post("/api/v1/farms/", data, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def backend(client, farm: dict, address: str = "198.18.1.11", port: int | None = 80) -> dict:
    response = client.post("/api/v1/backends/", {"farm": farm["id"], "address": address, "port": port}, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def test_vip_port_clash_between_l4_and_l7_farms_is_refused(client):
    http_farm(client)
    response = client.post(
        "/api/v1/farms/",
        {"name": "l4", "vip": "198.18.100.1", "protocol": "tcp", "ports": "70-90", "mode": "dnat"},
        format="json",
    )
    assert response.status_code == 400 and "already belong to farm 'web'" in response.json()["ports"][0]
    response = client.post(
        "/api/v1/farms/", {"name": "web2", "vip": "198.18.100.1", "ports": "80", "mode": "https"}, format="json"
    )
    assert response.status_code == 400 and "ports" in response.json()


@pytest.mark.parametrize(
    ("fields", "key"),
    [({"protocol": "udp"}, "protocol"), ({"scheduler": "hash", "sched_param": "srcip"}, "scheduler"),
     ({"source_addr": "198.18.1.1"}, "source_addr"), ({"flow_offload": True}, "flow_offload")],
)  # fmt: skip
def test_kernel_only_options_refused_on_http_farms(client, fields, key):
    data = {"name": "web", "vip": "198.18.100.1", "protocol": "tcp", "ports": "80", "mode": "http", **fields}
    response = client.post("/api/v1/farms/", data, format="json")
    assert response.status_code == 400 and key in response.json(), response.content


def test_http_backend_needs_a_port(client):
    farm = http_farm(client)
    response = client.post("/api/v1/backends/", {"farm": farm["id"], "address": "198.18.1.11"}, format="json")
    assert response.status_code == 400 and "port" in response.json()


def test_services_and_options_validated_by_field(client):
    farm = http_farm(client)
    bad = client.post("/api/v1/http-services/", {"farm": farm["id"], "name": "x", "host_regex": "(a"}, format="json")
    assert bad.status_code == 400 and "host_regex" in bad.json()
    bad = client.post("/api/v1/http-services/", {"farm": farm["id"], "name": "x", "hosts": "a b!"}, format="json")
    assert bad.status_code == 400 and "hosts" in bad.json()
    good = client.post(
        "/api/v1/http-services/",
        {"farm": farm["id"], "name": "api", "hosts": "API.example.com *.example.org", "path_prefix": "/v1"},
        format="json",
    )
    assert good.status_code == 201 and good.json()["hosts"] == "api.example.com *.example.org"
    response = client.patch(
        f"/api/v1/farms/{farm['id']}/http/", {"headers": [{"direction": "request", "name": "X a"}]}, format="json"
    )
    assert response.status_code == 400 and "headers" in response.json()
    response = client.patch(
        f"/api/v1/farms/{farm['id']}/http/", {"redirect_ports": "8080"}, format="json"
    )  # only HTTPS farms redirect ports to themselves
    assert response.status_code == 400 and "redirect_ports" in response.json()
    response = client.patch(
        f"/api/v1/farms/{farm['id']}/http/",
        {"headers": [{"direction": "response", "name": "Server"}], "error_pages": {"503": "<h1>later</h1>"}},
        format="json",
    )
    assert response.status_code == 200, response.content
    assert AuditEvent.objects.filter(object_type="l7farm", farm_ref=farm["id"]).exists()


def upload(client, name: str, cert: str, key: str, chain: str = ""):
    data = {"name": name, "certificate": cert, "chain": chain, "private_key": key}
    return client.post("/api/v1/certificates/", data, format="json")


def test_certificate_upload_checked_with_field_errors_and_nothing_saved(client):
    root = certs.issue("root", ca=True)
    inter = certs.issue("intermediate", root, ca=True)
    leaf = certs.issue("www.example.com", inter, names=("www.example.com",))
    other = certs.issue("other.example.com", inter, names=("other.example.com",))
    now = datetime.datetime.now(datetime.UTC)
    expired = certs.issue(
        "old.example.com", root, names=("old.example.com",), not_after=now - datetime.timedelta(days=1)
    )
    before = Certificate.objects.count(), ConfigGeneration.current()
    cases = [
        (
            dict(cert=leaf.pem, key=other.key_pem, chain=inter.pem),
            "private_key",
            "does not match the certificate's public key",
        ),
        (dict(cert=leaf.pem, key=leaf.key_pem, chain=root.pem + inter.pem), "chain", "give the chain in order"),
        (dict(cert=expired.pem, key=expired.key_pem), "certificate", "The certificate expired on"),
        (dict(cert="not a pem", key=leaf.key_pem), "certificate", "Not a PEM certificate"),
        (dict(cert=leaf.pem, key="garbage"), "private_key", "Not a PEM private key"),
    ]
    for kwargs, field, words in cases:
        response = upload(client, "bad", **kwargs)
        assert response.status_code == 400, response.content
        assert words in response.json()[field][0], response.json()
    assert (Certificate.objects.count(), ConfigGeneration.current()) == before
    assert not AuditEvent.objects.filter(object_type="certificate").exists()
    good = upload(client, "www", leaf.pem, leaf.key_pem, inter.pem + root.pem)
    assert good.status_code == 201, good.content
    body = good.json()
    assert body["names"] == ["www.example.com"] and "private_key" not in body
    assert body["expiry_status"] == "ok" and body["days_left"] >= 364


def test_a_fullchain_file_is_kept_as_leaf_and_chain(client):
    """certbot's fullchain.pem in the certificate field: one validator with the web server's (system/tls.py)."""
    root = certs.issue("root", ca=True)
    inter = certs.issue("intermediate", root, ca=True)
    leaf = certs.issue("www.example.com", inter, names=("www.example.com",))
    response = upload(client, "full", leaf.pem + inter.pem, leaf.key_pem)
    assert response.status_code == 201, response.content
    stored = Certificate.objects.get(name="full")
    assert stored.certificate.count("BEGIN CERTIFICATE") == 1 and stored.chain.count("BEGIN CERTIFICATE") == 1
    assert stored.pem.index(leaf.pem.strip()) < stored.pem.index(inter.pem.strip())
    wrong = upload(client, "wrong", inter.pem + leaf.pem, leaf.key_pem)
    assert wrong.status_code == 400 and "does not match" in wrong.json()["private_key"][0], wrong.content


def test_certificate_expiring_soon_is_a_warning(client):
    now = datetime.datetime.now(datetime.UTC)
    soon = certs.issue("soon.example.com", names=("soon.example.com",), not_after=now + datetime.timedelta(days=5))
    body = upload(client, "soon", soon.pem, soon.key_pem).json()
    assert body["expiry_status"] == "warning" and body["days_left"] in (4, 5)


def test_self_signed_certificate_and_https_farm_options(client):
    response = client.post(
        "/api/v1/certificates/self-signed/",
        {"name": "self", "names": ["a.example.com", "b.example.com"]},
        format="json",
    )
    assert response.status_code == 201, response.content
    cert = response.json()
    assert cert["source"] == "selfsigned" and cert["names"] == ["a.example.com", "b.example.com"]
    farm = http_farm(client, mode="https", ports="443")
    response = client.patch(
        f"/api/v1/farms/{farm['id']}/http/",
        {"certificates": [cert["id"]], "default_certificate": cert["id"], "redirect_ports": "80", "hsts_max_age": 60},
        format="json",
    )
    assert response.status_code == 200, response.content
    assert client.delete(f"/api/v1/certificates/{cert['id']}/").status_code == 400  # in use


def test_capacity_declared_with_the_backends_own_token(client, role_users):
    farm = http_farm(client)
    mine, other = backend(client, farm), backend(client, farm, "198.18.1.12")
    token = client.post(f"/api/v1/backends/{mine['id']}/capacity-token/", format="json").json()["token"]
    service = APIClient()
    service.credentials(HTTP_AUTHORIZATION=f"Capacity {token}")
    generation = ConfigGeneration.current()
    response = service.post(f"/api/v1/backends/{mine['id']}/capacity/", {"capacity": 12}, format="json")
    assert response.status_code == 200 and response.json() == {"backend": mine["id"], "capacity": 12}
    assert ConfigGeneration.current() == generation + 1  # the worker applies it (runtime API, no reload)
    event = AuditEvent.objects.get(object_type="l7backend", object_id=mine["id"])
    assert event.action.startswith("capacity (token ") and event.after["capacity"] == 12
    # The token is good for its own backend only, and for nothing else.
    assert service.post(f"/api/v1/backends/{other['id']}/capacity/", {"capacity": 1}, format="json").status_code == 403
    assert service.get("/api/v1/farms/").status_code in (401, 403)
    wrong = APIClient()
    wrong.credentials(HTTP_AUTHORIZATION="Capacity nope")
    assert wrong.post(f"/api/v1/backends/{mine['id']}/capacity/", {"capacity": 1}, format="json").status_code == 401
    viewer, operator = APIClient(), APIClient()
    viewer.credentials(HTTP_AUTHORIZATION=f"Token {new_token(role_users['viewer'])}")
    operator.credentials(HTTP_AUTHORIZATION=f"Token {new_token(role_users['operator'])}")
    assert viewer.post(f"/api/v1/backends/{mine['id']}/capacity/", {"capacity": 3}, format="json").status_code == 403
    response = operator.post(f"/api/v1/backends/{mine['id']}/capacity/", {"capacity": None}, format="json")
    assert response.status_code == 200 and response.json()["capacity"] is None
    bad = operator.post(f"/api/v1/backends/{mine['id']}/capacity/", {"capacity": 0}, format="json")
    assert bad.status_code == 400 and "capacity" in bad.json()
    # Revoked: the service's token is refused from then on.
    assert client.delete(f"/api/v1/backends/{mine['id']}/capacity-token/").status_code == 204
    assert service.post(f"/api/v1/backends/{mine['id']}/capacity/", {"capacity": 5}, format="json").status_code == 401
    assert AuditEvent.objects.filter(object_type="capacitytoken", action="delete").exists()


def test_preview_shows_the_configuration_diff(client, settings, tmp_path):
    settings.LBWEB_HAPROXY_CONF_DIR = tmp_path
    farm = http_farm(client)
    backend(client, farm)
    response = client.get("/api/v1/http/preview/")
    assert response.status_code == 200
    diff = response.json()["diff"]
    assert "+frontend f" in diff and "+    server b" in diff and "198.18.1.11:80" in diff


def test_previews_of_http_farm_edits_show_haproxys_configuration_not_the_kernel(client, settings, tmp_path):
    settings.LBWEB_HAPROXY_CONF_DIR = tmp_path
    response = client.post(
        "/api/v1/farms/preview/", {"name": "new", "vip": "198.18.100.3", "ports": "80", "mode": "http"}, format="json"
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert (
        body["commands"] == {"nftables": []}
        and "+frontend f" in body["diff"]
        and "+    bind 198.18.100.3:80" in body["diff"]
    )
    assert any("HAProxy" in note for note in body["notes"])
    farm = http_farm(client)
    response = client.post(f"/api/v1/farms/{farm['id']}/preview/", {"ports": "81"}, format="json")
    assert (
        "-    bind 198.18.100.1:80" in response.json()["diff"]
        and "+    bind 198.18.100.1:81" in response.json()["diff"]
    )
    response = client.post(
        "/api/v1/backends/preview/", {"farm": farm["id"], "address": "198.18.1.12", "port": 8080}, format="json"
    )
    assert response.status_code == 200 and "198.18.1.12:8080" in response.json()["diff"]
    assert response.json()["commands"] == {"nftables": []}


# -- issue 39: every value HAProxy reads is held to its grammar at save time --------------------------------------


def service(client, farm: dict, **fields):
    return client.post("/api/v1/http-services/", {"farm": farm["id"], "name": "s", **fields}, format="json")


@pytest.mark.parametrize(
    ("fields", "key", "words"),
    [
        ({"cookie_name": "LB'x", "persistence": "cookie"}, "cookie_name", "without a quote (') (character 3)"),
        ({"cookie_name": "LB#x", "persistence": "cookie"}, "cookie_name", "without '#' (character 3)"),
        ({"cookie_name": "LB x"}, "cookie_name", "without a space (character 3)"),
        ({"cookie_name": "$Version"}, "cookie_name", "a '$' first"),
        ({"host_regex": "(?a)x"}, "host_regex", "PCRE2, HAProxy's regex engine, refuses it: unrecognized character"),
        ({"host_regex": r"\N{DIGIT ONE}"}, "host_regex", r"PCRE2 does not support \F, \L, \l, \N{name}, \U, or \u"),
        ({"host_regex": r"(a)\1"}, "host_regex", "reference to non-existent subpattern"),
        ({"host_regex": "é"}, "host_regex", "printable ASCII"),
        ({"persistence": "header", "persistence_header": "X-K\nlisten evil"}, "persistence_header", "a line break"),
        ({"persistence_header": "X K"}, "persistence_header", "without a space"),
        ({"path_prefix": "/a b"}, "path_prefix", "%20 for a space"),
        ({"path_prefix": "/é"}, "path_prefix", "%C3%A9 for é"),
        ({"hosts": "a.test\nlisten evil"}, "hosts", "a line break"),
        ({"hosts": "a.test\u00a0b.test"}, "hosts", "not U+00A0 (character 7)"),
        ({"hosts": "\u212a.test"}, "hosts", "not U+212A"),
    ],
)
def test_service_values_haproxy_cannot_take_are_refused_by_field(client, fields, key, words):
    response = service(client, http_farm(client), **fields)
    assert response.status_code == 400 and words in response.json()[key][0], response.content


@pytest.mark.parametrize(
    ("rules", "words"),
    [
        ([{"direction": "request", "name": "X-A\n", "value": "v"}], "without a line break (character 4)"),
        ([{"direction": "request", "name": "X-A\r"}], "without a carriage return"),
        ([{"direction": "request", "name": "X-A", "value": ""}], "cannot set a header to nothing"),
        ([{"direction": "request", "name": "X-A", "value": "a\nlisten evil"}], "a line break"),
        ([{"direction": "request", "name": "X-A", "value": " a"}], "spaces around"),
        ([{"direction": "request", "name": "Content-Length", "value": "5"}], "HAProxy writes Content-Length itself"),
        ([{"direction": "response", "name": "TE", "value": "trailers"}], "HAProxy writes TE itself"),
    ],
)
def test_header_rules_haproxy_cannot_take_are_refused(client, rules, words):
    farm = http_farm(client)
    response = client.patch(f"/api/v1/farms/{farm['id']}/http/", {"headers": rules}, format="json")
    assert response.status_code == 400 and words in response.json()["headers"][0], response.content
    response = service(client, farm, headers=rules)
    assert response.status_code == 400 and words in response.json()["headers"][0], response.content


def test_text_that_is_not_utf8_is_refused_with_a_json_answer(client):
    """A JSON body can carry a lone surrogate (``\\ud800``), which no configuration file can: a field error, which
    names it escaped (a response holding it raw could not be encoded: a 500)."""
    farm = http_farm(client)
    for body in (
        '{"headers": [{"direction": "request", "name": "X-A", "value": "\\ud800"}]}',
        '{"error_pages": {"\\ud800": "x"}}',
        '{"error_pages": {"503": "\\ud800"}}',
    ):
        response = client.patch(f"/api/v1/farms/{farm['id']}/http/", body, content_type="application/json")
        assert response.status_code == 400, (body, response.content)


@pytest.mark.parametrize(
    ("rule", "words"),
    [
        ({"path_prefix": "/x", "target": "/a b"}, "%20 for a space"),
        ({"path_prefix": "/x", "target": "/é"}, "%C3%A9"),
        ({"path_prefix": "/x", "target": "a\nlisten evil"}, "a URL (https://example.com/new) or a path"),
        ({"path_prefix": "/x", "target": "/y", "code": 301.0}, "code is one of"),
        ({"path_prefix": "/x", "target": "/y", "code": True}, "code is one of"),
        ({"path_prefix": "/x", "target": "/y", "keep_path": "no"}, "keep_path is true or false"),
        ({"path_prefix": "/x?a", "target": "/y"}, "not '?'"),
    ],
)
def test_redirects_haproxy_cannot_take_are_refused(client, rule, words):
    farm = http_farm(client)
    response = client.patch(f"/api/v1/farms/{farm['id']}/http/", {"redirects": [rule]}, format="json")
    assert response.status_code == 400 and words in response.json()["redirects"][0], response.content


@pytest.mark.parametrize(
    "sni", ["a.test b.test", "a.test\nlisten evil", "*.a.test", "a.test)", "é.test", "-a.test", "\u212a.test"]
)
def test_tls_sni_is_one_host_name(client, sni):
    farm = http_farm(client)
    one = backend(client, farm)
    response = client.patch(f"/api/v1/backends/{one['id']}/http/", {"tls": True, "tls_sni": sni}, format="json")
    assert response.status_code == 400 and "host name to send as SNI" in response.json()["tls_sni"][0], sni
    response = client.patch(
        f"/api/v1/backends/{one['id']}/http/", {"tls": True, "tls_sni": "Api.Example"}, format="json"
    )
    assert response.status_code == 200 and response.json()["tls_sni"] == "Api.Example"


@pytest.mark.parametrize("ports", ["9001-9100", "1-65535", "80,9001-9064"])
def test_http_farm_ports_beyond_what_haproxy_binds_are_refused(client, ports):
    data = {"name": "web", "vip": "198.18.100.1", "protocol": "tcp", "ports": ports, "mode": "http"}
    response = client.post("/api/v1/farms/", data, format="json")
    assert response.status_code == 400 and "at most 64 ports" in response.json()["ports"][0], response.content
    response = client.post("/api/v1/farms/preview/", data, format="json")
    assert response.status_code == 400 and "at most 64 ports" in response.json()["ports"][0], response.content


def test_http_farm_binds_every_port_it_accepts_and_needs_one(client):
    from l7 import specs
    from l7.models import Farm

    farm = http_farm(client, ports="9001-9064")
    assert specs.farm_spec(Farm.objects.get(pk=farm["id"])).ports == tuple(range(9001, 9065))
    response = client.post("/api/v1/farms/", {"name": "any", "vip": "198.18.100.2", "mode": "http"}, format="json")
    assert response.status_code == 400 and "no 'every port'" in response.json()["ports"][0], response.content
    https = http_farm(client, name="tls", vip="198.18.100.3", mode="https", ports="443")
    response = client.patch(f"/api/v1/farms/{https['id']}/http/", {"redirect_ports": "8000-8100"}, format="json")
    assert response.status_code == 400 and "at most 64 ports" in response.json()["redirect_ports"][0]


@pytest.mark.parametrize(("field", "value"), [("cookie_name", "LB#x"), ("host_regex", "(?a)x"), ("hosts", "a\tb")])
def test_every_path_refuses_with_the_same_words(client, admin_client, admin_user, field, value):
    """The API's POST and PATCH, the service form and the configuration import all reach ``HttpService.clean()``."""
    from farms import config_io

    farm = http_farm(client)
    posted = service(client, farm, **{field: value})
    assert posted.status_code == 400
    words = posted.json()[field]
    made = service(client, farm, name="ok")
    assert made.status_code == 201, made.content
    patched = client.patch(f"/api/v1/http-services/{made.json()['id']}/", {field: value}, format="json")
    assert patched.status_code == 400 and patched.json()[field] == words
    form = {
        "name": "f", "position": 1, "scheduler": "roundrobin", "persistence": "", "persistence_ttl": 0,
        "cookie_name": "LBWEBSRV", "queue_timeout": 5, "reuse": "on", "headers": "[]", "_save": "1", field: value,
    }  # fmt: skip
    page = admin_client.post(f"/http/farms/{farm['id']}/services/add/", form)
    assert page.status_code == 200 and page.context["form"].errors[field] == words
    document = config_io.export_config()
    document["http"]["farms"][0]["services"][0][field] = value
    result = config_io.import_config(document, actor=admin_user)
    assert [e.message for e in result.errors if e.field == field] == words
