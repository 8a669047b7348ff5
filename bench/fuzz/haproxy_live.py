"""A generated HAProxy configuration run for real, to ask HAProxy itself what it made of each value: the headers it
sets and deletes (an echo frontend returns the request's headers), the cookie and the stick-table key it keeps,
the SNI it sends (a TLS echo returns it), the ``Location`` it answers, the patterns of its ACLs (``show acl``).

Nothing leaves the machine, and no packet moves at all: the farms' addresses (which no fuzzed value touches) are
swapped for UNIX sockets in a scratch directory, every ``server`` for the echo's socket, and the statistics socket
is UNIX too. The process is ended by its pid.
"""

from __future__ import annotations

import base64
import csv
import http.client
import io
import re
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from compiler.haproxy.config import CONFIG_NAME, Bundle
from dataplane.l7.engine import BASE_CONFIG, write_files

ECHO = """
global
    stats socket {dir}/stats.sock mode 600 level admin

frontend fuzz-echo
    bind unix@{dir}/echo.sock
    http-request return status 200 content-type text/plain lf-string "%[req.hdrs,base64]"

frontend fuzz-echo-tls
    bind unix@{dir}/echo-tls.sock ssl crt {certificate}
    http-request return status 200 content-type text/plain lf-string "%[ssl_fc_sni,base64]"
"""
SECTION = re.compile(r"(frontend|backend) (\S+)")
BIND = re.compile(r"(    bind )(\S+)(.*)")
SERVER = re.compile(r"(    server \S+ )(\S+)(.*)")


@dataclass
class Answer:
    status: int
    headers: list[tuple[str, bytes]]  # names lowercased, values as the bytes HAProxy sent
    body: bytes

    def header(self, name: str) -> list[bytes]:
        return [value for key, value in self.headers if key == name.lower()]


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: Path):
        super().__init__("localhost", timeout=5)
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(5)
        self.sock.connect(str(self.path))


def on_unix_sockets(config: str, directory: Path) -> str:
    """``config`` with each frontend's binds on ``<dir>/<frontend>-<n>.sock`` and each server on the echo (the
    TLS echo for a server spoken to in TLS); every other character as generated."""
    out, section, binds = [], "", 0
    for line in config.split("\n"):
        if m := SECTION.match(line):
            section, binds = m.group(2), 0
        elif m := BIND.match(line):
            line = f"{m.group(1)}unix@{directory}/{section}-{binds}.sock{m.group(3)}"
            binds += 1
        elif m := SERVER.match(line):
            echo = "echo-tls" if " ssl " in m.group(3) else "echo"
            line = f"{m.group(1)}unix@{directory}/{echo}.sock{m.group(3)}"
        out.append(line)
    return "\n".join(out)


class LiveHAProxy:
    """HAProxy serving ``bundle`` (as written to ``directory``) until the ``with`` block ends."""

    def __init__(self, bundle: Bundle, directory: Path, certificate: Path, haproxy: str = "haproxy"):
        self.directory = directory
        write_files(bundle, directory)
        live = directory / CONFIG_NAME
        live.write_text(on_unix_sockets(bundle.config, directory))
        echo = directory / "echo.cfg"
        echo.write_text(ECHO.format(dir=directory, certificate=certificate))
        self.log = directory / "haproxy.log"
        self.command = [haproxy, "-db", "-f", str(BASE_CONFIG), "-f", str(echo), "-f", str(live)]
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> LiveHAProxy:
        self.proc = subprocess.Popen(self.command, stdout=self.log.open("w"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while True:
            try:
                if "pxname" in self.cli("show stat"):
                    return self
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.__exit__()
                raise RuntimeError(f"HAProxy did not start: {self.log.read_text()[-2000:]}")
            time.sleep(0.01)

    def __exit__(self, *exc) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)

    def cli(self, command: str) -> str:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(5)
            sock.connect(str(self.directory / "stats.sock"))
            sock.sendall(command.encode() + b"\n")
            chunks = []
            while data := sock.recv(65536):
                chunks.append(data)
        return b"".join(chunks).decode(errors="replace")

    def get(self, frontend: str, path: str, headers: dict[str, str]) -> Answer:
        connection = _UnixConnection(self.directory / f"{frontend}-0.sock")
        try:
            connection.request("GET", path, headers=headers)
            response = connection.getresponse()
            body = response.read()
            pairs = [(k.lower(), v.encode("latin-1")) for k, v in response.getheaders()]
            return Answer(response.status, pairs, body)
        finally:
            connection.close()

    @staticmethod
    def echoed(answer: Answer) -> list[tuple[str, bytes]]:
        """The request headers the echo received, as (lowercased name, value bytes)."""
        block = base64.b64decode(answer.body)
        out = []
        for line in block.split(b"\r\n"):
            if b":" in line:
                name, _, value = line.partition(b":")
                out.append((name.decode("latin-1").lower(), value.strip(b" \t")))
        return out

    def acl_patterns(self) -> dict[int, list[str]]:
        """Line of ``lbweb.cfg`` -> the patterns HAProxy holds for the ACL declared there."""
        out: dict[int, list[str]] = {}
        for entry in self.cli("show acl").splitlines():
            m = re.match(r"(\d+) \(.*\) acl '.*' file '(.*)' line (\d+)\.", entry)
            if not m or not m.group(2).endswith(CONFIG_NAME):
                continue
            patterns = []
            for line in self.cli(f"show acl #{m.group(1)}").split("\n"):
                if line.startswith("0x") and " " in line:
                    patterns.append(line.split(" ", 1)[1])
            out.setdefault(int(m.group(3)), []).extend(patterns)
        return out

    def table_keys(self, table: str) -> list[str]:
        return re.findall(r" key=(.*?) use=", self.cli(f"show table {table}"))

    def sessions(self, backend: str) -> dict[str, int]:
        """Server -> connections it has served (``stot``) in ``backend``."""
        text = self.cli("show stat").lstrip("# ")
        return {
            row["svname"]: int(row["stot"] or 0)
            for row in csv.DictReader(io.StringIO(text))
            if row["pxname"] == backend and row["svname"] not in ("FRONTEND", "BACKEND")
        }
