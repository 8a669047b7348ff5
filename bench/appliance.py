"""lbweb itself, as an operator runs it, inside the lab's LB namespace.

A private Redis and SQLite database in the bench's work directory, gunicorn serving the REST API
on 127.0.0.1:8000 *of the LB namespace*, and the real Celery worker (the only process that
changes the kernel) next to it. Farms are created through the REST API, as a user would.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import requests

from tests.support.lab import Lab, run_in_netns
from tests.support.stack import ROOT, VENV_BIN, RedisServer, Worker

API_PORT = 8000
MAKE_TOKEN = """
from django.contrib.auth import get_user_model
from knox.models import AuthToken
user = get_user_model().objects.filter(username="bench").first()
user = user or get_user_model().objects.create_superuser("bench", "", None)
print(AuthToken.objects.create(user=user)[1])
"""


class NetnsApi:
    """The REST API as seen from inside the LB namespace (every socket is opened there)."""

    def __init__(self, netns: str, token: str):
        self.netns = netns
        self.base = f"http://127.0.0.1:{API_PORT}/api/v1/"
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Token {token}"

    def call(self, method: str, path: str, expect: int | None = None, **kwargs) -> requests.Response:
        response = run_in_netns(
            self.netns, lambda: self.session.request(method, self.base + path, timeout=30, **kwargs)
        )
        if expect is not None and response.status_code != expect:
            raise RuntimeError(f"{method} {path}: {response.status_code} {response.text[:500]}")
        return response

    def get(self, path: str) -> dict:
        return self.call("GET", path, 200).json()

    def post(self, path: str, data: dict) -> dict:
        return self.call("POST", path, 201, json=data).json()

    def modes(self) -> set[str]:
        """The farm modes this lbweb accepts, from the API's own description of a farm."""
        meta = self.call("OPTIONS", "farms/", 200).json()
        return {c["value"] for c in meta["actions"]["POST"]["mode"]["choices"]}

    def create_farm(self, backends: list[dict], **fields) -> dict:
        farm = self.post("farms/", fields)
        for backend in backends:
            self.post("backends/", {"farm": farm["id"], **backend})
        return self.wait_applied(farm["id"])

    def wait_applied(self, farm_id: int, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            farm = self.get(f"farms/{farm_id}/")
            status = farm["apply_status"]
            if status["status"] == "applied":
                return farm
            if status["status"] == "failed" or time.monotonic() > deadline:
                raise RuntimeError(f"farm {farm['name']} not applied: {status}")
            time.sleep(0.1)


class Appliance:
    """Redis, database, gunicorn and the worker of one lbweb, for the lab ``lab``."""

    def __init__(self, lab: Lab, workdir: Path):
        self.lab = lab
        self.workdir = Path(workdir)
        self.redis: RedisServer | None = None
        self.web: subprocess.Popen | None = None
        self.worker: Worker | None = None
        self.api: NetnsApi | None = None
        self.last_run_before_start = 0
        var = self.workdir / "var"
        self.env = dict(
            os.environ,
            DJANGO_SETTINGS_MODULE="lbweb.settings",
            LBWEB_VAR_DIR=str(var),
            DATABASE_URL=f"sqlite:///{var / 'lbweb.sqlite3'}",
            SECRET_KEY="lbweb-bench-only",
            LBWEB_APPLY_COALESCE_SECONDS="0.2",
        )

    def start(self) -> Appliance:
        self.redis = RedisServer(self.workdir / "redis").start()
        self.env["REDIS_URL"] = self.redis.url
        manage = [str(VENV_BIN / "python"), "manage.py"]
        subprocess.run([*manage, "migrate", "--noinput", "-v0"], cwd=ROOT, env=self.env, check=True)
        token = subprocess.run(
            [*manage, "shell", "-c", MAKE_TOKEN], cwd=ROOT, env=self.env, check=True, capture_output=True, text=True
        ).stdout.split()[-1]
        log = open(self.workdir / "gunicorn.log", "ab")  # noqa: SIM115 - handed to the child process
        self.web = subprocess.Popen(
            ["ip", "netns", "exec", self.lab.lb, str(VENV_BIN / "gunicorn"), "lbweb.wsgi"]
            + ["--bind", f"127.0.0.1:{API_PORT}", "--workers", "1", "--graceful-timeout", "2"],
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        self.api = NetnsApi(self.lab.lb, token)
        self._wait_web()
        self.start_worker()
        return self

    def _wait_web(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.api.call("GET", "", 200)
                return
            except (requests.ConnectionError, RuntimeError):
                if self.web.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"gunicorn did not start; see {self.workdir / 'gunicorn.log'}") from None
                time.sleep(0.2)

    def start_worker(self) -> None:
        runs = self.api.get("apply-runs/?limit=1")["results"]
        self.last_run_before_start = runs[0]["id"] if runs else 0
        self.worker = Worker(self.lab.lb, self.env, self.workdir / "worker.log").start(timeout=60)

    def wait_reconciled(self, timeout: float = 60) -> None:
        """Wait for the apply run of the worker's start-up reconcile (the latest run is newer than before)."""
        deadline = time.monotonic() + timeout
        while True:
            runs = self.api.get("apply-runs/?limit=1")["results"]
            if runs and runs[0]["id"] > self.last_run_before_start:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the worker made no apply run at start; see {self.workdir / 'worker.log'}")
            time.sleep(0.1)

    def stop_worker(self) -> None:
        if self.worker:
            self.worker.stop()
            self.worker = None

    @property
    def running(self) -> bool:
        return self.worker is not None

    def drop_tables(self) -> None:
        """Remove every table of lbweb from the LB (used only while the worker is stopped)."""
        listing = json.loads(self.lab.ns(self.lab.lb, "nft", "-j", "list", "tables").stdout)["nftables"]
        for item in listing:
            table = item.get("table")
            if table and table["name"].startswith("lbweb"):
                self.lab.ns(self.lab.lb, "nft", "delete", "table", table["family"], table["name"], check=False)

    def stop(self) -> None:
        self.stop_worker()
        if self.web and self.web.poll() is None:
            os.killpg(self.web.pid, 15)
            try:
                self.web.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.web.pid, 9)
        if self.redis:
            self.redis.stop()
