"""The appliance image under qemu: boot, first-boot seed, API, real traffic, upgrade, installer, UEFI.

Run by ``deploy/image/test.sh`` (``python -m tests.support.image_vm --image-dir DIR --upgrade-deb DEB --report FILE``),
which builds what it needs first; ``tests/deploy/test_image.py`` runs that command and reads the report.

    host 127.0.0.1:PORT --(qemu user network, restricted: no way out)--> appliance 198.19.254.15:443
    client 198.19.1.10 --+                                       +-- b1 198.19.1.21 (tests/support/lab_server.py)
                         +-- bridge (namespace lbi<pid>-w) -- tap -- appliance 198.19.1.1 (second NIC)
                                                             +-- b2 198.19.1.22
    VIPs 198.19.2.0/24, routed by the client to the appliance.

Only 198.18.0.0/15 is used, only in namespaces made here (names carry the pid, or LBWEB_IMAGE_NS_TAG), all removed
at the end. Commands inside the machine go through the QEMU guest agent (a virtio channel only the hypervisor holds:
the appliance has no SSH and listens on no network for this). Timings are wall-clock seconds on this machine.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests
import urllib3

from tests.support.lab import enter_netns
from tests.support.units import contract

ROOT = Path(__file__).resolve().parents[2]
# verify=False is deliberate (the certificate names the appliance's address, not 127.0.0.1): no warning per call.
urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
PID = os.getpid()
# The lab's namespaces are TAG-w, -c, -b1, -b2; tests/support/image_side.py names the tag, to remove them after a kill.
TAG = os.environ.get("LBWEB_IMAGE_NS_TAG") or f"lbi{PID}"
MGMT_NET, MGMT_HOST, MGMT_ADDR = "198.19.254.0/24", "198.19.254.2", "198.19.254.15"
DATA_ADDR, CLIENT, BACKENDS = "198.19.1.1", "198.19.1.10", {"b1": "198.19.1.21", "b2": "198.19.1.22"}
VIP_WEB, VIP_FAST = "198.19.2.1", "198.19.2.2"
MGMT_MAC, DATA_MAC = "52:54:00:19:fe:0f", "52:54:00:19:01:01"
PASSWORD = "image-test-admin-password"
OVMF = Path("/usr/share/OVMF")
CAPS = [
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
]


def log(text: str) -> None:
    print(f"[image test {time.strftime('%H:%M:%S')}] {text}", flush=True)


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(args, check=check, capture_output=True, text=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class GuestAgent:
    """The QEMU guest agent over its unix socket: guest-exec with the output captured."""

    def __init__(self, path: Path):
        self.path = path
        self.sock: socket.socket | None = None
        self.buffer = b""

    def _connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(str(self.path))

    def _call(self, command: dict, timeout: float) -> dict:
        assert self.sock
        self.sock.settimeout(timeout)
        self.sock.sendall(json.dumps(command).encode() + b"\n")
        while True:
            while b"\n" not in self.buffer:
                chunk = self.sock.recv(65536)
                if not chunk:
                    raise ConnectionError("guest agent closed")
                self.buffer += chunk
            line, self.buffer = self.buffer.split(b"\n", 1)
            line = line.strip().lstrip(b"\xff")
            if not line:
                continue
            answer = json.loads(line)
            if "error" in answer:
                raise RuntimeError(f"guest agent: {answer['error']}")
            if "return" in answer:
                return answer["return"]

    def sync(self, timeout: float = 3) -> None:
        """guest-sync-delimited: the agent answers only once it runs; stale bytes before it are dropped."""
        if self.sock is None:
            self._connect()
        token = int(time.time() * 1000) % 2**31
        self.buffer = b""
        assert self.sock
        self.sock.settimeout(timeout)
        self.sock.sendall(json.dumps({"execute": "guest-sync-delimited", "arguments": {"id": token}}).encode() + b"\n")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("guest agent closed")
            self.buffer += chunk
            if b"\xff" in self.buffer:
                self.buffer = self.buffer.split(b"\xff")[-1]
            for line in self.buffer.split(b"\n"):
                with contextlib.suppress(ValueError):
                    if json.loads(line).get("return") == token:
                        self.buffer = b""
                        return
        raise TimeoutError("guest agent did not answer")

    def wait(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.sync()
                return
            except (OSError, TimeoutError, ConnectionError, ValueError):
                if self.sock:
                    self.sock.close()
                self.sock = None
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)

    def run(self, command: str, timeout: float = 120, check: bool = True) -> tuple[int, str]:
        """``sh -c command`` in the machine: (exit code, stdout + stderr)."""
        pid = self._call(
            {
                "execute": "guest-exec",
                "arguments": {"path": "/bin/sh", "arg": ["-c", command], "capture-output": True},
            },
            60,  # an emulated machine under load answers late
        )["pid"]
        deadline = time.monotonic() + timeout
        while True:
            status = self._call({"execute": "guest-exec-status", "arguments": {"pid": pid}}, 60)  # likewise
            if status.get("exited"):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"in the machine: {command} still running after {timeout} s")
            time.sleep(0.2)
        out = base64.b64decode(status.get("out-data", "")).decode(errors="replace")
        out += base64.b64decode(status.get("err-data", "")).decode(errors="replace")
        code = status.get("exitcode", -1)
        if check and code != 0:
            raise AssertionError(f"in the machine: {command!r} exited {code}:\n{out}")
        return code, out

    def close(self) -> None:
        if self.sock:
            self.sock.close()
            self.sock = None


class Lab:
    """The data network: a bridge in its own namespace with the machine's tap, a client and two backends."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.wire, self.client = f"{TAG}-w", f"{TAG}-c"
        self.backends = {name: f"{TAG}-{name}" for name in BACKENDS}
        self.servers: list[subprocess.Popen] = []
        self.tap_fd = -1

    def ns(self, ns: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return sh("ip", "netns", "exec", ns, *args, check=check)

    def build(self) -> Lab:
        for ns in (self.wire, self.client, *self.backends.values()):
            sh("ip", "netns", "add", ns)
            self.ns(ns, "ip", "link", "set", "lo", "up")
        self.ns(self.wire, "ip", "link", "add", "br0", "type", "bridge")
        self.ns(self.wire, "ip", "link", "set", "br0", "up")
        hosts = {self.client: CLIENT, **{self.backends[n]: a for n, a in BACKENDS.items()}}
        for i, (ns, address) in enumerate(hosts.items()):
            port = f"p{i}"
            sh("ip", "link", "add", port, "netns", self.wire, "type", "veth", "peer", "eth0", "netns", ns)
            self.ns(self.wire, "ip", "link", "set", port, "master", "br0", "up")
            self.ns(ns, "ip", "addr", "add", f"{address}/24", "dev", "eth0")
            self.ns(ns, "ip", "link", "set", "eth0", "up")
        self.ns(self.client, "ip", "route", "add", "198.19.2.0/24", "via", DATA_ADDR)
        self.tap_fd = self._tap()
        for name, ns in self.backends.items():
            log_file = open(self.work / f"{name}.server.log", "w")  # noqa: SIM115
            self.servers.append(
                subprocess.Popen(
                    [
                        "ip",
                        "netns",
                        "exec",
                        ns,
                        sys.executable,
                        str(ROOT / "tests" / "support" / "lab_server.py"),
                        name,
                        "80",
                    ],
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                )
            )
        return self

    def _tap(self) -> int:
        """A tap device made inside the wire namespace (a thread there opens /dev/net/tun); qemu gets its fd."""
        box: dict = {}

        def make() -> None:
            enter_netns(self.wire)
            fd = os.open("/dev/net/tun", os.O_RDWR)
            ifr = struct.pack("16sH", b"tap0", 0x0002 | 0x1000)  # IFF_TAP | IFF_NO_PI
            fcntl.ioctl(fd, 0x400454CA, ifr)  # TUNSETIFF
            box["fd"] = fd

        thread = threading.Thread(target=make)
        thread.start()
        thread.join()
        self.ns(self.wire, "ip", "link", "set", "tap0", "master", "br0", "up")
        os.set_inheritable(box["fd"], True)
        return box["fd"]

    def get(self, vip: str, count: int) -> list[str]:
        """``count`` requests from the client, a new connection each: the backends' names in order."""
        code = (
            "import http.client, json, sys\n"
            "names = []\n"
            f"for _ in range({count}):\n"
            f"    c = http.client.HTTPConnection({vip!r}, 80, timeout=5)\n"
            "    c.request('GET', '/')\n"
            "    names.append(json.loads(c.getresponse().read())['backend'])\n"
            "    c.close()\n"
            "print(' '.join(names))\n"
        )
        return self.ns(self.client, sys.executable, "-c", code).stdout.split()

    def keepalive(self, vip: str, requests_: int, hold: float) -> subprocess.Popen:
        """One connection from the client that makes requests, then holds the connection open ``hold`` s."""
        code = (
            "import http.client, json, time\n"
            f"c = http.client.HTTPConnection({vip!r}, 80, timeout=5)\n"
            "names = set()\n"
            f"for _ in range({requests_}):\n"
            "    c.request('GET', '/bytes/20000')\n"
            "    c.getresponse().read()\n"
            "print('done', flush=True)\n"
            f"time.sleep({hold})\n"
            "c.request('GET', '/')\n"
            "print(json.loads(c.getresponse().read())['backend'], flush=True)\n"
        )
        return subprocess.Popen(
            ["ip", "netns", "exec", self.client, sys.executable, "-c", code], stdout=subprocess.PIPE, text=True
        )

    def destroy(self) -> None:
        for server in self.servers:
            server.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                server.wait(5)
        if self.tap_fd >= 0:
            os.close(self.tap_fd)
        for ns in (self.client, *self.backends.values(), self.wire):
            sh("ip", "netns", "del", ns, check=False)


def kvm_usable() -> bool:
    """KVM when /dev/kvm is usable and is not PVM's: a PVM host (module kvm_pvm, nested virtualisation) runs only
    guest kernels built for PVM, and Debian's is not one (its machine prints nothing, not even GRUB, seen here).
    LBWEB_IMAGE_ACCEL=kvm or tcg decides instead."""
    choice = os.environ.get("LBWEB_IMAGE_ACCEL", "auto")
    if choice != "auto":
        return choice == "kvm"
    return os.access("/dev/kvm", os.R_OK | os.W_OK) and not Path("/sys/module/kvm_pvm").exists()


class Machine:
    """One qemu-system-x86_64: KVM when this machine allows it, the serial console in a file."""

    def __init__(
        self,
        name: str,
        work: Path,
        drives: list[str],
        *,
        uefi: bool = False,
        port: int | None = None,
        tap_fd: int = -1,
        kernel: tuple[Path, Path, str] | None = None,
        console_input: bool = False,
    ):
        self.name, self.work = name, work
        self.serial = work / f"{name}.serial.log"
        self.qga = GuestAgent(work / f"{name}.qga.sock")
        self.port = port
        self.kvm = kvm_usable()
        command = [
            "qemu-system-x86_64", "-name", name, "-machine", "q35", "-m", "1536", "-smp", "2",
            "-accel", "kvm" if self.kvm else "tcg,thread=multi",
            "-cpu", "host,-arch-capabilities" if self.kvm else "max",
            "-display", "none", "-monitor", "none", "-no-reboot",
            "-device", "virtio-serial",
            "-chardev", f"socket,path={self.qga.path},server=on,wait=off,id=qga",
            "-device", "virtserialport,chardev=qga,name=org.qemu.guest_agent.0",
            "-object", "rng-random,filename=/dev/urandom,id=rng", "-device", "virtio-rng-pci,rng=rng",
        ]  # fmt: skip
        # The serial console: its output in a file; with console_input, also a socket to type into.
        self.console_socket = work / f"{name}.console.sock"
        if console_input:
            command += [
                "-chardev", f"socket,id=ser0,path={self.console_socket},server=on,wait=off,logfile={self.serial}",
                "-serial", "chardev:ser0",
            ]  # fmt: skip
        else:
            command += ["-serial", f"file:{self.serial}"]
        if uefi:
            variables = work / f"{name}.vars.fd"
            shutil.copy(OVMF / "OVMF_VARS_4M.fd", variables)
            command += [
                "-drive", f"if=pflash,format=raw,unit=0,readonly=on,file={OVMF / 'OVMF_CODE_4M.fd'}",
                "-drive", f"if=pflash,format=raw,unit=1,file={variables}",
            ]  # fmt: skip
        for drive in drives:
            command += ["-drive", drive]
        if kernel:
            command += ["-kernel", str(kernel[0]), "-initrd", str(kernel[1]), "-append", kernel[2]]
        if port:
            command += [
                "-netdev", f"user,id=mgmt,restrict=on,net={MGMT_NET},host={MGMT_HOST},"
                           f"hostfwd=tcp:127.0.0.1:{port}-{MGMT_ADDR}:443",
                "-device", f"virtio-net-pci,netdev=mgmt,mac={MGMT_MAC}",
            ]  # fmt: skip
        else:
            command += ["-nic", "none"]
        pass_fds: tuple[int, ...] = ()
        if tap_fd >= 0:
            command += ["-netdev", f"tap,id=data,fd={tap_fd}", "-device", f"virtio-net-pci,netdev=data,mac={DATA_MAC}"]
            pass_fds = (tap_fd,)
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            command,
            pass_fds=pass_fds,
            stdout=open(work / f"{name}.qemu.log", "w"),  # noqa: SIM115 (qemu writes it while it runs)
            stderr=subprocess.STDOUT,
        )

    def answer(self, prompt: str, text: str, timeout: float) -> None:
        """Wait for ``prompt`` on the serial console (after the last answer), then type ``text`` and Enter."""
        deadline = time.monotonic() + timeout
        while prompt not in self.console()[getattr(self, "_answered", 0) :]:
            assert time.monotonic() < deadline, f"no {prompt!r} on the console:\n{self.console()[-2000:]}"
            time.sleep(1)
        self._answered = self.console().index(prompt, getattr(self, "_answered", 0)) + len(prompt)
        with socket.socket(socket.AF_UNIX) as sock:
            sock.connect(str(self.console_socket))
            sock.sendall(text.encode() + b"\r")
            time.sleep(0.5)

    def console(self) -> str:
        return self.serial.read_text(errors="replace") if self.serial.exists() else ""

    def wait_exit(self, timeout: float) -> int:
        return self.proc.wait(timeout)

    def stop(self) -> None:
        self.qga.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Api:
    """The appliance's HTTPS API through the forwarded port, trusting exactly the certificate it presents."""

    def __init__(self, port: int, work: Path):
        self.base = f"https://127.0.0.1:{port}"
        self.port = port
        self.cafile = work / "appliance.crt"
        self.token = ""

    def served_certificate(self) -> str:
        return ssl.get_server_certificate(("127.0.0.1", self.port), timeout=5)

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.cafile.write_text(self.served_certificate())
                if requests.get(f"{self.base}/accounts/login/", verify=False, timeout=5).status_code == 200:  # noqa: S501
                    return
            except (OSError, requests.RequestException):
                pass
            if time.monotonic() > deadline:
                raise TimeoutError("the appliance's UI did not answer")
            time.sleep(1)

    def session(self) -> requests.Session:
        """A logged-in UI session: the login form with its CSRF token, as a browser posts it."""
        with contextlib.suppress(Exception):
            self.cafile.write_text(self.served_certificate())
        s = requests.Session()
        # verify=False on each call (a Session's own is overridden by REQUESTS_CA_BUNDLE): the certificate names the
        # appliance's address, not 127.0.0.1; wait_ready and the upgrade check compare its bytes instead.
        page = s.get(f"{self.base}/accounts/login/", timeout=10, verify=False)
        csrf = s.cookies.get("csrftoken")
        answer = s.post(
            f"{self.base}/accounts/login/",
            data={"username": "admin", "password": PASSWORD, "csrfmiddlewaretoken": csrf},
            headers={"Referer": f"{self.base}/accounts/login/"},
            timeout=300,  # the password's hash (PBKDF2, 10^6 rounds) takes minutes in an emulated machine
            verify=False,
        )
        assert page.status_code == 200 and answer.status_code == 200, answer.text[:500]
        assert "/accounts/login/" not in answer.url, "the UI login was refused"
        return s

    def login(self) -> str:
        answer = requests.post(f"{self.base}/api/v1/auth/login/", auth=("admin", PASSWORD), verify=False, timeout=300)
        assert answer.status_code == 200, answer.text
        self.token = answer.json()["token"]
        return self.token

    def call(self, method: str, path: str, **kwargs) -> requests.Response:
        return requests.request(
            method, f"{self.base}{path}", headers={"Authorization": f"Token {self.token}"}, verify=False,
            timeout=120, **kwargs,
        )  # fmt: skip

    def create_farm(self, name: str, vip: str, **extra) -> int:
        body = {"name": name, "vip": vip, "protocol": "tcp", "ports": "80", "mode": "snat", "scheduler": "rr", **extra}
        answer = self.call("POST", "/api/v1/farms/", json=body)
        assert answer.status_code == 201, answer.text
        farm = answer.json()["id"]
        for address in BACKENDS.values():
            added = self.call("POST", "/api/v1/backends/", json={"farm": farm, "address": address})
            assert added.status_code == 201, added.text
        return farm

    def wait_applied(self, farm: int, timeout: float = 300) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            state = self.call("GET", f"/api/v1/farms/{farm}/").json()
            if (state.get("apply_status") or {}).get("status") == "applied":
                return state
            if time.monotonic() > deadline:
                raise AssertionError(f"farm {farm} not applied: {state}")
            time.sleep(0.5)


def write_seed(directory: Path, data_address: bool = True) -> None:
    directory.mkdir()
    lines = [
        "#lbweb-config",
        f"admin_password: {PASSWORD}",
        f"address: {MGMT_ADDR}/24",
        f"gateway: {MGMT_HOST}",
        f"interface: {MGMT_MAC}",
    ]
    if data_address:
        lines += [f"data_interface: {DATA_MAC}", f"data_address: {DATA_ADDR}/24"]
    (directory / "user-data").write_text("\n".join(lines) + "\n")
    (directory / "meta-data").write_text("local-hostname: lbweb-test\n")


def seed_drive(directory: Path) -> str:
    """The seed as a read-only FAT disk that qemu makes from a directory (vvfat), labelled cidata."""
    return f"if=virtio,format=raw,readonly=on,file.driver=vvfat,file.dir={directory},file.label=cidata"


def transfer_drive(work: Path, deb: Path) -> str:
    """A raw disk that is a tar archive of the new package: the machine reads it with tar -xf /dev/vdX."""
    archive = work / "transfer.tar"
    subprocess.run(["tar", "-C", str(deb.parent), "-cf", str(archive), deb.name], check=True)
    return f"if=virtio,format=raw,readonly=on,file={archive}"


def decode_caps(mask: str) -> set[str]:
    value = int(mask, 16)
    return {f"CAP_{CAPS[bit]}" if bit < len(CAPS) else f"cap{bit}" for bit in range(64) if value >> bit & 1}


def check_units(qga: GuestAgent, report: dict) -> None:
    """Every lbweb unit active; each program's main process runs as the contract says, with those capabilities."""
    _, units = qga.run("systemctl list-units --all --plain --no-legend 'lbweb*' | awk '{print $1, $3, $4}'")
    states = {line.split()[0]: line.split()[1:] for line in units.splitlines() if line.strip()}
    report["units"] = {unit: " ".join(state) for unit, state in states.items()}
    inactive = {unit: state for unit, state in states.items() if state[0] != "active"}
    assert not inactive, f"units not active: {inactive}"
    _, failed = qga.run("systemctl list-units --failed --plain --no-legend")
    assert not failed.strip(), f"failed units: {failed}"
    programs = {}
    for name, program in contract().items():
        unit = f"lbweb-{name}.service"
        assert unit in states, f"{unit} is not installed"
        _, pid = qga.run(f"systemctl show -p MainPID --value {unit}")
        _, status = qga.run(f"grep -E '^(Uid|CapEff|CapPrm|CapAmb|CapBnd|NoNewPrivs):' /proc/{pid.strip()}/status")
        fields = dict(line.split(":\t", 1) for line in status.splitlines())
        _, user = qga.run(f"getent passwd {fields['Uid'].split()[0]} | cut -d: -f1")
        effective, bounding = decode_caps(fields["CapEff"]), decode_caps(fields["CapBnd"])
        programs[name] = {"user": user.strip(), "effective": sorted(effective), "bounding": sorted(bounding)}
        assert user.strip() == program.user, (name, user, program.user)
        assert effective == set(program.capabilities) and bounding == set(program.capabilities), (name, fields)
        assert fields["NoNewPrivs"].strip() == "1", (name, fields)
    report["programs"] = programs


def check_restarts(qga: GuestAgent, api: Api, report: dict) -> None:
    """kill -9 of each program's main process: systemd starts it again (Restart=on-failure)."""
    restarts = {}
    for name in contract():
        unit = f"lbweb-{name}.service"
        _, before = qga.run(f"systemctl show -p MainPID --value {unit}")
        started = time.monotonic()
        qga.run(f"kill -9 {before.strip()}")
        deadline = started + 180
        while True:
            _, state = qga.run(f"systemctl show -p MainPID,ActiveState --value {unit}", check=False)
            pid, active = (state.split() + ["", ""])[:2]
            if pid not in ("0", before.strip()) and active == "active":
                break
            assert time.monotonic() < deadline, f"{unit} not restarted: {state}"
            time.sleep(0.2)
        restarts[name] = round(time.monotonic() - started, 1)
    report["restart_seconds"] = restarts
    api.wait_ready(300)
    assert api.call("GET", "/api/v1/farms/").status_code == 200


def scenario(args: argparse.Namespace, work: Path, report: dict) -> None:
    image_dir = Path(args.image_dir)
    qcow2 = (image_dir / "lbweb.qcow2").resolve()
    version = (image_dir / "VERSION").read_text().strip()
    report["image"] = {"version": version, "qcow2_bytes": qcow2.stat().st_size,
                       "raw_bytes_used": (image_dir / "lbweb.raw").resolve().stat().st_blocks * 512}  # fmt: skip
    seed = work / "seed"
    write_seed(seed)
    lab = Lab(work).build()
    port = free_port()
    disk = work / "appliance.qcow2"
    sh("qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", str(qcow2), str(disk))
    drives = [f"if=virtio,file={disk}", seed_drive(seed)]
    if args.upgrade_deb:
        drives.append(transfer_drive(work, Path(args.upgrade_deb)))
    machine = Machine("appliance", work, drives, uefi=True, port=port, tap_fd=lab.tap_fd)
    api = Api(port, work)
    try:
        # 1. Boot (UEFI: OVMF, GRUB from the disk), first boot from the seed, the UI.
        api.wait_ready(600 if machine.kvm else 1800)
        report["boot_to_ui_seconds"] = round(time.monotonic() - machine.started, 1)
        report["kvm"] = machine.kvm
        log(f"UI answers {report['boot_to_ui_seconds']} s after qemu started")
        console = machine.console()
        assert f"lbweb is at https://{MGMT_ADDR}/" in console, console[-3000:]
        machine.qga.wait(120)
        qga = machine.qga
        _, firmware = qga.run("test -d /sys/firmware/efi && echo uefi || echo bios")
        report["appliance_firmware"] = firmware.strip()
        assert firmware.strip() == "uefi"
        try:  # the UI's form as v1 answers it (recorded); after the upgrade, v2's must log in
            api.session()
            report["ui_login_v1"] = "ok"
        except AssertionError as exc:
            report["ui_login_v1"] = str(exc)[:300]
        api.login()
        cert_before = api.served_certificate()
        assert "BEGIN CERTIFICATE" in cert_before

        # 2. A farm through the API; real traffic balanced by it across both backends.
        web = api.create_farm("web", VIP_WEB)
        api.wait_applied(web)
        names = lab.get(VIP_WEB, 20)
        report["traffic_v1"] = {name: names.count(name) for name in BACKENDS}
        assert sorted(set(names)) == sorted(BACKENDS) and abs(names.count("b1") - names.count("b2")) <= 2, names
        log(f"traffic through farm web: {report['traffic_v1']}")

        # 3. Upgrade to the new package: migrations run, farms, certificate, accounts and tokens stay.
        if args.upgrade_deb:
            _, plan_before = qga.run(manage("showmigrations --plan"))
            _, installed = qga.run("dpkg-query -W -f '${Version}' lbweb")
            started = time.monotonic()
            qga.run(
                "mkdir -p /tmp/upgrade && tar -C /tmp/upgrade -xf /dev/vdc && DEBIAN_FRONTEND=noninteractive "
                "apt-get install -y --no-install-recommends /tmp/upgrade/*.deb",
                timeout=1500,
            )
            _, upgraded = qga.run("dpkg-query -W -f '${Version}' lbweb")
            api.wait_ready(300)
            report["upgrade"] = {"from": installed, "to": upgraded, "seconds": round(time.monotonic() - started, 1)}
            assert upgraded != installed and upgraded == dpkg_version(Path(args.upgrade_deb)), (installed, upgraded)
            _, plan_after = qga.run(manage("showmigrations --plan"))
            assert "[ ]" not in plan_after, plan_after
            new = sorted(set(plan_after.split("\n")) - set(plan_before.split("\n")))
            report["upgrade"]["migrations_applied"] = [line.strip() for line in new]
            assert api.served_certificate() == cert_before, "the upgrade changed the TLS certificate"
            farms = api.call("GET", "/api/v1/farms/")  # the token made before the upgrade still works
            assert farms.status_code == 200, farms.text
            assert [f["name"] for f in farms.json()["results"]] == ["web"], farms.text
            api.wait_applied(web)
            api.session()
            names = lab.get(VIP_WEB, 10)
            assert sorted(set(names)) == sorted(BACKENDS), names
            log(f"upgraded {installed} -> {upgraded}: {report['upgrade']}")

        # 4. Flow offload in the image's kernel: the connection moves to the flowtable. The client downloads 1 MB
        # (50 x 20,000 bytes) on one connection: the farm's counter counts the connection, while the counters of
        # the forward path (each backend's traffic out) see only its first packets: the rest went by the flowtable.
        _, kernel = qga.run("uname -r")
        report["kernel"] = kernel.strip()
        fast = api.create_farm("fast", VIP_FAST, flow_offload=True)
        api.wait_applied(fast)
        holder = lab.keepalive(VIP_FAST, 50, hold=4)
        assert holder.stdout and holder.stdout.readline().strip() == "done"
        _, flows = qga.run(f"conntrack -L -d {VIP_FAST} 2>/dev/null")
        _, flowtable = qga.run("nft list flowtables")
        counters = {"farm-fast": nft_counter(qga, "farm-fast"), "traffic-out-fast": backends_out(qga, "fast")}
        assert holder.stdout.readline().strip() in BACKENDS
        holder.wait(10)
        report["flow_offload"] = {"conntrack": flows.strip(), "flowtable": flowtable.strip(), "counters": counters,
                                  "client_bytes": 50 * 20000}  # fmt: skip
        assert "[OFFLOAD]" in flows, flows
        assert counters["farm-fast"]["packets"] >= 1, counters
        assert counters["traffic-out-fast"] is not None, counters
        assert counters["traffic-out-fast"]["bytes"] < 100_000, counters
        log("flow offload: connection offloaded to the flowtable")

        # 5. Every unit active, each program as its user with its capabilities; each killed one comes back.
        check_units(qga, report)
        check_restarts(qga, api, report)
        names = lab.get(VIP_WEB, 10)
        assert sorted(set(names)) == sorted(BACKENDS), names
        report["traffic_after_restarts"] = {name: names.count(name) for name in BACKENDS}
        _, ssh = qga.run("systemctl is-enabled ssh.service ssh.socket 2>&1; ss -ltnH", check=False)
        report["listening"] = ssh
        assert ":22 " not in ssh, ssh
    except BaseException:
        with contextlib.suppress(Exception):  # what the appliance logged, for the report
            machine.qga.wait(30)
            _, journal = machine.qga.run("journalctl -u 'lbweb*' --no-pager -n 150 -p warning", timeout=60)
            report["journal"] = journal[-12000:]
        raise
    finally:
        machine.stop()
        lab.destroy()

    # 6. The installer: the image writes itself to an empty disk, which then boots with BIOS (SeaBIOS).
    if args.installer:
        install_check(image_dir, work, report)


def nft_counter(qga: GuestAgent, name: str) -> dict | None:
    """A named counter of lbweb's table in the machine: {"packets", "bytes"}, None when there is none."""
    code, text = qga.run(f"nft -j list counter inet lbweb {name}", check=False)
    if code:
        return None
    found = next(item["counter"] for item in json.loads(text)["nftables"] if "counter" in item)
    return {"packets": found["packets"], "bytes": found["bytes"]}


def backends_out(qga: GuestAgent, farm: str) -> dict | None:
    """A farm's bytes from its backends to clients, as the collector adds them up: the sum of its backends'
    ``traffic-be-<farm>-<id>-out`` counters (None when it has none)."""
    code, text = qga.run("nft -j list counters table inet lbweb", check=False)
    pattern = re.compile(rf"traffic-be-{re.escape(farm)}-[0-9a-z]+-out")
    found = [item["counter"] for item in json.loads(text)["nftables"] if "counter" in item] if not code else []
    found = [c for c in found if pattern.fullmatch(c["name"])]
    if not found:
        return None
    return {"packets": sum(c["packets"] for c in found), "bytes": sum(c["bytes"] for c in found)}


def manage(command: str) -> str:
    return f"cd /opt/lbweb && runuser -u lbweb -- env LBWEB_VAR_DIR=/var/lib/lbweb .venv/bin/python manage.py {command}"


def dpkg_version(deb: Path) -> str:
    return sh("dpkg-deb", "-f", str(deb), "Version").stdout.strip()


def install_check(image_dir: Path, work: Path, report: dict) -> None:
    target = work / "target.qcow2"
    sh("qemu-img", "create", "-q", "-f", "qcow2", str(target), "4G")
    cmdline = (image_dir / "lbweb.cmdline").read_text().strip() + " lbweb.install=/dev/vdb"
    installer = Machine(
        "installer", work,
        [f"if=virtio,file={(image_dir / 'lbweb.qcow2').resolve()},snapshot=on", f"if=virtio,file={target}"],
        kernel=((image_dir / "lbweb.vmlinuz").resolve(), (image_dir / "lbweb.initrd").resolve(), cmdline),
    )  # fmt: skip
    try:
        code = installer.wait_exit(900)
    finally:
        installer.stop()
    console = installer.console()
    report["install_seconds"] = round(time.monotonic() - installer.started, 1)
    assert code == 0 and "lbweb install: installed on /dev/vdb" in console, console[-3000:]
    log(f"installed in {report['install_seconds']} s; booting the installed disk with BIOS, no seed")
    port = free_port()
    machine = Machine("installed", work, [f"if=virtio,file={target}"], port=port, console_input=True)
    api = Api(port, work)
    try:
        # No seed: the first boot asks on the console, and the answers typed there are the ones used.
        wait = 600 if machine.kvm else 1800
        machine.answer("Password for the web account 'admin': ", PASSWORD, wait)
        machine.answer("The same again: ", PASSWORD, 60)
        machine.answer("(e.g. 192.0.2.10/24; empty: DHCP): ", f"{MGMT_ADDR}/24", 60)
        machine.answer("Gateway (empty: none): ", MGMT_HOST, 60)
        api.wait_ready(wait)
        report["installed_boot_to_ui_seconds"] = round(time.monotonic() - machine.started, 1)
        machine.qga.wait(120)
        _, firmware = machine.qga.run("test -d /sys/firmware/efi && echo uefi || echo bios")
        _, root = machine.qga.run("findmnt -no SOURCE /")
        report["installed_boot"] = {"firmware": firmware.strip(), "root": root.strip()}
        assert firmware.strip() == "bios" and root.strip().startswith("/dev/vda"), report["installed_boot"]
        api.login()
        assert api.call("GET", "/api/v1/farms/").json()["count"] == 0
    finally:
        machine.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--image-dir", required=True)
    parser.add_argument("--upgrade-deb", help="lbweb's newer package: installed in the running machine")
    parser.add_argument("--no-installer", dest="installer", action="store_false")
    parser.add_argument("--report", required=True)
    parser.add_argument("--keep", action="store_true", help="keep the work directory (consoles, logs)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root: the test builds network namespaces and a tap device")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stopped test still removes its machines and lab
    work = Path(tempfile.mkdtemp(prefix="lbweb-image-test-", dir="/var/tmp"))
    report: dict = {"work": str(work)}
    ok = False
    try:
        scenario(args, work, report)
        ok = True
    except BaseException as exc:
        report["error"] = f"{type(exc).__name__}: {exc}"
        for console in sorted(work.glob("*.serial.log")):
            report.setdefault("consoles", {})[console.name] = console.read_text(errors="replace")[-4000:]
        raise
    finally:
        report["ok"] = ok
        Path(args.report).write_text(json.dumps(report, indent=2) + "\n")
        if ok and not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        log(f"report: {args.report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
