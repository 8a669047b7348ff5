"""Real directory servers for the login tests, each started by the test on loopback ports of its own: Debian's
``slapd`` (LDAP, StartTLS and LDAPS with a CA the test makes, users and groups seeded with ``ldapadd``), Debian's
``freeradius`` (a users file and a client secret the test writes), and an OpenID Connect provider
(django-oauth-toolkit in a throwaway Django project, ``tests/support/oidc_provider``, served by gunicorn over HTTPS).

Each one lives in a temporary directory and is stopped by its PID; nothing of the host's own configuration
(/etc/ldap, /etc/freeradius) is read or changed.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tests.support import certs
from tests.support.stack import ROOT, VENV_BIN, wait_until

SUFFIX = "dc=lbweb,dc=test"
PEOPLE = f"ou=people,{SUFFIX}"
GROUPS = f"ou=groups,{SUFFIX}"
READER_DN = f"cn=reader,{SUFFIX}"
USER_PASSWORD = "directory-password-1"
# One user per role and one in no mapped group; LDAP, RADIUS and the OIDC provider know the same people.
ROLE_USERS = {"admin": "alice", "operator": "oscar", "viewer": "victor"}
UNMAPPED_USER = "nora"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


def _stop(proc: subprocess.Popen | None) -> None:
    if proc is not None and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@dataclass
class Tls:
    """A CA of the test's own and a server certificate it signed for 127.0.0.1; another CA that signed
    nothing (a client trusting only that one must fail the TLS handshake)."""

    directory: Path
    ca: certs.Issued = field(init=False)
    server: certs.Issued = field(init=False)
    stranger: certs.Issued = field(init=False)

    def __post_init__(self) -> None:
        self.ca = certs.issue("lbweb test directory CA", ca=True)
        self.server = certs.issue("127.0.0.1", self.ca, names=("127.0.0.1",))
        self.stranger = certs.issue("some other CA", ca=True)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.ca_file.write_text(self.ca.pem)
        self.cert_file.write_text(self.server.pem)
        self.key_file.write_text(self.server.key_pem)
        self.key_file.chmod(0o600)

    @property
    def ca_file(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def cert_file(self) -> Path:
        return self.directory / "server.pem"

    @property
    def key_file(self) -> Path:
        return self.directory / "server.key"


SLAPD_CONF = """\
include /etc/ldap/schema/core.schema
include /etc/ldap/schema/cosine.schema
include /etc/ldap/schema/inetorgperson.schema
include /etc/ldap/schema/nis.schema
pidfile {dir}/slapd.pid
modulepath /usr/lib/ldap
moduleload back_mdb
TLSCACertificateFile {tls.ca_file}
TLSCertificateFile {tls.cert_file}
TLSCertificateKeyFile {tls.key_file}
database mdb
maxsize 16777216
suffix "{suffix}"
rootdn "cn=manager,{suffix}"
rootpw {rootpw}
directory {dir}/db
access to attrs=userPassword by anonymous auth by * none
access to * by users read by anonymous auth
"""


class Slapd:
    """Debian's slapd with a database of the test's own: plain LDAP (StartTLS offered) on one port, LDAPS on
    another, both on 127.0.0.1."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)
        self.tls = Tls(self.directory / "tls")
        self.port, self.ldaps_port = free_port(), free_port()
        self.rootpw = secrets.token_urlsafe(12)
        self.reader_password = "reader-password-1"
        self.proc: subprocess.Popen | None = None

    @property
    def uri(self) -> str:
        return f"ldap://127.0.0.1:{self.port}"

    @property
    def ldaps_uri(self) -> str:
        return f"ldaps://127.0.0.1:{self.ldaps_port}"

    def group_dn(self, role: str) -> str:
        return f"cn=lbweb-{role}s,{GROUPS}"

    def user_dn(self, uid: str) -> str:
        return f"uid={uid},{PEOPLE}"

    def start(self) -> Slapd:
        (self.directory / "db").mkdir(parents=True, exist_ok=True)
        conf = self.directory / "slapd.conf"
        conf.write_text(SLAPD_CONF.format(dir=self.directory, tls=self.tls, suffix=SUFFIX, rootpw=self.rootpw))
        listen = f"ldap://127.0.0.1:{self.port}/ ldaps://127.0.0.1:{self.ldaps_port}/"
        log = open(self.directory / "slapd.log", "wb")  # noqa: SIM115 (kept open for the process' life)
        self.proc = subprocess.Popen(
            ["/usr/sbin/slapd", "-d", "0", "-f", str(conf), "-h", listen], stdout=log, stderr=subprocess.STDOUT
        )
        wait_until(lambda: _answers(self.port) and _answers(self.ldaps_port), 20, "slapd listening")
        self.seed()
        return self

    def ldapadd(self, ldif: str) -> None:
        subprocess.run(
            ["ldapadd", "-x", "-H", f"ldap://127.0.0.1:{self.port}", "-D", f"cn=manager,{SUFFIX}", "-w", self.rootpw],
            input=ldif.encode(),
            check=True,
            capture_output=True,
        )

    def seed(self) -> None:
        """The tree, the service account lbweb binds as, a user per role and one in no mapped group, and a
        group per role (groupOfNames: ``member`` holds the user's DN)."""
        entries = [
            f"dn: {SUFFIX}\nobjectClass: dcObject\nobjectClass: organization\ndc: lbweb\no: lbweb test\n",
            f"dn: {PEOPLE}\nobjectClass: organizationalUnit\nou: people\n",
            f"dn: {GROUPS}\nobjectClass: organizationalUnit\nou: groups\n",
            f"dn: {READER_DN}\nobjectClass: simpleSecurityObject\nobjectClass: organizationalRole\ncn: reader\n"
            f"userPassword: {self.reader_password}\n",
        ]
        for uid in (*ROLE_USERS.values(), UNMAPPED_USER):
            entries.append(
                f"dn: {self.user_dn(uid)}\nobjectClass: inetOrgPerson\nuid: {uid}\ncn: {uid.title()}\nsn: Test\n"
                f"mail: {uid}@lbweb.test\nuserPassword: {USER_PASSWORD}\n"
            )
        for role, uid in ROLE_USERS.items():
            entries.append(
                f"dn: {self.group_dn(role)}\nobjectClass: groupOfNames\ncn: lbweb-{role}s\n"
                f"member: {self.user_dn(uid)}\n"
            )
        entries.append(
            f"dn: cn=others,{GROUPS}\nobjectClass: groupOfNames\ncn: others\nmember: {self.user_dn(UNMAPPED_USER)}\n"
        )
        self.ldapadd("\n".join(entries))

    def stop(self) -> None:
        _stop(self.proc)


RADIUSD_CONF = """\
prefix = /usr
exec_prefix = /usr
sysconfdir = /etc
localstatedir = {dir}
sbindir = /usr/sbin
logdir = {dir}
raddbdir = {dir}
radacctdir = {dir}
name = radiusd
confdir = {dir}
modconfdir = {dir}
run_dir = {dir}
db_dir = {dir}
libdir = /usr/lib/freeradius
dictdir = /usr/share/freeradius
pidfile = {dir}/radiusd.pid
max_request_time = 10
cleanup_delay = 1
max_requests = 256
hostname_lookups = no
log {{
    destination = files
    file = {dir}/radius.log
    auth = yes
}}
security {{
    allow_core_dumps = no
    max_attributes = 200
    reject_delay = 0
    status_server = yes
}}
thread pool {{
    start_servers = 1
    max_servers = 2
    min_spare_servers = 1
    max_spare_servers = 2
}}
client lbweb {{
    ipaddr = 127.0.0.1
    secret = {secret}
    require_message_authenticator = yes
}}
modules {{
    files {{
        filename = {dir}/users
    }}
    pap {{
    }}
}}
server default {{
    listen {{
        type = auth
        ipaddr = 127.0.0.1
        port = {port}
    }}
    authorize {{
        files
        pap
    }}
    authenticate {{
        Auth-Type PAP {{
            pap
        }}
    }}
}}
"""


class FreeRadius:
    """Debian's freeradius with a configuration of the test's own: one client (127.0.0.1, a secret the test
    chose, Message-Authenticator required), a users file giving each role's user its Filter-Id."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)
        self.port = free_udp_port()
        self.secret = secrets.token_urlsafe(16)
        self.proc: subprocess.Popen | None = None

    def users(self) -> str:
        lines = []
        for role, uid in ROLE_USERS.items():
            lines += [f'{uid} Cleartext-Password := "{USER_PASSWORD}"', f'        Filter-Id = "lbweb-{role}"', ""]
        lines += [f'{UNMAPPED_USER} Cleartext-Password := "{USER_PASSWORD}"', '        Filter-Id = "staff"', ""]
        return "\n".join(lines)

    def start(self) -> FreeRadius:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.directory.chmod(0o700)
        (self.directory / "users").write_text(self.users())
        conf = RADIUSD_CONF.format(dir=self.directory, secret=self.secret, port=self.port)
        (self.directory / "radiusd.conf").write_text(conf)
        log = open(self.directory / "stdout.log", "wb")  # noqa: SIM115 (kept open for the process' life)
        self.proc = subprocess.Popen(
            ["/usr/sbin/freeradius", "-f", "-d", str(self.directory), "-n", "radiusd", "-l", "stdout"],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        wait_until(self._listening, 20, "freeradius listening")
        return self

    def _listening(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"freeradius exited: {(self.directory / 'stdout.log').read_text()[-2000:]}")
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            try:
                probe.bind(("127.0.0.1", self.port))
            except OSError:
                return True  # the port is taken: freeradius holds it
        return False

    def stop(self) -> None:
        _stop(self.proc)


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def radius_settings(radius: FreeRadius, **overrides) -> dict:
    values = {
        "enabled": True,
        "server": "127.0.0.1",
        "port": radius.port,
        "secret": radius.secret,
        "timeout": 1,
        "retries": 1,
        # Debian 12's freeradius (3.2.1) signs no reply with a Message-Authenticator (3.2.5 does).
        "require_message_authenticator": False,
        "role_attribute": "Filter-Id",
        "admin_value": "lbweb-admin",
        "operator_value": "lbweb-operator",
        "viewer_value": "lbweb-viewer",
    }
    values.update(overrides)
    return values


class OidcProvider:
    """The throwaway provider of tests/support/oidc_provider: django-oauth-toolkit under gunicorn, HTTPS with the test's
    CA, its database made with the role users (each in its role's group) and lbweb registered as a client whose
    redirect URI is ``redirect_uri``."""

    def __init__(self, directory: Path, redirect_uri: str):
        self.directory = Path(directory)
        self.tls = Tls(self.directory / "tls")
        self.port = free_port()
        self.client_id, self.client_secret = "lbweb-test", secrets.token_urlsafe(24)
        self.redirect_uri = redirect_uri
        self.proc: subprocess.Popen | None = None

    @property
    def issuer(self) -> str:
        return f"https://127.0.0.1:{self.port}/o"

    def group(self, role: str) -> str:
        return f"lbweb-{role}s"

    def env(self) -> dict:
        users = {uid: [USER_PASSWORD, [self.group(role)]] for role, uid in ROLE_USERS.items()}
        users[UNMAPPED_USER] = [USER_PASSWORD, ["staff"]]
        client = {"id": self.client_id, "secret": self.client_secret, "redirect_uri": self.redirect_uri}
        return dict(
            os.environ,
            DJANGO_SETTINGS_MODULE="tests.support.oidc_provider.settings",
            OIDC_PROVIDER_DIR=str(self.directory),
            OIDC_PROVIDER_ISSUER=self.issuer,
            OIDC_PROVIDER_USERS=json.dumps(users),
            OIDC_PROVIDER_CLIENT=json.dumps(client),
            PYTHONPATH=str(ROOT),
        )

    def start(self) -> OidcProvider:
        (self.directory / "secret_key").write_text(secrets.token_urlsafe(40))
        (self.directory / "signing.key").write_text(certs.Issued(None, certs.rsa_key()).key_pem)
        env = self.env()
        subprocess.run(
            [sys.executable, "-m", "tests.support.oidc_provider.make_database"], env=env, cwd=ROOT, check=True
        )
        log = open(self.directory / "gunicorn.log", "wb")  # noqa: SIM115 (kept open for the process' life)
        self.proc = subprocess.Popen(
            [str(VENV_BIN / "gunicorn"), "--bind", f"127.0.0.1:{self.port}", "--workers", "1", "--threads", "4"]
            + ["--certfile", str(self.tls.cert_file), "--keyfile", str(self.tls.key_file)]
            + ["tests.support.oidc_provider.wsgi:application"],
            env=env,
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        wait_until(lambda: _answers(self.port), 30, "the OIDC provider listening")
        return self

    def stop(self) -> None:
        _stop(self.proc)


def oidc_settings(provider: OidcProvider, **overrides) -> dict:
    values = {
        "enabled": True,
        "issuer": provider.issuer,
        "client_id": provider.client_id,
        "client_secret": provider.client_secret,
        "ca_certificate": provider.tls.ca.pem,
        "scopes": "openid profile email",
        "username_claim": "preferred_username",
        "role_claim": "groups",
        "admin_value": provider.group("admin"),
        "operator_value": provider.group("operator"),
        "viewer_value": provider.group("viewer"),
    }
    values.update(overrides)
    return values


def ldap_settings(slapd: Slapd, *, security: str = "starttls", ca: str | None = None, **overrides) -> dict:
    """The values of System › Authentication › LDAP for ``slapd`` (``services.ldap_update``'s keywords)."""
    values = {
        "enabled": True,
        "server_uris": slapd.ldaps_uri if security == "ldaps" else slapd.uri,
        "security": security,
        "ca_certificate": slapd.tls.ca.pem if ca is None else ca,
        "bind_dn": READER_DN,
        "bind_password": slapd.reader_password,
        "user_search_base": PEOPLE,
        "user_search_filter": "(uid=%(user)s)",
        "group_search_base": GROUPS,
        "group_type": "groupOfNames",
        "admin_group": slapd.group_dn("admin"),
        "operator_group": slapd.group_dn("operator"),
        "viewer_group": slapd.group_dn("viewer"),
        "timeout": 3,
    }
    values.update(overrides)
    return values
