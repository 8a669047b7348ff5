"""The web process as it runs in production: the real gunicorn with lbweb/gunicorn_conf.py over TLS, the
redirect server with lbweb/gunicorn_redirect_conf.py, on free ports, driven over real HTTP(S).

Checks what a browser or a script meets: HTTPS with the certificate ensure_tls made, Secure/HttpOnly/
SameSite cookies, HSTS/CSP/X-Frame-Options headers, plain HTTP answered by a 301 to HTTPS, the login
lockout, a token that expires (the server runs with a TTL of a few seconds) and one that is revoked, a
replaced certificate served from the next handshake on (with its chain), and socket activation.
"""

from __future__ import annotations

import base64
import datetime
import os
import re
import socket
import ssl
import subprocess
import time
from pathlib import Path

import pytest
import requests
from cryptography import x509

from lbweb.paths import write_private
from tests.conftest import OUTPUT, ROLE_PASSWORD, new_token
from tests.support import certs
from tests.support.stack import ROOT, VENV_BIN, database_url

pytestmark = pytest.mark.django_db(transaction=True)
TOKEN_TTL_SECONDS = 4


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_listening(port: int, proc: subprocess.Popen, log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"server on port {port} did not start:\n{log.read_text()[-3000:]}") from None
            time.sleep(0.1)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Site:
    """The two gunicorn servers of one test module, sharing the test database."""

    def __init__(self, workdir: Path, env: dict[str, str]):
        self.workdir = workdir
        self.env = env
        self.port, self.http_port = free_port(), free_port()
        self.env.update(LBWEB_BIND=f"127.0.0.1:{self.port}", LBWEB_HTTP_BIND=f"127.0.0.1:{self.http_port}")
        self.base = f"https://localhost:{self.port}"
        self.cafile = str(Path(env["LBWEB_VAR_DIR"]) / "tls" / "lbweb.crt")
        self.procs: list[subprocess.Popen] = []

    def manage(self, *args: str) -> str:
        done = subprocess.run(
            [str(VENV_BIN / "python"), "manage.py", *args], cwd=ROOT, env=self.env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    def gunicorn(self, conf: str, app: str, port: int, name: str, prefix: list[str] = ()) -> subprocess.Popen:
        log = OUTPUT / "logs" / f"https-{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [*prefix, str(VENV_BIN / "gunicorn"), "-c", conf, app],
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.procs.append(proc)
        wait_listening(port, proc, log)
        return proc

    def start(self) -> Site:
        self.manage("ensure_tls")
        self.gunicorn("lbweb/gunicorn_conf.py", "lbweb.wsgi", self.port, "web")
        self.gunicorn("lbweb/gunicorn_redirect_conf.py", "lbweb.redirect:application", self.http_port, "redirect")
        wait_for_https(self.base, self.cafile)
        return self

    def stop(self) -> None:
        for proc in self.procs:
            stop(proc)


def wait_for_https(base: str, cafile: str | bool, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            requests.get(f"{base}/accounts/login/", verify=cafile, timeout=5)
            return
        except requests.ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.fixture(scope="module")
def site(django_db_setup, redis_server, tmp_path_factory):
    from django.db import connection

    workdir = tmp_path_factory.mktemp("https")
    env = {
        "PATH": os.environ["PATH"],
        "DJANGO_SETTINGS_MODULE": "lbweb.settings",
        "LBWEB_VAR_DIR": str(workdir / "var"),
        "DATABASE_URL": database_url(connection.settings_dict),
        "REDIS_URL": redis_server.url,
        "LBWEB_TOKEN_TTL_HOURS": str(TOKEN_TTL_SECONDS / 3600),
        "LBWEB_WEB_WORKERS": "2",
    }
    site = Site(workdir, env)
    try:
        yield site.start()
    finally:
        site.stop()


@pytest.fixture
def accounts(role_users) -> dict:
    """The role accounts, with password hashes the server can check: the test process hashes with MD5 for
    speed (conftest), gunicorn knows only the production hashers. Few PBKDF2 rounds: these are tests."""
    from django.contrib.auth.hashers import PBKDF2PasswordHasher

    hasher = PBKDF2PasswordHasher()
    for user in role_users.values():
        user.password = hasher.encode(ROLE_PASSWORD, hasher.salt(), iterations=1000)
        user.save(update_fields=["password"])
    return role_users


def set_cookies(response: requests.Response) -> dict[str, str]:
    """Each cookie set by the response, by name, with its attributes as sent."""
    return {h.split("=", 1)[0]: h for h in response.raw.headers.getlist("Set-Cookie")}


def csrf_of(html: str) -> str:
    return re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html)[1]


def ui_login(session: requests.Session, site: Site, username: str, password: str) -> requests.Response:
    url = f"{site.base}/accounts/login/"
    form = session.get(url, verify=site.cafile)
    data = {"username": username, "password": password, "csrfmiddlewaretoken": csrf_of(form.text)}
    return session.post(url, data=data, headers={"Referer": url}, verify=site.cafile, allow_redirects=False)


def basic(username: str, password: str) -> dict:
    return {"Authorization": "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()}


def test_https_answers_with_secure_cookies_and_security_headers(site, accounts):
    session = requests.Session()
    page = session.get(f"{site.base}/accounts/login/", verify=site.cafile)  # verified against ensure_tls's cert
    assert page.status_code == 200 and page.url.startswith("https://")
    headers = page.headers
    assert headers["Strict-Transport-Security"] == "max-age=31536000"  # no includeSubDomains, no preload
    csp = headers["Content-Security-Policy"]
    assert "frame-ancestors 'none'" in csp and "script-src 'self'" in csp and "default-src 'self'" in csp
    assert "unsafe-inline" not in csp
    assert headers["X-Frame-Options"] == "DENY"
    assert headers["X-Content-Type-Options"] == "nosniff" and headers["Referrer-Policy"] == "same-origin"
    csrf_cookie = set_cookies(page)["csrftoken"]
    for attribute in ("; Secure", "; HttpOnly", "; SameSite=Lax"):
        assert attribute in csrf_cookie, csrf_cookie

    url = f"{site.base}/accounts/login/"
    data = {"username": "viewer-user", "password": ROLE_PASSWORD, "csrfmiddlewaretoken": csrf_of(page.text)}
    logged_in = session.post(url, data=data, headers={"Referer": url}, verify=site.cafile, allow_redirects=False)
    assert logged_in.status_code == 302, logged_in.text
    session_cookie = set_cookies(logged_in)["sessionid"]
    for attribute in ("; Secure", "; HttpOnly", "; SameSite=Lax"):
        assert attribute in session_cookie, session_cookie
    assert "viewer-user" in session.get(f"{site.base}/", verify=site.cafile).text


def test_plain_http_is_redirected_to_https_and_never_served(site):
    moved = requests.get(f"http://127.0.0.1:{site.http_port}/farms/?q=web", allow_redirects=False, timeout=5)
    assert moved.status_code == 301
    assert moved.headers["Location"] == f"https://127.0.0.1:{site.port}/farms/?q=web"
    named = requests.get(f"http://localhost:{site.http_port}/accounts/login/", verify=site.cafile, timeout=10)
    assert named.status_code == 200 and named.url == f"{site.base}/accounts/login/"  # followed, over HTTPS
    bad_host = requests.get(f"http://127.0.0.1:{site.http_port}/", headers={"Host": "a b"}, allow_redirects=False)
    assert bad_host.status_code == 400
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://127.0.0.1:{site.port}/accounts/login/", timeout=5)  # the HTTPS port speaks only TLS


def test_thirty_wrong_passwords_then_the_right_one_is_refused(site, accounts):
    session = requests.Session()
    started = time.monotonic()
    answers = [ui_login(session, site, "admin-user", f"guess-{n}").status_code for n in range(30)]
    locked = ui_login(session, site, "admin-user", ROLE_PASSWORD)
    elapsed = time.monotonic() - started
    assert answers[:4] == [200] * 4 and set(answers[5:]) == {429}, answers
    assert locked.status_code == 429 and "Too many failed logins" in locked.text
    assert "sessionid" not in session.cookies
    token = requests.post(
        f"{site.base}/api/v1/auth/login/", headers=basic("admin-user", ROLE_PASSWORD), verify=site.cafile
    )
    assert token.status_code == 429 and "Too many failed logins for 'admin-user'" in token.json()["detail"]
    print(f"31 UI logins (30 wrong, then the right one refused) in {elapsed:.1f} s")

    api_answers = [
        requests.post(f"{site.base}/api/v1/auth/login/", headers=basic("operator-user", f"g{n}"), verify=site.cafile)
        for n in range(30)
    ]
    assert {a.status_code for a in api_answers[5:]} == {429}
    right = requests.post(
        f"{site.base}/api/v1/auth/login/", headers=basic("operator-user", ROLE_PASSWORD), verify=site.cafile
    )
    assert right.status_code == 429 and "token" not in right.json()


def test_a_token_expires_and_a_revoked_token_is_refused(site, accounts):
    login = f"{site.base}/api/v1/auth/login/"
    first = requests.post(login, headers=basic("viewer-user", ROLE_PASSWORD), verify=site.cafile).json()
    second = requests.post(login, headers=basic("viewer-user", ROLE_PASSWORD), verify=site.cafile).json()
    expiry = datetime.datetime.fromisoformat(first["expiry"].replace("Z", "+00:00"))

    def farms(token: str) -> int:
        return requests.get(
            f"{site.base}/api/v1/farms/", headers={"Authorization": f"Token {token}"}, verify=site.cafile
        ).status_code

    assert farms(first["token"]) == 200 and farms(second["token"]) == 200
    revoke = requests.post(
        f"{site.base}/api/v1/auth/logout/", headers={"Authorization": f"Token {second['token']}"}, verify=site.cafile
    )
    assert revoke.status_code == 204 and farms(second["token"]) == 401 and farms(first["token"]) == 200
    time.sleep(max(0.0, (expiry - datetime.datetime.now(datetime.UTC)).total_seconds()) + 0.5)
    assert farms(first["token"]) == 401


def served_serial(port: int) -> str:
    """The serial of the certificate a new TLS handshake on ``port`` presents."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, context.wrap_socket(raw) as tls:
        return format(x509.load_der_x509_certificate(tls.getpeercert(binary_form=True)).serial_number, "x")


def test_a_replaced_certificate_is_served_from_the_next_handshake(site, admin_user, tmp_path):
    url = f"{site.base}/api/v1/system/tls-certificate/"
    headers = {"Authorization": f"Token {new_token(admin_user, expiry=datetime.timedelta(hours=1))}"}
    old = requests.get(url, headers=headers, verify=site.cafile).json()
    assert {served_serial(site.port) for _ in range(6)} == {old["serial"]}  # every worker

    root, intermediate, leaf = certs.chain()
    wrong = certs.issue("localhost", intermediate)
    refused = requests.put(
        url,
        json={"certificate": leaf.pem, "chain": intermediate.pem, "key": wrong.key_pem},
        headers=headers,
        verify=site.cafile,
    )
    assert refused.status_code == 400 and "key" in refused.json()
    assert {served_serial(site.port) for _ in range(6)} == {old["serial"]}  # the old one stays in use

    done = requests.put(
        url,
        json={"certificate": leaf.pem, "chain": intermediate.pem, "key": leaf.key_pem},
        headers=headers,
        verify=site.cafile,
    )
    assert done.status_code == 200, done.text
    assert {served_serial(site.port) for _ in range(6)} == {leaf.serial}  # no restart, every worker
    root_file = tmp_path / "root.pem"
    root_file.write_text(root.pem)
    # a client that trusts only the root verifies the new site: the intermediate is served too
    assert requests.get(f"{site.base}/accounts/login/", verify=str(root_file)).status_code == 200

    # Between the two renames of an install the key is new and the certificate old: handshakes then keep
    # the last good pair (gunicorn_conf.ssl_context) instead of failing, and take the new one once complete.
    # The last good pair is the last one installed in every worker, including one that served none of the
    # handshakes above: each worker reloads a changed pair on its own within TLS_REFRESH_SECONDS.
    time.sleep(1)
    tls_dir = Path(site.env["LBWEB_VAR_DIR"]) / "tls"
    following = certs.issue("localhost", intermediate)
    write_private(tls_dir / "lbweb.key", following.key_pem.encode())
    assert {served_serial(site.port) for _ in range(20)} == {leaf.serial}
    write_private(tls_dir / "lbweb.crt", (following.pem + intermediate.pem).encode())
    assert {served_serial(site.port) for _ in range(6)} == {following.serial}


def test_socket_activation_serves_on_the_socket_systemd_hands_over(site):
    activated, ignored = free_port(), free_port()
    env = dict(site.env, LBWEB_BIND=f"127.0.0.1:{ignored}")
    launcher = ["systemd-socket-activate", "-l", f"127.0.0.1:{activated}"]
    launcher += [arg for name in env for arg in ("-E", f"{name}={env[name]}")]
    log = OUTPUT / "logs" / "https-activated.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [*launcher, str(VENV_BIN / "gunicorn"), "-c", "lbweb/gunicorn_conf.py", "lbweb.wsgi"],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for_https(f"https://localhost:{activated}", False)  # the certificate is checked below
        assert requests.get(f"https://localhost:{activated}/accounts/login/", verify=False).status_code == 200
        assert served_serial(activated) == served_serial(site.port)
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", ignored), timeout=2).close()
        assert f"Listening at: https://127.0.0.1:{activated}" in log.read_text()
    finally:
        stop(proc)
