"""deploy/systemd: every unit is valid for systemd and says what deploy/PROCESSES.md says (user, command, capabilities,
writable paths), so the units and the contract cannot drift apart. No systemd runs here as PID 1: ``systemd-analyze
verify`` and its offline security review read the files (the appliance-image issue boots them)."""

from __future__ import annotations

import grp
import os
import pwd
import shlex
import shutil
import socket
import stat
import subprocess

import pytest
import requests

from tests.conftest import wait_for
from tests.support.units import (
    APP_DIR,
    ROOT,
    STATE_DIR,
    TMPFILES,
    UNIT_DIR,
    contract,
    prober_socket,
    read_unit,
    render,
    setup_steps,
    socket_ports,
    unit_files,
    verify,
)

PROGRAMS = contract()
SERVICES = [*PROGRAMS, "setup"]
LBWEB_SERVICES = [name for name in SERVICES if name == "setup" or PROGRAMS[name].user == "lbweb"]
ENV_FILE = "-/etc/lbweb/lbweb.env"


def service(name: str) -> dict[str, list[str]]:
    return read_unit(UNIT_DIR / f"lbweb-{name}.service")["Service"]


def one(section: dict[str, list[str]], key: str) -> str:
    values = section.get(key, [])
    assert len(values) == 1, f"{key}: expected one value, found {values}"
    return values[0]


def test_one_unit_per_program_all_wanted_by_lbweb_target():
    expected = {f"lbweb-{name}.service" for name in SERVICES} | {f"lbweb-{name}.socket" for name in socket_ports()}
    assert {path.name for path in unit_files()} == expected | {"lbweb.target"}
    target = read_unit(UNIT_DIR / "lbweb.target")
    assert set(" ".join(target["Unit"]["Wants"]).split()) == expected
    assert target["Install"]["WantedBy"] == ["multi-user.target"]
    for name in expected:
        assert "lbweb.target" in read_unit(UNIT_DIR / name)["Unit"]["PartOf"], name


@pytest.mark.parametrize("name", PROGRAMS)
def test_runs_the_contracts_command_as_its_user_with_only_its_capabilities(name):
    program, unit = PROGRAMS[name], service(name)
    assert one(unit, "User") == program.user
    assert one(unit, "Group") == program.user  # lbweb-probe's own group, never lbweb (lbweb.env is group lbweb)
    assert set(one(unit, "CapabilityBoundingSet").split()) == program.capabilities
    assert set(one(unit, "AmbientCapabilities").split()) == program.capabilities
    assert one(unit, "WorkingDirectory") == APP_DIR
    command = shlex.split(one(unit, "ExecStart"))
    binary = f"{APP_DIR}/{program.command[0]}" if program.command[0].startswith(".venv/") else program.command[0]
    assert command[0] == binary or command[0] == f"/usr/bin/{binary}"
    assert tuple(command[1 : len(program.command)]) == program.command[1:]


@pytest.mark.parametrize("name", SERVICES)
def test_hardening(name):
    unit = service(name)
    for key, value in {
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "PrivateDevices": "yes",
        "UMask": "0077",
        "ProtectKernelModules": "yes",
        "ProtectControlGroups": "yes",
        "RestrictSUIDSGID": "yes",
        "LockPersonality": "yes",
        "SystemCallArchitectures": "native",
    }.items():
        assert one(unit, key) == value, key
    assert unit["SystemCallFilter"][0] == "@system-service"
    # Only keepalived sends raw frames: VRRP's gratuitous ARP, and its transition handler's for the farms' VIPs.
    assert ("AF_PACKET" in one(unit, "RestrictAddressFamilies")) == (name == "keepalived")
    # Only the worker writes kernel tunables (forwarding) and makes namespaces (its scratch network namespace).
    assert one(unit, "ProtectKernelTunables") == ("no" if name == "worker" else "yes")
    assert one(unit, "RestrictNamespaces") == ("user net" if name == "worker" else "yes")
    if name == "setup":
        assert one(unit, "Type") == "oneshot" and "Restart" not in unit
    else:
        assert one(unit, "Restart") == "on-failure" and one(unit, "RestartSec")
        assert read_unit(UNIT_DIR / f"lbweb-{name}.service")["Unit"]["StartLimitBurst"]


@pytest.mark.parametrize("name", LBWEB_SERVICES)
def test_lbweb_processes_write_only_the_state_directory(name):
    unit = service(name)
    # The worker also writes HAProxy's configuration, rsyslog the access log socket for HAProxy (deploy/PROCESSES.md).
    also = {"worker": " /run/lbweb-haproxy/conf", "rsyslog": " /run/lbweb-haproxy/log"}.get(name, "")
    assert unit["ReadWritePaths"] == [STATE_DIR + also]
    assert one(unit, "StateDirectory") == os.path.basename(STATE_DIR)
    assert one(unit, "StateDirectoryMode") == "0700"
    assert f"LBWEB_VAR_DIR={STATE_DIR}" in unit["Environment"]
    assert unit["EnvironmentFile"] == [ENV_FILE]
    # lbweb.env may hold the admin password: for the set-up step's ensure_admin, never for a running process.
    assert unit.get("UnsetEnvironment", []) == ([] if name == "setup" else ["LBWEB_ADMIN_PASSWORD"])


def test_prober_gets_its_runtime_directory_and_nothing_of_lbweb():
    unit, runtime = service("prober"), os.path.dirname(prober_socket())
    assert unit["ReadWritePaths"] == [runtime]
    # StateDirectory= would make systemd chown the state directory to lbweb-probe (RuntimeDirectory= likewise
    # gives the runtime directory back to lbweb-probe's group); lbweb.env holds lbweb's secrets.
    assert not {"StateDirectory", "RuntimeDirectory", "EnvironmentFile"} & unit.keys()
    assert unit["Environment"] == [f"LBWEB_PROBER_SOCKET={prober_socket()}"]
    assert f"LBWEB_PROBER_SOCKET={prober_socket()}" in service("healthd")["Environment"]
    assert "systemd-tmpfiles-setup.service" in read_unit(UNIT_DIR / "lbweb-prober.service")["Unit"]["After"][0]


def test_tmpfiles_makes_the_probers_directory_as_the_contract_says(tmp_path):
    """systemd-tmpfiles itself, into a throw-away root that knows this machine's users (the suite runs as root)."""
    (tmp_path / "etc").mkdir()
    for name in ("passwd", "group"):
        shutil.copy(f"/etc/{name}", tmp_path / "etc" / name)
    subprocess.run(["systemd-tmpfiles", "--create", f"--root={tmp_path}", str(TMPFILES)], check=True, timeout=60)
    made = (tmp_path / os.path.dirname(prober_socket()).lstrip("/")).stat()
    # Owner lbweb-probe, group lbweb, 0750; setgid, so the socket the prober makes gets group lbweb too.
    assert (pwd.getpwuid(made.st_uid).pw_name, grp.getgrgid(made.st_gid).gr_name) == ("lbweb-probe", "lbweb")
    assert stat.S_IMODE(made.st_mode) == 0o2750
    # HAProxy's: conf/ the worker writes for HAProxy's group, sock/ HAProxy's master socket for lbweb's group.
    # log/: lbweb's rsyslog makes the access log socket HAProxy's group sends to.
    for sub, owner, group in (
        ("conf", "lbweb", "lbweb-haproxy"),
        ("sock", "lbweb-haproxy", "lbweb"),
        ("log", "lbweb", "lbweb-haproxy"),
    ):
        made = (tmp_path / "run" / "lbweb-haproxy" / sub).stat()
        assert (pwd.getpwuid(made.st_uid).pw_name, grp.getgrgid(made.st_gid).gr_name) == (owner, group)
        assert stat.S_IMODE(made.st_mode) == 0o2750


def test_setup_runs_the_contracts_steps_before_the_programs():
    unit = service("setup")
    steps = [tuple(shlex.split(line)[1:3]) for line in unit["ExecStart"]]
    assert steps == setup_steps()
    assert all(shlex.split(line)[0] == f"{APP_DIR}/.venv/bin/python" for line in unit["ExecStart"])
    assert one(unit, "User") == "lbweb" and one(unit, "RemainAfterExit") == "yes"
    for name in PROGRAMS:
        unit_section = read_unit(UNIT_DIR / f"lbweb-{name}.service")["Unit"]
        needs_setup = name not in ("redis", "prober")
        assert ("lbweb-setup.service" in " ".join(unit_section.get("Requires", []))) == needs_setup, name
        assert ("lbweb-setup.service" in " ".join(unit_section.get("After", []))) == needs_setup, name


@pytest.mark.parametrize(("name", "port"), socket_ports().items())
def test_web_and_redirect_get_their_sockets_from_systemd(name, port):
    socket_unit = read_unit(UNIT_DIR / f"lbweb-{name}.socket")["Socket"]
    assert socket_unit["ListenStream"] == [str(port)]
    unit = read_unit(UNIT_DIR / f"lbweb-{name}.service")
    assert f"lbweb-{name}.socket" in unit["Unit"]["Requires"][0].split()
    # gunicorn reports READY=1 after it took the sockets (Type=notify); it needs no CAP_NET_BIND_SERVICE.
    assert one(unit["Service"], "Type") == "notify"


def test_redirect_points_to_the_web_sockets_port():
    """lbweb/redirect.py takes the HTTPS port from LBWEB_BIND, which the units leave unset (the socket binds)."""
    assert f"LBWEB_HTTPS_PORT={socket_ports()['web']}" in service("redirect")["Environment"]


def test_the_web_knows_the_ports_of_both_sockets_as_its_management_ports():
    """farms/validation.py refuses a farm that takes them on one of the appliance's own addresses."""
    ports = socket_ports()
    assert f"LBWEB_MANAGEMENT_PORTS={ports['web']},{ports['redirect']}" in service("web")["Environment"]


def test_redis_starts_only_without_redis_url():
    unit = service("redis")
    assert unit["ExecCondition"] == ["/bin/sh -c 'test -z \"$${REDIS_URL:-}\"'"]
    assert one(unit, "PrivateNetwork") == "yes" and one(unit, "RestrictAddressFamilies") == "AF_UNIX"


def test_systemd_analyze_verify_passes(tmp_path):
    """Rendered to run from this checkout, whose .venv has the same programs as an installed /opt/lbweb/.venv."""
    assert (ROOT / ".venv" / "bin" / "gunicorn").exists(), "the checkout's .venv (deploy/setup.sh) is needed"
    assert verify(render(tmp_path, ROOT)) == ""


@pytest.mark.parametrize(
    ("edit", "complaint"),
    [
        (("Restart=on-failure", "Restart=on-failure\nRestartx=always"), "Unknown key"),
        (("UMask=0077", "UMask=0999"), "Failed to parse"),
        (("/.venv/bin/celery -A lbweb beat", "/.venv/bin/celery-nope -A lbweb beat"), "not executable"),
        (("Requires=lbweb-setup.service", "Requires=lbweb-setupx.service"), "not found"),
    ],
)
def test_verify_catches_a_broken_unit(tmp_path, edit, complaint):
    """The check above is worth something: a broken copy of one unit fails it."""
    units = render(tmp_path, ROOT)
    beat = tmp_path / "lbweb-beat.service"
    assert edit[0] in beat.read_text()
    beat.write_text(beat.read_text().replace(edit[0], edit[1]))
    assert complaint in verify(units)


@pytest.mark.parametrize("name", SERVICES)
def test_offline_security_review_rates_every_service_ok(tmp_path, name):
    """systemd's own exposure score (0 safe, 10 unsafe) reads the file alone; every lbweb service is at most 3.0."""
    units = {path.name: path for path in render(tmp_path, ROOT)}
    result = subprocess.run(
        ["systemd-analyze", "security", "--offline=true", "--threshold=30", str(units[f"lbweb-{name}.service"])],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout[-400:] + result.stderr


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [ROOT / ".venv" / "bin" / "python", "manage.py", *args],
        cwd=ROOT,
        env={"PATH": os.environ["PATH"], **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize(
    ("name", "path", "status", "location"),
    [("web", "/accounts/login/", 200, None), ("redirect", "/farms/?a=1", 301, "https://127.0.0.1/farms/?a=1")],
)
def test_gunicorn_serves_on_the_socket_systemd_hands_over(tmp_path, name, path, status, location):
    """The unit's own ExecStart and Environment under systemd-socket-activate, which passes a listening socket as
    systemd does (LISTEN_FDS, LISTEN_PID, a clean environment): gunicorn answers on it, reports READY=1 (the
    unit is Type=notify), and binds nothing of its own. (With gunicorn's reuse_port every worker binds
    LBWEB_BIND itself and the socket systemd holds on 443 or 80 is never answered.)"""
    command = shlex.split(one(service(name), "ExecStart").replace(APP_DIR, str(ROOT)))
    if not (ROOT / command[2]).exists():
        pytest.skip(f"{command[2]} is not in this checkout yet (issue 11: TLS web)")
    env = dict(line.split("=", 1) for line in service(name)["Environment"]) | {"LBWEB_VAR_DIR": str(tmp_path / "var")}
    if name == "web":
        if "ensure_tls" not in manage(env, "help", "--commands").stdout.split():
            pytest.skip("manage.py ensure_tls is not in this checkout yet (issue 11: TLS web)")
        for step in ("migrate", "ensure_tls"):
            assert manage(env, step).returncode == 0, step
    port, decoy = free_port(), free_port()
    env |= {"LBWEB_BIND": f"127.0.0.1:{decoy}", "LBWEB_HTTP_BIND": f"127.0.0.1:{decoy}"}
    env["NOTIFY_SOCKET"] = str(tmp_path / "notify")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as notify:
        notify.bind(env["NOTIFY_SOCKET"])
        notify.settimeout(60)
        log = tmp_path / f"{name}.log"
        server = subprocess.Popen(
            ["systemd-socket-activate", f"--listen=127.0.0.1:{port}", *(f"-E{k}={v}" for k, v in env.items())]
            + command,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=log.open("w"),
        )
        try:
            scheme = "https" if name == "web" else "http"
            wait_for(lambda: "Listening on" in log.read_text(), timeout=10, what="systemd-socket-activate listening")
            # The first connection makes systemd-socket-activate start gunicorn; it waits in the socket's backlog.
            answer = requests.get(f"{scheme}://127.0.0.1:{port}{path}", verify=False, allow_redirects=False, timeout=60)
            assert answer.status_code == status, log.read_text()[-3000:]
            assert answer.headers.get("Location") == location
            assert b"READY=1" in notify.recv(4096)
            with pytest.raises(requests.ConnectionError):
                requests.get(f"{scheme}://127.0.0.1:{decoy}/", verify=False, timeout=10)
        finally:
            server.terminate()
            server.wait(timeout=30)
