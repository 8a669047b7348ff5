"""HAProxy as the appliance runs it: the supervisord program's own command (deploy/privdrop as lbweb-haproxy with
CAP_NET_BIND_SERVICE only) in the LB namespace, binding ports 80 and 443 of a VIP; the worker's side as lbweb
writing the configuration (keys readable by HAProxy's group only) and reloading through the master socket."""

from __future__ import annotations

import grp
import os
import pwd
import re
import shlex
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dataplane.l7.runtime import MasterCLI
from tests.support.l7_lab import request
from tests.support.lab import run_in_netns
from tests.support.privileges import descendants, proc_status
from tests.support.units import ROOT, contract

VIP = "198.18.100.7"
CAP_NET_BIND_SERVICE = 10

APPLY = """
import sys
from l7.certificates import self_signed
from dataplane.l7.engine import Engine
from compiler.haproxy.spec import *
cert, key = self_signed(["www.example.com"])
farm = FarmSpec(7, "web", "https", sys.argv[3], (443,), redirect_ports=(80,),
                certificates=(CertificateSpec(1, "www", cert + key),),
                services=(ServiceSpec(70, "all", servers=(ServerSpec(11, "198.18.1.11", 80),)),))
outcome = Engine(sys.argv[1], sys.argv[2]).apply(EngineSpec((farm,)))
print("reloaded" if outcome.reloaded else "not reloaded")
"""


def supervisord_command() -> list[str]:
    text = (ROOT / "deploy" / "supervisord.conf").read_text()
    block = text.split("[program:haproxy]", 1)[1].split("\n[", 1)[0]
    command = re.search(r"^command=(.*?)(?=^\w+=)", block, re.S | re.M).group(1)
    return shlex.split(command.replace("\n", " "))


@pytest.fixture
def haproxy_dir():
    base = Path(f"/run/lbweb-haproxy-test-{os.getpid()}")
    base.mkdir(mode=0o755)
    os.chmod(base, 0o755)
    conf, sock = base / "conf", base / "sock"
    for path, owner, group in ((conf, "lbweb", "lbweb-haproxy"), (sock, "lbweb-haproxy", "lbweb")):
        path.mkdir()
        shutil.chown(path, owner, group)
        os.chmod(path, 0o2750)
    yield base
    shutil.rmtree(base)


def test_haproxy_runs_unprivileged_and_the_worker_drives_it(lab, haproxy_dir):
    command = supervisord_command()
    assert command[:3] == ["deploy/privdrop", "lbweb-haproxy", "net_bind_service"]
    # The program is the contract's (run.sh gives each state directory its own LBWEB_HAPROXY_DIR).
    expected = [
        part.replace("/run/lbweb-haproxy", "%(ENV_LBWEB_HAPROXY_DIR)s") for part in contract()["haproxy"].command
    ]
    assert command[3:] == expected
    command = [part.replace("%(ENV_LBWEB_HAPROXY_DIR)s", str(haproxy_dir)) for part in command]
    lab.ns(lab.lb, "ip", "addr", "add", f"{VIP}/32", "dev", "lo")
    log = open(haproxy_dir / "haproxy.log", "w")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(["ip", "netns", "exec", lab.lb, *command], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        cli = MasterCLI(str(haproxy_dir / "sock" / "master.sock"))
        deadline = time.monotonic() + 10
        while not cli.alive():
            assert proc.poll() is None and time.monotonic() < deadline, (haproxy_dir / "haproxy.log").read_text()
            time.sleep(0.05)
        # Every HAProxy process: its own user, CAP_NET_BIND_SERVICE and nothing else, no new privileges.
        engines = [pid for pid in descendants(proc.pid) if proc_status(pid)["Name"] == "haproxy"]
        assert len(engines) == 2  # the master and its worker
        for pid in engines:
            status = proc_status(pid)
            assert status["Uid"].split()[0] == str(pwd.getpwnam("lbweb-haproxy").pw_uid)
            assert int(status["CapEff"], 16) == 1 << CAP_NET_BIND_SERVICE
            assert status["NoNewPrivs"] == "1"
        socket_stat = (haproxy_dir / "sock" / "master.sock").stat()
        assert stat.S_IMODE(socket_stat.st_mode) == 0o660 and grp.getgrgid(socket_stat.st_gid).gr_name == "lbweb"

        # The worker's side, as lbweb: write, check, reload through the master socket.
        apply = subprocess.run(
            ["deploy/privdrop", "lbweb", "", sys.executable, "-c", APPLY, str(haproxy_dir / "conf"),
             str(haproxy_dir / "sock" / "master.sock"), VIP],
            cwd=ROOT, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert apply.returncode == 0 and apply.stdout.strip() == "reloaded", apply.stderr[-2000:]
        key = (haproxy_dir / "conf" / "certs" / "c1.pem").stat()
        assert stat.S_IMODE(key.st_mode) == 0o640
        assert (pwd.getpwuid(key.st_uid).pw_name, grp.getgrgid(key.st_gid).gr_name) == ("lbweb", "lbweb-haproxy")
        # Low ports bound by the unprivileged engine: 443 serves TLS, 80 redirects to it.
        import ssl

        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        answer = run_in_netns(
            lab.client, lambda: request(VIP, 443, "/", {"Host": "www.example.com"}, tls=context, sni="www.example.com")
        )
        assert answer.status == 200 and answer.backend == "b1"
        moved = run_in_netns(lab.client, lambda: request(VIP, 80, "/x", {"Host": "www.example.com"}))
        assert moved.status == 301 and moved.headers["Location"] == "https://www.example.com/x"
    finally:
        proc.terminate()
        proc.wait(timeout=15)
        log.close()
        lab.ns(lab.lb, "ip", "addr", "del", f"{VIP}/32", "dev", "lo", check=False)
