"""ACME issuance and renewal against Debian's pebble, the ACME test server, in the namespace lab.

pebble runs in the client namespace (the CA "on the internet"); certbot runs where the worker runs (the LB
namespace) and answers the HTTP-01 challenge behind the real HAProxy: pebble's validation request reaches the
farm's VIP on port 80, which sends /.well-known/acme-challenge/ to certbot's own server on 127.0.0.1. The issued
certificate is stored through lbweb's services and served by HAProxy to a client that verifies it with pebble's
root."""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import time
from pathlib import Path

import pytest

from compiler.haproxy.spec import CertificateSpec, EngineSpec, FarmSpec, ServerSpec, ServiceSpec
from dataplane.l7 import acme
from l7.choices import CertificateSourceChoices
from tests.support import certs
from tests.support.l7_lab import HAProxyLab
from tests.support.lab import backend4, run_in_netns

VIP = "198.18.100.9"
DOMAIN = "www.acme.test"
PEBBLE = "pebble.test"


@pytest.fixture
def netns_hosts(lab):
    """/etc/netns/<ns>/hosts, which `ip netns exec` shows as /etc/hosts there: the lab's own names."""
    made = []
    for ns, line in ((lab.lb, f"198.18.0.2 {PEBBLE}\n"), (lab.client, f"{VIP} {DOMAIN}\n")):
        path = Path("/etc/netns") / ns
        path.mkdir(parents=True, exist_ok=True)
        (path / "hosts").write_text(f"127.0.0.1 localhost\n{line}")
        made.append(path)
    yield
    for path in made:
        shutil.rmtree(path)


@pytest.fixture
def pebble(lab, tmp_path, netns_hosts):
    root = certs.issue("lbweb test pebble CA", ca=True)
    leaf = certs.issue(PEBBLE, root, names=(PEBBLE,))
    (tmp_path / "pebble.crt").write_text(leaf.pem)
    (tmp_path / "pebble.key").write_text(leaf.key_pem)
    (tmp_path / "ca.pem").write_text(root.pem)
    config = {
        "pebble": {
            "listenAddress": "198.18.0.2:14000",
            "managementListenAddress": "198.18.0.2:15000",
            "certificate": str(tmp_path / "pebble.crt"),
            "privateKey": str(tmp_path / "pebble.key"),
            "httpPort": 80,
            "tlsPort": 5001,
            "ocspResponderURL": "",
            "externalAccountBindingRequired": False,
        }
    }
    (tmp_path / "pebble.json").write_text(json.dumps(config))
    log = (tmp_path / "pebble.log").open("w")
    proc = subprocess.Popen(
        ["ip", "netns", "exec", lab.client, "env", "PEBBLE_VA_NOSLEEP=1", "PEBBLE_WFE_NONCEREJECT=0",
         "pebble", "-config", str(tmp_path / "pebble.json")],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while "ACME directory available" not in (tmp_path / "pebble.log").read_text():
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "pebble.log").read_text()
            time.sleep(0.1)
        yield tmp_path / "ca.pem"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


@pytest.fixture
def haproxy(lab, tmp_path):
    engine_lab = HAProxyLab(lab, tmp_path / "haproxy", vips=(VIP,)).start()
    yield engine_lab
    engine_lab.stop()


def farm(certificate=None) -> FarmSpec:
    services = (ServiceSpec(90, "www", servers=(ServerSpec(11, backend4("b1"), 80),)),)
    if certificate is None:
        return FarmSpec(9, "acme", "http", VIP, (80,), services=services)
    spec = CertificateSpec(certificate.id, certificate.name, certificate.pem)
    return FarmSpec(9, "acme", "https", VIP, (443,), redirect_ports=(80,), certificates=(spec,), services=services)


@pytest.mark.django_db
def test_issue_and_renew_against_pebble_behind_haproxy(lab, pebble, haproxy, settings, tmp_path):
    settings.LBWEB_ACME_SERVER = f"https://{PEBBLE}:14000/dir"
    settings.LBWEB_ACME_DIR = tmp_path / "acme"
    settings.LBWEB_ACME_EMAIL = "admin@acme.test"
    haproxy.engine.apply(EngineSpec((farm(),)))
    prefix, env = ["ip", "netns", "exec", lab.lb], {"REQUESTS_CA_BUNDLE": str(pebble)}

    cert = acme.issue("acme-www", [DOMAIN], prefix, env)
    assert cert.source == CertificateSourceChoices.ACME and cert.names == [DOMAIN]
    assert "Pebble" in cert.issuer and cert.days_left > 30
    first_serial = cert.certificate

    # Served by HAProxy (the farm now HTTPS, with plain HTTP redirected but the challenge path kept), verified
    # by the client against pebble's root.
    haproxy.engine.apply(EngineSpec((farm(cert),)))
    roots = lab.ns(lab.lb, "curl", "-sf", "--cacert", str(pebble), f"https://{PEBBLE}:15000/roots/0").stdout
    client = ssl.create_default_context(cadata=roots)

    def handshake():
        import socket

        with client.wrap_socket(socket.create_connection((VIP, 443), timeout=5), server_hostname=DOMAIN) as tls:
            return dict(x[0] for x in tls.getpeercert()["subject"]), tls.getpeercert()["subjectAltName"]

    _subject, names = run_in_netns(lab.client, handshake)
    assert ("DNS", DOMAIN) in names

    # Renewal while the farm serves HTTPS: the challenge still reaches certbot through port 80.
    acme.RENEW_DAYS = 10_000  # every ACME certificate is due
    try:
        assert acme.renew_due(prefix, env) == ["acme-www"]
    finally:
        acme.RENEW_DAYS = 30
    cert.refresh_from_db()
    assert cert.certificate != first_serial and cert.source == CertificateSourceChoices.ACME


@pytest.mark.django_db
def test_a_failed_issuance_changes_nothing(lab, pebble, haproxy, settings, tmp_path):
    """A name the ACME server cannot validate (it resolves nowhere): certbot fails, nothing is stored."""
    from l7.models import Certificate

    settings.LBWEB_ACME_SERVER = f"https://{PEBBLE}:14000/dir"
    settings.LBWEB_ACME_DIR = tmp_path / "acme"
    haproxy.engine.apply(EngineSpec((farm(),)))
    prefix, env = ["ip", "netns", "exec", lab.lb], {"REQUESTS_CA_BUNDLE": str(pebble)}
    with pytest.raises(acme.AcmeError, match="certbot failed"):
        acme.issue("nowhere", ["nowhere.acme.test"], prefix, env)
    assert not Certificate.objects.exists()


@pytest.mark.django_db
def test_a_machine_without_certbot_gets_an_acme_error_that_says_so(settings, tmp_path, monkeypatch):
    """deploy/lib.sh installs Debian's certbot; where it is missing, issuance fails with words the operator can
    act on (an AcmeError, as any failed issuance), not a FileNotFoundError out of the worker's task."""
    from l7.models import Certificate

    settings.LBWEB_ACME_DIR = tmp_path / "acme"
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no directory of PATH holds certbot
    with pytest.raises(acme.AcmeError, match="certbot is not installed"):
        acme.issue("nowhere", ["nowhere.acme.test"])
    assert not Certificate.objects.exists()
