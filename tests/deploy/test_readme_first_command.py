"""The README's first command, run as a new user runs it, brings the appliance up with least privilege.

A clean clone of what is committed (sharing the suite's virtualenv and front-end packages, which
``deploy/test.sh`` just made with the same set-up script) in a private temporary directory that the
user ``lbweb`` cannot reach, inside a network namespace made here, with nothing in the environment but
PATH, HOME and LBWEB_ADMIN_PASSWORD. The tests below share that one running appliance, in file order:
the ``sh`` blocks of the README and of docs/ that need a running appliance work as written, it answers and
applies a farm, every process holds only its privilege, a process killed with SIGKILL is restarted alone
while the API keeps answering, the certificate commands replace its certificate, and SIGINT stops every
process.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
import urllib3

from tests.support.lab import run_in_netns
from tests.support.stack import ROOT

pytestmark = pytest.mark.dataplane

ADMIN_PASSWORD = "readme-admin-pass-1"
START_TIMEOUT = 180  # a cold start on a busy 2-core machine: set-up checks, migrations, six processes

# What each program is, told by its command line, and the only privilege it may hold (CapEff, hex).
NET_ADMIN = 1 << 12
NET_RAW = 1 << 13
PROGRAMS = {
    "redis": (re.compile(r"^redis-server "), 0),
    "web": (re.compile(r"-m gunicorn .*lbweb\.wsgi"), 0),
    "redirect": (re.compile(r"-m gunicorn .*lbweb\.redirect"), 0),
    "worker": (re.compile(r"-m celery -A lbweb worker"), NET_ADMIN),
    "beat": (re.compile(r"-m celery -A lbweb beat"), 0),
    "healthd": (re.compile(r"manage\.py healthd"), NET_RAW),
    "collector": (re.compile(r"manage\.py collector"), NET_ADMIN),
    "prober": (re.compile(r"-m healthd\.prober"), 0),
    "haproxy": (re.compile(r"^/usr/sbin/haproxy -W "), 1 << 10),  # CAP_NET_BIND_SERVICE
    # HA pair (dataplane/cluster/run.py): waiting for a cluster's files, with the capabilities their daemons need
    "keepalived": (re.compile(r"-m dataplane\.cluster\.run keepalived"), NET_ADMIN | NET_RAW | 1 << 6),  # CAP_SETGID
    "conntrackd": (re.compile(r"-m dataplane\.cluster\.run conntrackd"), NET_ADMIN | NET_RAW),
    # BGP (dataplane/bgp/run.py): waiting for BIRD's file; BIRD binds port 179 and sets TCP-MD5 keys
    "bird": (re.compile(r"-m dataplane\.bgp\.run"), NET_ADMIN | 1 << 10),  # CAP_NET_BIND_SERVICE
    # Remote syslog (dataplane/syslog/run.py): waiting for a syslog server's rsyslog.conf; CAP_SYSLOG reads /dev/kmsg
    "rsyslog": (re.compile(r"-m dataplane\.syslog\.run"), 1 << 34),
}
USERS = {"prober": "lbweb-probe", "haproxy": "lbweb-haproxy"}  # every other program runs as lbweb


def readme_block(heading: str, page: str = "README.md") -> str:
    """The first ``sh`` block under a heading of the README (or of another page, docs/...), as a reader copies
    it. tests/repo/test_readme_commands.py counts a block named here with its page as one run word for word."""
    text = (ROOT / page).read_text()
    block = re.search(r"^" + re.escape(heading) + r"\n.*?```sh\n(.*?)```", text, re.S | re.M)
    assert block, f"{page} has no sh block under {heading!r}"
    return block.group(1)


def readme_setup_commands() -> list[str]:
    """The commands of the README's "Set-up: two commands" block."""
    lines = readme_block("## Set-up: two commands").splitlines()
    return [line.split("#")[0].strip() for line in lines if line.split("#")[0].strip()]


@dataclass
class Proc:
    pid: int
    ppid: int
    uid: int
    cap_eff: int
    cmdline: str
    own_userns: bool  # in a user namespace of its own (the worker's scratch process)

    @classmethod
    def read(cls, pid: int) -> Proc | None:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
            userns = os.readlink(f"/proc/{pid}/ns/user")
        except (FileNotFoundError, ProcessLookupError):
            return None
        fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
        return cls(
            pid=pid,
            ppid=int(fields["PPid"]),
            uid=int(fields["Uid"].split()[1]),
            cap_eff=int(fields["CapEff"], 16),
            cmdline=cmdline,
            own_userns=userns != os.readlink("/proc/self/ns/user"),
        )


class Appliance:
    """``deploy/run.sh`` in a clean clone, in a namespace of its own."""

    def __init__(self, command: str):
        self.command = command
        self.tmp = Path(tempfile.mkdtemp(prefix="lbweb-readme-"))  # 0700: out of lbweb's reach
        self.checkout = self.tmp / "lbweb"
        self.netns = f"lbt-readme-{uuid.uuid4().hex[:6]}"
        self.log = self.tmp / "run.log"
        self.proc: subprocess.Popen | None = None
        self.base = ""

    def start(self) -> Appliance:
        subprocess.run(["git", "clone", "-q", str(ROOT), str(self.checkout)], check=True)
        for shared in (".venv", "node_modules"):
            (self.checkout / shared).symlink_to((ROOT / shared).resolve())
        subprocess.run(["ip", "netns", "add", self.netns], check=True)
        subprocess.run(["ip", "-n", self.netns, "link", "set", "lo", "up"], check=True)
        env = {
            "PATH": os.environ["PATH"],
            "HOME": os.environ.get("HOME", "/root"),
            "LBWEB_ADMIN_PASSWORD": ADMIN_PASSWORD,
        }
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                ["ip", "netns", "exec", self.netns, *shlex.split(self.command)],
                cwd=self.checkout,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.started = time.monotonic()
        self.base = self._wait_for_api()
        self.first_answer_seconds = time.monotonic() - self.started
        return self

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def _wait_for_api(self) -> str:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, (
                f"deploy/run.sh ended (rc={self.proc.returncode}):\n{self.output()[-4000:]}"
            )
            found = re.search(r"lbweb: open (https?)://[^:/]*:(\d+)/", self.output())
            if found:
                base = f"{found.group(1)}://127.0.0.1:{found.group(2)}"
                code = self.curl("-o", "/dev/null", "-w", "%{http_code}", f"{base}/api/v1/")
                if code in ("200", "401", "403"):
                    return base
            time.sleep(1)
        raise AssertionError(f"the API did not answer within {START_TIMEOUT} s:\n{self.output()[-4000:]}")

    def curl(self, *args: str) -> str:
        result = subprocess.run(
            ["ip", "netns", "exec", self.netns, "curl", "-sk", "-m", "5", *args], capture_output=True, text=True
        )
        return result.stdout

    def pids(self) -> list[int]:
        out = subprocess.run(["ip", "netns", "pids", self.netns], capture_output=True, text=True).stdout
        return [int(p) for p in out.split()]

    def processes(self) -> list[Proc]:
        return [p for p in map(Proc.read, self.pids()) if p is not None]

    def programs(self) -> dict[str, Proc]:
        """Each program's own process (the one supervisord started), by program name."""
        procs = self.processes()
        supervisor = next(p for p in procs if "supervisor.supervisord" in p.cmdline)
        found = {}
        for p in procs:
            starting = ("supervisor.supervisord", "deploy/privdrop", "setpriv ")
            if p.ppid != supervisor.pid or not p.cmdline or any(s in p.cmdline for s in starting):
                continue  # not a program, one being started (forked, dropping its privileges), or a zombie
            names = [name for name, (pattern, _cap) in PROGRAMS.items() if pattern.search(p.cmdline)]
            assert len(names) == 1, f"unknown program under supervisord: {p.cmdline}"
            found[names[0]] = p
        return found

    def orphans(self) -> list[Proc]:
        """Processes that belong to no running program (left behind by a program that was killed)."""
        procs = {p.pid: p for p in self.processes()}
        programs = {p.pid for p in self.programs().values()}
        supervisor = {p.pid for p in procs.values() if "supervisor.supervisord" in p.cmdline}
        left = []
        for proc in procs.values():
            ancestor = proc
            while ancestor.pid not in programs | supervisor and ancestor.ppid in procs:
                ancestor = procs[ancestor.ppid]
            if ancestor.pid not in programs | supervisor and proc.pid != self.proc.pid:
                left.append(proc)
        return left

    def stop(self, sig: int = signal.SIGINT, timeout: float = 90) -> float:
        """Signal the command's process group, as Ctrl-C in its terminal does, and wait until the namespace
        holds no process (the programs run in process groups of their own: supervisord stops them)."""
        began = time.monotonic()
        os.killpg(self.proc.pid, sig)
        deadline = began + timeout
        while self.pids() and time.monotonic() < deadline:
            time.sleep(0.2)
        return time.monotonic() - began

    def destroy(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        for pid in self.pids():  # only what runs in the namespace made here: this appliance's processes
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if self.proc:
            self.proc.wait(timeout=30)
        subprocess.run(["ip", "netns", "del", self.netns], check=False)
        (ROOT / "test-output" / "logs").mkdir(parents=True, exist_ok=True)
        shutil.copy(self.log, ROOT / "test-output" / "logs" / "readme-first-command.log")
        shutil.rmtree(self.tmp, ignore_errors=True)


class Client:
    """A browser-like session: logs in through the login page, then uses the API with its cookie.

    Every request runs in a thread inside the appliance's namespace, where it listens."""

    def __init__(self, appliance: Appliance):
        self.appliance = appliance
        self.base = appliance.base.replace("127.0.0.1", "localhost")
        self.session = requests.Session()
        # The appliance's own certificate, which names it "localhost"; given with each request, since requests
        # lets REQUESTS_CA_BUNDLE (set on these machines) override a session's own.
        self.verify = str(appliance.checkout / "var" / "tls" / "lbweb.crt")

    def login(self) -> None:
        run_in_netns(self.appliance.netns, self._login)

    def _login(self) -> None:
        url = f"{self.base}/accounts/login/"
        self.session.get(url, timeout=10, verify=self.verify)
        answer = self.session.post(
            url,
            data={
                "username": "admin",
                "password": ADMIN_PASSWORD,
                "csrfmiddlewaretoken": self.session.cookies["csrftoken"],
            },
            headers={"Referer": url},
            timeout=10,
            verify=self.verify,
        )
        assert answer.status_code == 200 and "/accounts/login/" not in answer.url, answer.text[:500]

    def request(self, method: str, path: str, **kwargs) -> requests.Response:
        headers = {"X-CSRFToken": self.session.cookies.get("csrftoken", ""), "Referer": f"{self.base}/"}
        url = f"{self.base}/api/v1/{path}"
        settings = dict(headers=headers, timeout=30, verify=self.verify, **kwargs)
        return run_in_netns(self.appliance.netns, lambda: self.session.request(method, url, **settings))


@pytest.fixture(scope="module")
def appliance():
    if os.geteuid() != 0:
        pytest.fail("the appliance test builds a network namespace and creates system users: run the suite as root")
    commands = readme_setup_commands()
    assert commands[0] == "deploy/run.sh", f"the README's first command changed: {commands[0]!r}; update this test"
    urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
    appliance = Appliance(commands[0])
    try:
        yield appliance.start()
    finally:
        appliance.destroy()


def in_appliance_shell(appliance, script: str) -> subprocess.CompletedProcess:
    """A bash script run as the README's reader runs it: root, in the checkout, in the appliance's namespace."""
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"), "LBWEB_ADMIN_PASSWORD": ADMIN_PASSWORD}
    return subprocess.run(
        ["ip", "netns", "exec", appliance.netns, "bash", "-euo", "pipefail", "-c", script],
        cwd=appliance.checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def json_documents(text: str) -> list:
    decoder, found, at = json.JSONDecoder(), [], 0
    while (at := text.find("{", at)) != -1:
        document, at = decoder.raw_decode(text, at)
        found.append(document)
    return found


def test_the_readmes_first_farm_commands_work_as_written(appliance):
    """The "Through the API" block of the README's first farm, word for word, on the fresh appliance: a token, a
    farm, a backend, the farm's state."""
    block = readme_block("### Through the API")
    result = in_appliance_shell(appliance, block)
    assert result.returncode == 0, result.stdout + result.stderr
    farm, backend, shown = json_documents(result.stdout)  # curl -s prints each answer without a newline
    assert farm["name"] == "web" and farm["vip"] == "198.18.100.1", farm
    assert backend["farm"] == farm["id"] == 1 and backend["address"] == "198.18.1.11", backend
    assert shown["id"] == 1 and shown["apply_status"]["status"] in ("applied", "pending"), shown
    # The block's alternative for the appliance itself: a token from manage.py, accepted by the API.
    alternative = re.search(r"TOKEN=\$\((\.venv/bin/python manage\.py create_token admin)\)", block)
    assert alternative, "the README no longer shows create_token"
    token = in_appliance_shell(appliance, alternative.group(1))
    assert token.returncode == 0, token.stderr
    answer = appliance.curl(
        "-H",
        f"Authorization: Token {token.stdout.strip()}",
        "-w",
        "\n%{http_code}",
        f"{appliance.base}/api/v1/farms/1/",
    )
    assert answer.endswith("200"), answer


NFTLB_DOCUMENT = {
    "farms": [
        {
            "name": "lb01",
            "family": "ipv4",
            "virtual-addr": "198.18.100.2",
            "virtual-ports": "80",
            "protocol": "tcp",
            "mode": "dnat",
            "scheduler": "weight",
            "state": "up",
            "backends": [{"name": "bck0", "ip-addr": "198.18.1.12", "weight": "5", "state": "up"}],
        }
    ]
}


API_ROOT = "https://localhost:8000/api/v1/"  # where the pages' blocks send their requests


def first_farm_login() -> str:
    """The line of the README's first farm that makes $TOKEN, which the pages' other blocks use."""
    return readme_block("### Through the API").split("# or,")[0]


def test_the_health_check_and_nftlb_commands_work_as_written(appliance):
    """The sh blocks of docs/health-checks.md "A check of its own" and of docs/farms.md "Moving from nftlb or
    SKUDONET", word for word, after the first farm's login line (its $TOKEN; farm 1 is the one it created)."""
    login = first_farm_login()
    (appliance.checkout / "nftlb-farms.json").write_text(json.dumps(NFTLB_DOCUMENT))
    check = in_appliance_shell(appliance, login + readme_block("## A check of its own", "docs/health-checks.md"))
    assert check.returncode == 0, check.stdout + check.stderr
    (made,) = json_documents(check.stdout)
    assert made["farm"] == 1 and made["type"] == "http" and made["http_path"] == "/healthz", made
    moved = in_appliance_shell(appliance, login + readme_block("## Moving from nftlb or SKUDONET", "docs/farms.md"))
    assert moved.returncode == 0, moved.stdout + moved.stderr
    dry_run, imported, exported = json_documents(moved.stdout)
    assert dry_run["dry_run"] is True and dry_run["farms_created"] == ["lb01"] and not dry_run["errors"], dry_run
    assert imported["dry_run"] is False and imported["farms_created"] == ["lb01"], imported
    (farm,) = exported["farms"]
    assert farm["name"] == "lb01" and farm["virtual-addr"] == "198.18.100.2", exported
    assert [b["ip-addr"] for b in farm["backends"]] == ["198.18.1.12"], farm


def test_the_backup_commands_work_as_written(appliance):
    """docs/backup.md's blocks word for word on the README's appliance: a download; the farms deleted; the dry run
    and the restore bring the configuration back, equal to the export before; the schedule writes an archive."""
    login = first_farm_login()
    client = Client(appliance)
    client.login()

    def export() -> dict:
        document = client.request("GET", "config/export/").json()
        document.pop("exported_at")
        return document

    made = client.request(
        "POST",
        "farms/",
        json={"name": "backed-up", "vip": "198.18.71.1", "protocol": "tcp", "ports": "80", "mode": "dnat"},
    )
    assert made.status_code == 201, made.text
    before = export()
    download = readme_block("## Download one", "docs/backup.md")
    result = in_appliance_shell(appliance, login + download)
    assert result.returncode == 0, result.stdout + result.stderr
    archive = appliance.checkout / "appliance.lbbackup"
    assert archive.read_bytes()[:12] == b"LBWEB-BACKUP"
    assert client.request("DELETE", f"farms/{made.json()['id']}/").status_code == 204  # the others keep their ids
    assert "backed-up" not in [farm["name"] for farm in export()["farms"]]

    passphrase_line = download.splitlines()[0]
    restore = in_appliance_shell(
        appliance, login + passphrase_line + "\n" + readme_block("## Restore one", "docs/backup.md")
    )
    assert restore.returncode == 0, restore.stdout + restore.stderr
    dry_run, restored = json_documents(restore.stdout)
    assert dry_run["ok"] and dry_run["dry_run"] and "backed-up" in dry_run["changes"]["farms"]["created"], dry_run
    assert restored["ok"] and not restored["dry_run"], restored
    assert export() == before

    schedule = in_appliance_shell(
        appliance, login + passphrase_line + "\n" + readme_block("## On a schedule", "docs/backup.md")
    )
    assert schedule.returncode == 0, schedule.stdout + schedule.stderr
    assert schedule.stdout.startswith("{"), schedule.stdout + schedule.stderr
    (saved,) = json_documents(schedule.stdout)
    assert saved["enabled"] and saved["passphrase_set"] and "passphrase" not in saved, saved
    backups = appliance.checkout / "var" / "backups"
    deadline = time.monotonic() + 60
    while not (backups.is_dir() and list(backups.glob("lbweb-*.lbbackup"))):
        assert time.monotonic() < deadline, f"no scheduled backup in {backups}:\n{appliance.output()[-3000:]}"
        time.sleep(0.5)
    assert backups.stat().st_mode & 0o777 == 0o700

    console = in_appliance_shell(
        appliance, passphrase_line + "\n" + readme_block("## From the console", "docs/backup.md")
    )
    assert console.returncode == 0, console.stdout + console.stderr
    assert "appliance-console.lbbackup: " in console.stdout and "dry run: it would restore" in console.stdout
    assert export() == before


def test_the_bgp_commands_work_as_written(appliance):
    """docs/bgp.md's blocks, word for word: BGP on, a peer, farm 1's announcement; then BIRD, started by its
    supervised wrapper once the worker wrote its file, answers ``birdc``; then the node is drained. (BIRD keeps
    running for the privilege and restart tests below.)"""
    login = first_farm_login()
    made = in_appliance_shell(appliance, login + readme_block("## Set-up", "docs/bgp.md"))
    assert made.returncode == 0, made.stdout + made.stderr
    settings, peer, announcement = json_documents(made.stdout)
    assert settings["enabled"] is True and settings["router_id"] == "198.18.40.1", settings
    assert peer["password_set"] is True and "password" not in peer, peer
    assert announcement == {"farm": announcement["farm"], "announce": True, "med": 10,
                            "communities": "65000:100 65000:1:2"}  # fmt: skip
    deadline = time.monotonic() + 60
    while not (appliance.checkout / "var" / "bgp" / "bird.ctl").exists():
        assert time.monotonic() < deadline, f"BIRD did not start:\n{appliance.output()[-3000:]}"
        time.sleep(0.2)
    while True:  # BIRD may have started before the peer's deploy reached it
        shown = in_appliance_shell(appliance, readme_block("## What BIRD says", "docs/bgp.md"))
        assert shown.returncode == 0, shown.stdout + shown.stderr
        if "peer" in shown.stdout and "BGP" in shown.stdout:
            break
        assert time.monotonic() < deadline, shown.stdout
        time.sleep(0.5)
    conf = appliance.checkout / "var" / "bgp" / "bird.conf"
    deadline = time.monotonic() + 30
    while "route 198.18.100.1/32 blackhole { bgp_med = 10;" not in conf.read_text():  # the farm's last deploy
        assert time.monotonic() < deadline, conf.read_text()
        time.sleep(0.2)
    assert 'password "s3cret md5";' in conf.read_text()
    drained = in_appliance_shell(appliance, login + readme_block("## Draining, from the API", "docs/bgp.md"))
    assert drained.returncode == 0 and json_documents(drained.stdout)[0]["drained"] is True, drained.stdout


def test_the_readmes_first_command_answers_and_applies_a_farm_in_its_namespace(appliance):
    """Item 1 of the appliance-trust issue: up, log in, a farm through the API, its rule in the kernel."""
    client = Client(appliance)
    client.login()
    answer = client.request(
        "POST",
        "farms/",
        json={"name": "readme", "vip": "198.18.70.1", "protocol": "tcp", "ports": "80", "mode": "dnat"},
    )
    assert answer.status_code == 201, answer.text
    farm = answer.json()

    def in_kernel() -> bool:
        out = subprocess.run(
            ["ip", "netns", "exec", appliance.netns, "nft", "list", "table", "inet", "lbweb"],
            capture_output=True,
            text=True,
        ).stdout
        return "198.18.70.1" in out

    deadline = time.monotonic() + 60
    while not in_kernel():
        assert time.monotonic() < deadline, f"the farm's rule never reached the kernel:\n{appliance.output()[-3000:]}"
        time.sleep(0.5)
    status = client.request("GET", f"farms/{farm['id']}/").json()["apply_status"]["status"]
    assert status == "applied", status
    check = in_appliance_shell(appliance, ".venv/bin/python manage.py kernel --check")  # the README's first farm
    assert check.returncode == 0, check.stdout + check.stderr
    print(f"deploy/run.sh to the first answered API call: {appliance.first_answer_seconds:.1f} s")


def test_every_process_holds_only_its_privilege(appliance):
    """Item 4: users and effective capabilities read from /proc, for every process the command started."""
    import pwd

    programs = appliance.programs()
    expected = set(PROGRAMS)
    assert expected <= set(programs), f"programs running: {sorted(programs)}"
    table = []
    for name, proc in sorted(programs.items()):
        user = USERS.get(name, "lbweb")
        cap = PROGRAMS[name][1]
        table.append(f"{name:10} {pwd.getpwuid(proc.uid).pw_name:12} CapEff {proc.cap_eff:016x}")
        assert proc.uid == pwd.getpwnam(user).pw_uid, f"{name} runs as uid {proc.uid}, not {user}"
        assert proc.cap_eff == cap, f"{name} holds CapEff {proc.cap_eff:#x}, only {cap:#x} is its due"
    print("\n".join(table))
    by_pid = {p.pid: p for p in appliance.processes()}
    program_of = {proc.pid: name for name, proc in programs.items()}
    for proc in by_pid.values():
        if "supervisor.supervisord" in proc.cmdline or proc.pid == appliance.proc.pid:
            continue  # root only to start each program as its user (systemd's part in the appliance)
        ancestor = proc
        while ancestor.pid not in program_of and ancestor.ppid in by_pid:
            ancestor = by_pid[ancestor.ppid]
        assert ancestor.pid in program_of, f"a process outside every program: {proc.cmdline}"
        name = program_of[ancestor.pid]
        assert proc.uid == ancestor.uid, f"{proc.cmdline} (of {name}) runs as uid {proc.uid}"
        if proc.own_userns:
            # The worker's scratch process: root of a user namespace it made itself, which gives nothing on the
            # host; seen from here it is lbweb.
            assert name == "worker" and "dataplane.kernel.scratch" in proc.cmdline, proc.cmdline
            continue
        assert proc.cap_eff & ~PROGRAMS[name][1] == 0, f"{proc.cmdline} (of {name}) holds CapEff {proc.cap_eff:#x}"


def test_state_files_are_lbwebs_alone(appliance):
    """Item 5: the state directory 0700, the database, its WAL and the secret key 0600, owned by lbweb."""
    import pwd

    var = appliance.checkout / "var"
    lbweb = pwd.getpwnam("lbweb").pw_uid
    assert var.stat().st_uid == lbweb and var.stat().st_mode & 0o777 == 0o700
    for name in ("lbweb.sqlite3", "lbweb.sqlite3-wal", "secret_key"):
        st = (var / name).stat()
        assert st.st_uid == lbweb and st.st_mode & 0o077 == 0, f"{name}: uid {st.st_uid} mode {st.st_mode:o}"
    state_files = [path for path in var.rglob("*") if path.is_file()]
    assert len(state_files) > 5
    for path in state_files:  # every file, static files included: nothing of var/ is another user's to read
        other = subprocess.run(
            ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "head", "-c1", str(path)],
            capture_output=True,
        )
        assert other.returncode != 0, f"another local user read {path}"


def test_runtime_paths_are_the_state_directorys_own(appliance):
    """Issue 39, item 11: the clone runs from a private directory, so in a mount namespace where it is seen at
    /run/lbweb-app, as every other clone would be; HAProxy's directory and the prober's socket are named after
    its state directory as the host sees it (lbweb/paths.py), so two clones started at once never share them."""
    import hashlib

    real = (appliance.checkout / "var").resolve()
    assert not str(real).startswith("/run/lbweb-app")
    key = hashlib.sha256(str(real).encode()).hexdigest()[:8]
    programs = appliance.programs()
    assert f" -S /run/lbweb-haproxy-{key}/sock/master.sock," in programs["haproxy"].cmdline
    assert f" --socket /run/lbweb-prober/prober-{key}.sock" in programs["prober"].cmdline


def test_a_killed_process_is_restarted_alone_while_the_api_keeps_answering(appliance):
    """Item 2: SIGKILL each program in turn; it comes back, the others keep their pids, the API answers.

    "Answers" means no refused or reset connection and no error status; a slow answer on a loaded machine
    (a restarted process competes for the CPU) is still an answer, within the client's 30 s."""
    client = Client(appliance)
    client.login()
    report = []
    for name in sorted(appliance.programs()):
        before = appliance.programs()
        victim = before[name]
        os.kill(victim.pid, signal.SIGKILL)
        killed = time.monotonic()
        outage = 0.0
        errors = []
        deadline = killed + 60
        back = None
        while time.monotonic() < deadline:
            began = time.monotonic()
            try:
                answer = client.request("GET", "farms/")
                ok, error = answer.status_code == 200, f"{answer.status_code} {answer.text[:200]}"
            except requests.RequestException as exc:
                ok, error = False, str(exc)
            if not ok:
                errors.append(f"{time.monotonic() - killed:.1f} s: {error}")
                outage = max(outage, time.monotonic() - killed)
                time.sleep(0.1)
            now = {n: p for n, p in appliance.programs().items()}
            if ok and name in now and now[name].pid != victim.pid:
                back = time.monotonic() - killed
                break
            time.sleep(max(0.0, 0.2 - (time.monotonic() - began)))
        assert back is not None, f"{name} was not restarted within 60 s:\n{appliance.output()[-3000:]}"
        if name == "web":
            assert outage < 5, f"the API was down {outage:.1f} s after the web process was killed"
        else:
            events = [line for line in appliance.output().splitlines() if " INFO " in line or "exited" in line]
            assert outage == 0, f"the API failed while {name} was down: {errors}\n" + "\n".join(events[-15:])
        deadline = time.monotonic() + 30
        while orphans := appliance.orphans():  # what the killed process left (its children) ends too
            assert time.monotonic() < deadline, f"{name} left processes behind: {[p.cmdline for p in orphans]}"
            time.sleep(0.2)
        after = appliance.programs()
        for other, proc in before.items():
            if other != name:
                assert after[other].pid == proc.pid, f"{other} was restarted when {name} was killed"
        report.append(f"{name:10} back after {back:.1f} s; API outage {outage:.1f} s")
    print("\n".join(report))


ALICE = """
from django.contrib.auth.models import Group, User
from django_otp.plugins.otp_totp.models import TOTPDevice
alice = User.objects.create_user("alice", password="alice-password-1")
alice.groups.add(Group.objects.get_or_create(name="viewer")[0])
print(TOTPDevice.objects.create(user=alice, name="phone", confirmed=True).bin_key.hex())
"""


def test_the_authentication_commands_work_as_written(appliance):
    """docs/authentication.md "Local accounts as a fallback" and "The API", word for word: the console's way back
    to local logins, and a token login of an account with a second factor (refused without its code). Before the
    certificate test, which replaces the certificate these blocks trust."""
    from tests.support.totp import code

    fallback = in_appliance_shell(appliance, readme_block("### Local accounts as a fallback", "docs/authentication.md"))
    assert fallback.returncode == 0, fallback.stdout + fallback.stderr
    assert "Local accounts may log in again." in fallback.stdout and "local logins: on" in fallback.stdout, fallback
    assert "directories: none" in fallback.stdout, fallback.stdout
    made = in_appliance_shell(appliance, f".venv/bin/python manage.py shell -c {shlex.quote(ALICE)}")
    assert made.returncode == 0, made.stdout + made.stderr
    key = bytes.fromhex(made.stdout.strip().splitlines()[-1])
    block = readme_block("### The API", "docs/authentication.md")
    wrong = "000000" if code(key) != "000000" else "111111"
    for given, answer in ((wrong, "Wrong second-factor code"), (code(key), '"token"')):
        result = in_appliance_shell(appliance, f"PASSWORD=alice-password-1 CODE={given}\n{block}")
        assert result.returncode == 0, result.stdout + result.stderr
        assert answer in result.stdout, (given, result.stdout)
        time.sleep(2)  # django-otp slows the device down for 1 s after the wrong code
    (login,) = json_documents(result.stdout)
    assert login["token"], login


def test_the_certificate_commands_work_as_written(appliance):
    """docs/operations.md "The certificate", word for word: the appliance's certificate, then one of the reader's
    own (my.crt, my-chain.pem, my.key) put in its place. Last but one: the appliance then serves a certificate the
    other tests' clients do not trust."""
    from tests.support import certs

    root, intermediate, leaf = certs.chain()
    for name, text in (("my.crt", leaf.pem), ("my-chain.pem", intermediate.pem), ("my.key", leaf.key_pem)):
        (appliance.checkout / name).write_text(text)
    block = readme_block("### The certificate", "docs/operations.md")
    result = in_appliance_shell(appliance, first_farm_login() + block)
    assert result.returncode == 0, result.stdout + result.stderr
    shown, replaced = json_documents(result.stdout)
    assert shown["self_signed"] and "localhost" in shown["sans"], shown
    assert replaced["serial"] == leaf.serial and replaced["chain"] == ["CN=lbweb test intermediate"], replaced
    # "then use your CA with --cacert": the next connection gets the new certificate, which the reader's CA trusts
    (appliance.checkout / "my-ca.pem").write_text(root.pem)
    served = in_appliance_shell(appliance, "curl -s --cacert my-ca.pem -o /dev/null -w '%{http_code}' " + API_ROOT)
    assert served.stdout in ("200", "401", "403"), f"the new certificate is not served: {served.stdout!r}"


def test_sigint_stops_every_process(appliance):
    """Item 1, last step: SIGINT to the command ends every process it started."""
    took = appliance.stop(signal.SIGINT)
    assert not appliance.pids(), f"still running after SIGINT: {[p.cmdline for p in appliance.processes()]}"
    appliance.proc.wait(timeout=10)
    print(f"every process gone {took:.1f} s after SIGINT")
