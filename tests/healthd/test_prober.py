"""lbweb-prober for real: started as lbweb-probe, it runs command checks with nothing of lbweb's.

The prober here is started with lbweb's variables in its own environment (as a careless supervisor
would): the commands must still see none of them.
"""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import socket
import stat
import subprocess
import time
from pathlib import Path

import pytest

from healthd import prober, probes
from tests.conftest import OUTPUT
from tests.support.privileges import ensure_system_user, prober_socket_dir, proc_status, setpriv
from tests.support.stack import ROOT, VENV_BIN

IDENTITY = [str(VENV_BIN / "python"), str(ROOT / "tests" / "support" / "probe_identity.py")]
SECRETS = {
    "LBWEB_ADMIN_PASSWORD": "admin-secret-prober-test",
    "REDIS_URL": "unix:///nowhere/redis.sock",
    "DATABASE_URL": "sqlite:////nowhere/db.sqlite3",
    "SECRET_KEY": "secret-key-prober-test",
}


def _as_root() -> None:
    if os.geteuid() != 0:
        pytest.fail("the prober's tests create users and drop privileges: run the suite as root")


class ProberProcess:
    """The prober under setpriv in this namespace; its log under test-output/logs."""

    def __init__(self, socket_path: Path, env: dict[str, str], log: Path):
        self.socket = socket_path
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            cmd = [*setpriv("lbweb-probe"), str(VENV_BIN / "python"), "-m", "healthd.prober"]
            self.proc = subprocess.Popen(
                [*cmd, "--socket", str(socket_path)], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + 10
        while not socket_path.exists():
            assert self.proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.02)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)


@pytest.fixture
def prober_proc(request):
    _as_root()
    ensure_system_user("lbweb")
    ensure_system_user("lbweb-probe")
    with prober_socket_dir(f"t{os.getpid()}") as directory:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **SECRETS}
        proc = ProberProcess(directory / "prober.sock", env, OUTPUT / "logs" / f"prober-{request.node.name}.log")
        yield proc
        proc.stop()


def ask(proc: ProberProcess, argv: list[str], timeout: float) -> prober.Answer:
    return asyncio.run(prober.ask(argv, timeout, str(proc.socket)))


def test_a_command_runs_as_lbweb_probe_with_an_empty_environment_and_no_capabilities(prober_proc):
    own = Path(f"/proc/{prober_proc.proc.pid}/environ").read_bytes()
    assert b"LBWEB_ADMIN_PASSWORD=admin-secret-prober-test" in own  # the prober itself was given them
    status = proc_status(prober_proc.proc.pid)
    assert status["Uid"].split()[0] == str(pwd.getpwnam("lbweb-probe").pw_uid), status["Uid"]
    assert int(status["CapEff"], 16) == 0 and status["NoNewPrivs"] == "1", status
    answer = ask(prober_proc, IDENTITY, 5)
    assert answer == prober.Answer(exit=0), answer
    # the same script, run by root with the prober's environment, says what it would have seen
    run = subprocess.run(IDENTITY, env=dict(SECRETS), capture_output=True, text=True)
    assert run.returncode == 1 and "runs as root" in run.stderr and "LBWEB_ADMIN_PASSWORD" in run.stderr


def test_no_shell_and_a_bare_name_is_found_only_in_the_fixed_search_path(prober_proc):
    assert ask(prober_proc, ["true"], 2) == prober.Answer(exit=0)
    answer = ask(prober_proc, ["sh", "-c", "echo to stderr >&2; exit 3"], 2)
    assert answer == prober.Answer(exit=3, stderr="to stderr"), answer
    # shell syntax in an argument is just text: ";" is an argument of echo, nothing runs after it
    marker = Path(f"/tmp/lbweb-prober-no-shell-{os.getpid()}")
    assert ask(prober_proc, ["echo", "x;", "touch", str(marker)], 2) == prober.Answer(exit=0)
    assert not marker.exists()
    missing = ask(prober_proc, ["no-such-program-lbweb"], 2)
    assert missing.local and "not found in /usr/local/sbin" in missing.error, missing
    relative = ask(prober_proc, ["./manage.py"], 2)  # cwd is /, whatever the prober's is
    assert relative.local and "no such file" in relative.error, relative


def _running(marker: str) -> list[int]:
    """Processes whose command line has ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def test_a_command_past_its_timeout_is_killed_with_its_whole_process_group(prober_proc):
    marker = f"{31 + os.getpid() % 1000}.4159"  # sleep's argument: unique to this run
    script = f"sleep {marker}1 & sleep {marker}2; wait"

    async def run() -> tuple[prober.Answer, float, list[int]]:
        started = time.monotonic()
        task = asyncio.ensure_future(prober.ask(["sh", "-c", script], 0.8, str(prober_proc.socket)))
        seen: list[int] = []
        while len(seen) < 3 and not task.done():  # sh, its background sleep and its foreground sleep
            await asyncio.sleep(0.02)
            seen = _running(marker)
        answer = await task
        return answer, time.monotonic() - started, seen

    answer, took, seen = asyncio.run(run())
    assert len(seen) == 3, seen
    assert answer.timed_out and answer.exit is None, answer
    assert 0.8 <= took < 0.8 + 0.5, took  # killed at the deadline, answered at once (~10-25 ms measured)
    time.sleep(0.1)
    assert _running(marker) == [], "a child of the command outlived the deadline"
    # a command that exits at once leaves nothing behind either
    quick = ask(prober_proc, ["sh", "-c", f"sleep {marker}3 & exit 0"], 2)
    assert quick == prober.Answer(exit=0)
    time.sleep(0.1)
    assert _running(marker) == []


def test_many_commands_run_at_once(prober_proc):
    async def run() -> tuple[list[prober.Answer], float]:
        started = time.monotonic()
        answers = await asyncio.gather(*(prober.ask(["sleep", "1"], 20, str(prober_proc.socket)) for _ in range(50)))
        return answers, time.monotonic() - started

    answers, took = asyncio.run(run())
    # side by side, not 50 x 1 s one after another (a generous bound: the machine may be loaded)
    assert {a.exit for a in answers} == {0} and took < 10, took


def _connect_as(user: str, path: Path) -> subprocess.CompletedProcess:
    code = (
        "import socket, sys\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "s.connect(sys.argv[1])\n"
        's.sendall(b\'{"argv": ["true"], "timeout": 1}\\n\')\n'
        "print(s.makefile().readline())\n"
    )
    cmd = [*setpriv(user), str(VENV_BIN / "python"), "-c", code, str(path)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=10)


def test_only_lbwebs_group_may_connect(prober_proc):
    path = prober_proc.socket
    info = path.stat()
    assert stat.S_IMODE(info.st_mode) == 0o660 and info.st_gid == pwd.getpwnam("lbweb").pw_gid
    lbweb = _connect_as("lbweb", path)
    assert lbweb.returncode == 0 and json.loads(lbweb.stdout) == {"exit": 0, "timed_out": False, "stderr": ""}
    outsider = _connect_as("nobody", path)
    assert outsider.returncode == 1 and "PermissionError" in outsider.stderr, outsider


def test_bad_requests_are_refused_and_the_prober_serves_on(prober_proc):
    def raw(data: bytes) -> dict:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.connect(str(prober_proc.socket))
            sock.sendall(data)
            return json.loads(sock.makefile("rb").readline())

    too_big = raw(json.dumps({"argv": ["echo", "x" * prober.MAX_REQUEST], "timeout": 1}).encode() + b"\n")
    assert too_big["local"] and "larger than" in too_big["error"], too_big
    for request, words in [
        (b"not json\n", "not JSON"),
        (b'{"argv": "true", "timeout": 1}\n', "argv must be a list"),
        (b'{"argv": ["true"], "timeout": 0}\n', "timeout must be"),
        (b'{"argv": ["true"], "timeout": 601}\n', "timeout must be"),
        (b'{"argv": ["true"], "timeout": 1, "env": {"A": "1"}}\n', "a request is"),
        (b'{"argv": ["tr\\u0000ue"], "timeout": 1}\n', "without NUL"),
    ]:
        answer = raw(request)
        assert answer["local"] and words in answer["error"], (request, answer)
    assert ask(prober_proc, ["true"], 1) == prober.Answer(exit=0)


def test_the_prober_refuses_to_run_as_root(tmp_path):
    _as_root()
    cmd = [str(VENV_BIN / "python"), "-m", "healthd.prober", "--socket", str(tmp_path / "p.sock")]
    run = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert run.returncode != 0 and "refusing to run commands as root" in run.stderr
    assert not (tmp_path / "p.sock").exists()


def test_a_prober_that_is_down_or_silent_is_healthds_own_trouble(tmp_path, monkeypatch):
    from healthd.probes import CheckSpec, Target

    target = Target(1, 1, "198.18.1.11", 80, CheckSpec(type="command", timeout=0.3, command="true {address}"))
    monkeypatch.setenv(prober.SOCKET_ENV, str(tmp_path / "absent.sock"))
    result = asyncio.run(probes.command(target))
    assert not result.ok and result.local and "not running" in result.reason, result
    silent = socket.socket(socket.AF_UNIX)  # accepts connections, never answers
    silent.bind(str(tmp_path / "silent.sock"))
    silent.listen()
    monkeypatch.setenv(prober.SOCKET_ENV, str(tmp_path / "silent.sock"))
    started = time.monotonic()
    result = asyncio.run(probes.command(target))
    assert not result.ok and result.local and "did not answer" in result.reason, result
    assert time.monotonic() - started < 0.3 + prober.ANSWER_GRACE + 0.3
    silent.close()


def test_a_commands_verdict_is_timed_by_the_prober_not_by_healthds_clock(tmp_path, monkeypatch):
    """An answer that reaches healthd late still counts (the prober timed the command); a prober whose own
    timer fired late is its own trouble. A canned answerer stands in for the prober here: the timing is the point."""
    from healthd.icmp import Pinger
    from healthd.probes import CheckSpec, Target
    from healthd.rounds import STALL_GRACE, _timed_probe

    path = tmp_path / "canned.sock"
    monkeypatch.setenv(prober.SOCKET_ENV, str(path))
    target = Target(1, 1, "198.18.1.11", 80, CheckSpec(type="command", timeout=0.2, command="check {address}"))

    async def probe_with(answer: dict, delay: float):
        async def handle(reader, writer):
            await reader.readline()
            await asyncio.sleep(delay)
            writer.write(json.dumps(answer).encode() + b"\n")
            await writer.drain()
            writer.close()

        server = await asyncio.start_unix_server(handle, str(path))
        try:
            return await _timed_probe(target, Pinger())
        finally:
            server.close()

    late = 0.2 + STALL_GRACE + 0.2
    failed = asyncio.run(probe_with({"exit": 3, "timed_out": False, "stderr": "broken"}, late))
    assert (failed.ok, failed.local, failed.reason) == (False, False, "command exited 3 broken"), failed
    killed = asyncio.run(probe_with({"exit": None, "timed_out": True, "stderr": "", "late": 0.01}, late))
    assert not killed.ok and not killed.local and "killed" in killed.reason, killed
    stalled = asyncio.run(probe_with({"exit": None, "timed_out": True, "stderr": "", "late": 0.4}, 0.0))
    assert stalled.local and "prober stalled" in stalled.reason, stalled
