"""Remote syslog in namespaces of its own: a real rsyslog receiver, and lbweb's rsyslog forwarding to it.

    [<tag>-fwd] 198.19.54.1 ---- 198.19.54.2 [<tag>-rcv]
    lbweb's rsyslog (dataplane.syslog.run,    rsyslog: UDP 514 (imudp), TCP 514 (imptcp, octet-counted),
    as lbweb with CAP_SYSLOG only)            TLS 6514 (imtcp + GnuTLS, certificate for log.lbweb.test)

The receiver writes every message it gets as it arrived (``%rawmsg%``), one file per transport. Only
198.19.54.0/24, only in these two namespaces; ``destroy`` stops both rsyslogs (by pid) and removes the namespaces.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from tests.support import certs
from tests.support.lab import sh

ROOT = Path(__file__).resolve().parents[2]
FWD_ADDRESS, RCV_ADDRESS = "198.19.54.1", "198.19.54.2"
TLS_NAME = "log.lbweb.test"
TRANSPORTS = {"udp": 514, "tcp": 514, "tls": 6514}

RECEIVER_CONF = """\
global(workDirectory="{d}" maxMessageSize="64k"
       defaultNetstreamDriverCAFile="{d}/ca.pem" defaultNetstreamDriverCertFile="{d}/server.pem"
       defaultNetstreamDriverKeyFile="{d}/server.key")
template(name="raw" type="string" string="%rawmsg%\\n")
module(load="imudp")
module(load="imptcp")
module(load="imtcp" streamDriver.name="gtls" streamDriver.mode="1" streamDriver.authMode="anon")
input(type="imudp" address="{a}" port="514" ruleset="udp")
input(type="imptcp" address="{a}" port="514" ruleset="tcp")
input(type="imtcp" address="{a}" port="6514" ruleset="tls")
ruleset(name="udp") {{ action(type="omfile" file="{d}/udp.log" template="raw" flushOnTXEnd="on") }}
ruleset(name="tcp") {{ action(type="omfile" file="{d}/tcp.log" template="raw" flushOnTXEnd="on") }}
ruleset(name="tls") {{ action(type="omfile" file="{d}/tls.log" template="raw" flushOnTXEnd="on") }}
"""


class SyslogLab:
    def __init__(self, tag: str | None = None):
        self.tag = tag or f"slg{os.getpid() % 100000}"
        self.fwd, self.rcv = f"{self.tag}-fwd", f"{self.tag}-rcv"
        # Short paths: a unix socket's path holds at most 107 bytes.
        self.base = Path(tempfile.mkdtemp(prefix="lbslg-"))
        self.receiver_dir = self.base / "rcv"
        self.syslog_dir = self.base / "syslog"  # lbweb's: what <state dir>/syslog is on the appliance
        self.access_dir = self.base / "log"  # HAProxy's log/ directory
        self.procs: list[subprocess.Popen] = []
        self.root_ca = certs.issue("lbweb syslog test CA", ca=True)

    @property
    def events_socket(self) -> Path:
        return self.syslog_dir / "events.sock"

    @property
    def access_socket(self) -> Path:
        return self.access_dir / "access.sock"

    def build(self) -> SyslogLab:
        try:
            self._build()
        except BaseException:
            self.destroy()
            raise
        return self

    def _build(self) -> None:
        self.base.chmod(0o755)
        for ns in (self.fwd, self.rcv):
            sh("ip", "netns", "add", ns)
            sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
        sh("ip", "link", "add", "slg0", "netns", self.fwd, "type", "veth", "peer", "name", "slg0", "netns", self.rcv)
        for ns, address in ((self.fwd, FWD_ADDRESS), (self.rcv, RCV_ADDRESS)):
            sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{address}/24", "dev", "slg0")
            sh("ip", "netns", "exec", ns, "ip", "link", "set", "slg0", "up")
        self._start_receiver()
        for directory in (self.syslog_dir, self.access_dir):
            directory.mkdir(mode=0o700)
            shutil.chown(directory, "lbweb", "lbweb")

    def _start_receiver(self) -> None:
        d = self.receiver_dir
        d.mkdir()
        server = certs.issue(TLS_NAME, self.root_ca, names=(TLS_NAME,))
        (d / "ca.pem").write_text(self.root_ca.pem)
        (d / "server.pem").write_text(server.pem)
        (d / "server.key").write_text(server.key_pem)
        (d / "rsyslog.conf").write_text(RECEIVER_CONF.format(d=d, a=RCV_ADDRESS))
        self.procs.append(
            subprocess.Popen(
                [
                    "ip",
                    "netns",
                    "exec",
                    self.rcv,
                    "rsyslogd",
                    "-n",
                    "-f",
                    str(d / "rsyslog.conf"),
                    "-i",
                    str(d / "pid"),
                ],
                stdout=(d / "out.txt").open("w"),
                stderr=subprocess.STDOUT,
            )
        )
        deadline = time.monotonic() + 30  # GnuTLS's start, on a busy machine
        while "6514" not in sh("ip", "netns", "exec", self.rcv, "ss", "-ltn").stdout:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the receiver did not start: {(d / 'out.txt').read_text()}")
            time.sleep(0.1)

    def start_forwarder(self) -> None:
        """lbweb's rsyslog as the appliance runs it: the wrapper, as lbweb with CAP_SYSLOG (deploy/PROCESSES.md)."""
        for path in self.syslog_dir.rglob("*"):
            shutil.chown(path, "lbweb", "lbweb")  # the worker writes these as lbweb on the appliance
        command = [str(ROOT / ".venv/bin/python"), "-m", "dataplane.syslog.run", "--dir", str(self.syslog_dir)]
        self.forwarder_log = self.base / "forwarder.txt"
        self.procs.append(
            subprocess.Popen(
                ["ip", "netns", "exec", self.fwd, str(ROOT / "deploy/privdrop"), "lbweb", "syslog", *command],
                cwd=ROOT,
                stdout=self.forwarder_log.open("w"),
                stderr=subprocess.STDOUT,
            )
        )
        deadline = time.monotonic() + 30
        while not (self.events_socket.exists() and self.access_socket.exists()):
            if time.monotonic() > deadline:
                raise RuntimeError(f"lbweb's rsyslog did not start: {self.forwarder_log.read_text()}")
            time.sleep(0.1)

    def received(self, transport: str) -> list[str]:
        path = self.receiver_dir / f"{transport}.log"
        return path.read_text(errors="replace").splitlines() if path.exists() else []

    def wait_for(self, transport: str, predicate, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while True:
            for line in self.received(transport):
                if predicate(line):
                    return line
            if time.monotonic() > deadline:
                raise AssertionError(f"nothing matching over {transport}; received: {self.received(transport)[-20:]}")
            time.sleep(0.2)

    def destroy(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=5)
        for ns in (self.fwd, self.rcv):
            sh("ip", "netns", "delete", ns, check=False)
        shutil.rmtree(self.base, ignore_errors=True)
