"""The rsyslog generator of remote syslog (``compiler/syslog/``): a golden file that ``rsyslogd -N1`` accepts,
deterministic, refusing any value past the model's validation; HAProxy's access log line, which ``haproxy -c``
takes; and the worker's check, which never lets a refused file be used."""

from __future__ import annotations

import os
import subprocess

import pytest

from compiler.syslog import render
from compiler.syslog.spec import AUDIT, FARM_LOG, KINDS, ServerSpec, SyslogSpec
from tests.remotelog.test_syslog_settings import HOSTILE
from tests.support import GOLDEN, certs

UPDATE = os.environ.get("LBWEB_UPDATE_GOLDEN") == "1"
SPEC = SyslogSpec(
    servers=(
        ServerSpec(1, "198.18.10.1", 514, "udp"),
        ServerSpec(2, "logs.example.org", 514, "tcp", kinds=(AUDIT, FARM_LOG)),
        ServerSpec(3, "2001:2::10", 6514, "tls", ca_file="/var/lib/lbweb/syslog/ca-3.pem", peer_name="*.example.org"),
        ServerSpec(4, "198.18.10.4", 6514, "tls", ca_file="/var/lib/lbweb/syslog/ca-4.pem"),
    ),
    events_socket="/var/lib/lbweb/syslog/events.sock",
    access_socket="/run/lbweb-haproxy/log/access.sock",
    work_dir="/var/lib/lbweb/syslog/work",
)


def golden(name: str, produced: str) -> None:
    path = GOLDEN / name
    if UPDATE or not path.exists():
        path.write_text(produced)
    assert produced == path.read_text(), f"{path} differs: run with LBWEB_UPDATE_GOLDEN=1 after checking the change"


def test_golden_configuration_rsyslog_accepts(tmp_path):
    text = render.rsyslog_conf(SPEC)
    golden("syslog-rsyslog.conf", text)
    # rsyslogd -N1 opens the CA files it is given and needs the work directory: the same file, moved to tmp_path.
    ca = certs.issue("syslog test CA", ca=True).pem
    for n in (3, 4):
        (tmp_path / f"ca-{n}.pem").write_text(ca)
    (tmp_path / "work").mkdir()
    moved = text.replace("/var/lib/lbweb/syslog", str(tmp_path)).replace("/run/lbweb-haproxy/log", str(tmp_path))
    (tmp_path / "rsyslog.conf").write_text(moved)
    result = subprocess.run(["rsyslogd", "-N1", "-f", str(tmp_path / "rsyslog.conf")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_deterministic_and_every_kind_reaches_the_forwarding_rules():
    assert render.rsyslog_conf(SPEC) == render.rsyslog_conf(SPEC)
    text = render.rsyslog_conf(SPEC)
    for kind in KINDS:
        assert f'$.msgid == "{kind}"' in text
    no_kernel = SyslogSpec((ServerSpec(1, "198.18.10.1", 514, "udp", kinds=(AUDIT,)),), "/a/e.sock", "/a/l.sock", "/a")
    assert "imkmsg" not in render.rsyslog_conf(no_kernel)  # nobody takes farm-log: the kernel's log is not read


@pytest.mark.parametrize("value", HOSTILE)
def test_the_generator_refuses_what_validation_would_have(value):
    """Past the model (a row written by hand in the database): rendering stops, nothing is written."""
    for server in (
        ServerSpec(1, value, 514, "udp"),
        ServerSpec(1, "198.18.10.1", 6514, "tls", "ca", "/a/ca.pem", value),
    ):
        spec = SyslogSpec((server,), "/a/e.sock", "/a/l.sock", "/a")
        with pytest.raises(render.UnsafeValue):
            render.rsyslog_conf(spec)
    with pytest.raises(render.UnsafeValue):
        render.rsyslog_conf(SyslogSpec((), f"/a/{value}", "/a/l.sock", "/a"))


def test_a_file_rsyslog_refuses_is_never_used(tmp_path):
    """The worker's check: rsyslogd -N1's words, and the file in place stays as it was."""
    from dataplane.syslog import applier

    (tmp_path / "rsyslog.conf").write_text("# the running one\n")
    with pytest.raises(applier.ConfigRefused, match="error"):
        applier.check('action(type="omfwd" target="198.18.10.1" nosuchparameter="1")\n', tmp_path)
    assert (tmp_path / "rsyslog.conf").read_text() == "# the running one\n"
    assert [p.name for p in tmp_path.iterdir()] == ["rsyslog.conf"]  # the checked copy is gone too


def test_haproxy_sends_each_http_farms_access_log_to_rsyslog_in_rfc5424():
    """The worker's HAProxy configuration names rsyslog's socket in every frontend; HAProxy's own check takes it."""
    from compiler.haproxy.config import render as haproxy_render
    from dataplane.l7 import engine
    from tests.support.l7_specs import full

    socket_path = "/run/lbweb-haproxy/log/access.sock"
    config = haproxy_render(full(), "/run/lbweb-haproxy/conf", socket_path).config
    frontends = config.count("\nfrontend ")
    assert frontends and config.count(f"    log {socket_path} format rfc5424 local0 info\n") == frontends
    assert f"log {socket_path}" not in haproxy_render(full(), "/run/lbweb-haproxy/conf").config  # none: as before
    engine.check(full(), access_log=socket_path)
    with pytest.raises(ValueError):
        haproxy_render(full(), "/run/lbweb-haproxy/conf", "/run/x.sock\n    option nolinger")
