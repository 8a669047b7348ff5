"""Shared fixtures: a real Redis, the namespace lab, the real Celery worker, an authenticated API client."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import pytest
import requests

from tests.support import image_side
from tests.support.lab import Lab
from tests.support.stack import ROOT, Collector, RedisServer, Worker, database_url, wait_until

OUTPUT = ROOT / "test-output"
METRICS_INTERVAL = 0.5  # the collector's sampling interval in tests (2 s in production)


@pytest.fixture(scope="session", autouse=True)
def fast_password_hashing():
    """Accounts are made by the dozen in tests: a cheap hasher instead of 10^6 PBKDF2 rounds each."""
    from django.conf import settings
    from django.contrib.auth.hashers import get_hashers, get_hashers_by_algorithm

    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    get_hashers.cache_clear()
    get_hashers_by_algorithm.cache_clear()


@pytest.fixture(scope="session", autouse=True)
def fast_key_derivation():
    """Backups are sealed by the dozen in tests: scrypt at N = 2^14 instead of 2^17 (the archive's header says
    which; the README's appliance, a process of its own, seals at full strength)."""
    from system.backup import archive

    archive.LOG2_N = 14


@pytest.fixture(autouse=True)
def forget_config_parts():
    """The configuration history and the worker's unit cache remember farms by generation in the process
    (``versions.PARTS``, ``dataplane.tasks.worker_cache``); each test's database starts afresh, so must they
    (a worker's database never goes back). An Applier a test makes itself has a cache of its own."""
    from dataplane.tasks import worker_cache
    from farms import versions

    versions.PARTS.reset()
    worker_cache.cache_clear()


@pytest.fixture(autouse=True)
def forget_what_workers_published(request):
    """A worker's publications (its kernel's capabilities, interfaces and addresses) end with the test that
    started it, whichever fixture started it: validation reads them. Only the tests' own Redis is touched."""
    yield
    if "redis_server" in request.fixturenames:
        forget_capabilities()
    else:
        from farms import capabilities
        from network import appliance

        capabilities.forget()
        appliance.forget()


@pytest.fixture(scope="session", autouse=True)
def cookies_over_plain_http():
    """Django's live server speaks plain HTTP: Secure cookies would never come back from a client.

    Production keeps them Secure (lbweb/settings.py); tests/lbweb/test_https.py checks that through the real
    gunicorn over TLS.
    """
    from django.conf import settings

    settings.SESSION_COOKIE_SECURE = False
    settings.CSRF_COOKIE_SECURE = False


def new_token(user, **kwargs) -> str:
    """A new API token of ``user`` (django-rest-knox: only its digest is stored, so this is the one chance)."""
    from knox.models import AuthToken

    return AuthToken.objects.create(user=user, **kwargs)[1]


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    from django.conf import settings

    from lbweb.celery import app
    from lbweb.redis_client import get_redis

    app.conf.broker_url = server.broker_url
    settings.REDIS_URL = server.url  # the API's own Redis client (sessions, capabilities)
    get_redis.cache_clear()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def lab():
    if os.geteuid() != 0:
        pytest.fail("the data-plane tests build network namespaces: run the suite as root")
    lab = Lab().build()
    yield lab
    lab.destroy()


@pytest.fixture
def worker_env(redis_server, transactional_db):
    from django.db import connection

    return dict(
        os.environ,
        DJANGO_SETTINGS_MODULE="lbweb.settings",
        DATABASE_URL=database_url(connection.settings_dict),
        REDIS_URL=redis_server.url,
        LBWEB_APPLY_COALESCE_SECONDS=os.environ.get("LBWEB_APPLY_COALESCE_SECONDS", "0.2"),
    )


@pytest.fixture
def worker(lab, worker_env, request):
    """The real worker in the LB namespace, starting from an LB without lbweb's table."""
    lab.ns(lab.lb, "nft", "delete", "table", "inet", "lbweb", check=False)
    lab.ensure_servers()
    proc = Worker(lab.lb, worker_env, OUTPUT / "logs" / f"worker-{request.node.name}.log").start()
    yield proc
    proc.stop()
    forget_capabilities()


def forget_capabilities() -> None:
    """What a test's worker published about its kernel (its capabilities, its interfaces and addresses) stays
    with that test (validation reads it)."""
    from farms import capabilities
    from lbweb import redis_keys
    from lbweb.redis_client import get_redis
    from network import appliance

    with contextlib.suppress(Exception):  # no Redis: nothing was published
        get_redis().delete(capabilities.REDIS_KEY, redis_keys.NETWORK_OBSERVED)
    capabilities.forget()
    appliance.forget()


@pytest.fixture
def collector(lab, worker, worker_env, redis_server, settings, request):
    """The real collector next to the worker; the live server's metrics API reads the same Redis."""
    import redis

    redis.Redis.from_url(redis_server.url).flushdb()
    settings.REDIS_URL = redis_server.url
    settings.LBWEB_METRICS_INTERVAL = METRICS_INTERVAL
    log = OUTPUT / "logs" / f"collector-{request.node.name}.log"
    proc = Collector(lab.lb, worker_env, log, METRICS_INTERVAL).start()
    yield proc
    proc.stop()


wait_for = wait_until  # the name the tests use


class Api:
    """requests against the live server's REST API, with token authentication."""

    def __init__(self, base_url: str, token: str):
        self.base = base_url.rstrip("/") + "/api/v1/"
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Token {token}"

    def _call(self, method: str, path: str, expect: int | None, **kwargs) -> requests.Response:
        response = self.session.request(method, self.base + path, timeout=30, **kwargs)
        if expect is not None:
            assert response.status_code == expect, f"{method} {path}: {response.status_code} {response.text}"
        return response

    def get(self, path, expect=200, **kw):
        return self._call("GET", path, expect, **kw).json()

    def post(self, path, data, expect=201):
        return self._call("POST", path, expect, json=data).json()

    def patch(self, path, data, expect=200):
        return self._call("PATCH", path, expect, json=data).json()

    def delete(self, path, expect=204):
        return self._call("DELETE", path, expect)

    def farm(self, backends: list[dict] | None = None, **fields) -> dict:
        farm = self.post("farms/", fields)
        for backend in backends or []:
            self.post("backends/", {"farm": farm["id"], **backend})
        return self.get(f"farms/{farm['id']}/")

    def wait_applied(self, farm_id: int, timeout: float = 30) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            farm = self.get(f"farms/{farm_id}/")
            if farm["apply_status"]["status"] == "applied":
                return farm
            if time.monotonic() > deadline:
                raise AssertionError(f"farm {farm_id} not applied: {farm['apply_status']}")
            time.sleep(0.05)

    def wait_generation(self, generation: int, timeout: float = 30) -> dict:
        """Wait until an apply run has handled ``generation`` (for deletions, which leave no farm to poll)."""
        deadline = time.monotonic() + timeout
        while True:
            runs = self.get("apply-runs/?limit=1")["results"]
            if runs and runs[0]["generation"] >= generation:
                return runs[0]
            if time.monotonic() > deadline:
                raise AssertionError(f"generation {generation} not applied; last run: {runs}")
            time.sleep(0.05)


@pytest.fixture
def admin_user(django_user_model):
    return django_user_model.objects.create_superuser("admin", "", "admin-password")


ROLE_PASSWORD = "role-password-1"


@pytest.fixture
def role_users(django_user_model) -> dict:
    """One account per role (farms/roles.py), made a member of the role's group; password ROLE_PASSWORD."""
    from django.contrib.auth.models import Group

    users = {}
    for role in ("admin", "operator", "viewer"):
        user = django_user_model.objects.create_user(f"{role}-user", "", ROLE_PASSWORD)
        user.groups.add(Group.objects.get_or_create(name=role)[0])
        users[role] = user
    return users


@pytest.fixture
def client(admin_user):
    """DRF's test client, authenticated with a token of the admin account."""
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {new_token(admin_user)}")
    return client


@pytest.fixture
def api(live_server, admin_user) -> Api:
    return Api(live_server.url, new_token(admin_user))


CHROMIUM = "/usr/bin/chromium"  # Debian's build (deploy/test.sh installs it); never `playwright install`
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture
def browser_page():
    """A page of Debian's chromium, driven by Playwright, sized like a laptop screen."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        yield page
        browser.close()


@pytest.fixture
def csp_violations(browser_page) -> list[str]:
    """Every Content-Security-Policy violation of the page (chromium logs each one on the console).

    A browser test that takes this fixture ends with ``assert csp_violations == []``: a page whose
    script or style the policy blocks may look fine in a screenshot and still be broken.
    """
    found: list[str] = []
    browser_page.on(
        "console", lambda message: found.append(message.text) if "Content Security Policy" in message.text else None
    )
    return found


def pytest_sessionstart(session):
    Path(OUTPUT).mkdir(exist_ok=True)


@pytest.hookimpl(trylast=True)  # after -k/-m deselected theirs
def pytest_collection_modifyitems(config, items):
    """The appliance image's test under qemu (~10 min of one emulated machine) runs beside the suite when both are
    in this session: it starts once collection is done, and the tests reading its report come last."""
    image_side.plan(config, items)


def pytest_collection_finish(session):
    image_side.start_planned()


def pytest_sessionfinish(session):
    image_side.stop_beside()  # interrupted, or its tests deselected or never reached: ended with its machines


def pytest_terminal_summary(terminalreporter):
    if line := image_side.summary():
        terminalreporter.write_line(line)
