"""Real processes for tests and benchmarks: a Redis on a unix socket and the Celery worker in a namespace."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = ROOT / ".venv" / "bin"


def wait_until(predicate, timeout: float = 20, what: str = "condition", interval: float = 0.1):
    """Poll ``predicate`` until it returns something true, and return that; TimeoutError after ``timeout`` s.

    The one polling helper of the tests and benchmarks (``tests.conftest.wait_for`` is this)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


class RedisServer:
    """A private redis-server on a unix socket (reachable from every namespace through the filesystem)."""

    def __init__(self, directory: Path, run_as: list[str] | None = None):
        self.directory = Path(directory)
        self.socket = self.directory / "redis.sock"
        self.run_as = run_as or []
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    @property
    def broker_url(self) -> str:
        return f"redis+socket://{self.socket}"

    def start(self) -> RedisServer:
        self.directory.mkdir(parents=True, exist_ok=True)
        server = shutil.which("redis-server") or "/usr/bin/redis-server"
        self.proc = subprocess.Popen(
            [*self.run_as, server, "--port", "0", "--unixsocket", str(self.socket), "--unixsocketperm", "700"]
            + ["--save", "", "--appendonly", "no", "--dir", str(self.directory)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while not self._answers():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("redis-server did not start")
            time.sleep(0.02)
        return self

    def _answers(self) -> bool:
        """True once the server accepts a connection: its socket file appears at bind(), before listen()
        (a busy machine showed a client refused in between)."""
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(str(self.socket))
            return True
        except OSError:
            return False
        finally:
            probe.close()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)


def database_url(settings_dict: dict) -> str:
    """The URL the worker needs to open the same database as this process."""
    engine = settings_dict["ENGINE"]
    if engine.endswith("sqlite3"):
        return f"sqlite:///{settings_dict['NAME']}"
    user = settings_dict.get("USER") or ""
    password = settings_dict.get("PASSWORD") or ""
    auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    host = settings_dict.get("HOST") or "localhost"
    port = f":{settings_dict['PORT']}" if settings_dict.get("PORT") else ""
    return f"postgres://{auth}{host}{port}/{settings_dict['NAME']}"


class NetnsProcess:
    """A long-running lbweb process inside a network namespace, its output in a log file."""

    ready_marker = b""

    def __init__(self, netns: str, env: dict[str, str], log_path: Path, run_as: list[str] | None = None):
        self.netns = netns
        self.env = env
        self.log_path = Path(log_path)
        self.run_as = run_as or []  # e.g. tests.support.privileges.setpriv(...): the user and capabilities it runs with
        self.proc: subprocess.Popen | None = None

    def command(self) -> list[str]:
        raise NotImplementedError

    def start(self, timeout: float = 30):
        """Start it and wait until its log shows ``ready_marker``."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child process
        cmd = ["ip", "netns", "exec", self.netns, *self.run_as, *self.command()]
        self.proc = subprocess.Popen(
            cmd, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        deadline = time.monotonic() + timeout
        while self.ready_marker not in self.log_path.read_bytes()[offset:]:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = self.log_path.read_bytes()[offset:][-3000:].decode(errors="replace")
                self.kill()
                raise RuntimeError(f"{type(self).__name__} did not become ready:\n{tail}")
            time.sleep(0.05)
        return self

    def kill(self) -> None:
        """SIGKILL the whole process group: it dies mid-work, as in a crash."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()


class Worker(NetnsProcess):
    """``celery -A lbweb worker -Q dataplane -c 1`` inside the LB namespace."""

    ready_marker = b" ready."

    def command(self) -> list[str]:
        cmd = [str(VENV_BIN / "celery"), "-A", "lbweb", "worker"]
        return cmd + ["-Q", "dataplane", "-c", "1", "--loglevel", "INFO", "--without-mingle", "--without-gossip"]

    def drain(self, timeout: float = 30) -> None:
        """Return once every task queued before this call has run.

        The worker takes its queue in order, one task at a time, so when a harmless task sent now has
        succeeded, so has everything ahead of it: say the apply that the last of several writes queued while
        an earlier apply was already covering it. A test that changes the database behind the worker's back
        drains first, or that leftover apply may take the change before the task under test sees it."""
        from lbweb.celery import app

        task_id = app.send_task("farms.tasks.keep_version", args=[0], retry=False).id  # run 0: keeps nothing
        done = f"[{task_id}] succeeded".encode()
        wait_until(lambda: done in self.log_path.read_bytes(), timeout, what="the worker's queue to drain")


class Healthd(NetnsProcess):
    """``manage.py healthd`` inside the LB namespace, where it reaches the backends."""

    ready_marker = b"healthd: checking"

    def command(self) -> list[str]:
        return [str(VENV_BIN / "python"), "manage.py", "healthd", "--reload-seconds", "0.2"]


class Prober(NetnsProcess):
    """``python -m healthd.prober``: runs healthd's command checks (start it as lbweb-probe)."""

    ready_marker = b"lbweb-prober: listening"

    def __init__(self, netns: str, env: dict[str, str], log_path: Path, socket: Path, run_as: list[str]):
        super().__init__(netns, env, log_path, run_as)
        self.socket = Path(socket)

    def command(self) -> list[str]:
        return [str(VENV_BIN / "python"), "-m", "healthd.prober", "--socket", str(self.socket)]


class Collector:
    """``manage.py collector`` inside the LB namespace, as deploy/run.sh runs it next to the worker."""

    def __init__(self, netns: str, env: dict[str, str], log_path: Path, interval: float):
        self.netns = netns
        self.env = dict(env, LBWEB_METRICS_INTERVAL=str(interval))
        self.log_path = Path(log_path)
        self.proc: subprocess.Popen | None = None

    def start(self) -> Collector:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child process
        cmd = ["ip", "netns", "exec", self.netns, str(VENV_BIN / "python"), "manage.py", "collector"]
        self.proc = subprocess.Popen(
            cmd, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        return self

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
