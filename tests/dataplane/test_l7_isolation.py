"""HTTP farms get the L4 core's guarantees (issue 39), with the real HAProxy in the namespace lab driven by the
worker's own apply (``dataplane.l7.applier.apply``, in this process): HAProxy recovers from a reload it refused,
a farm HAProxy refuses is isolated while every other farm applies, and each farm's status is what HAProxy serves.

The worker's whole path (Celery, the API) is ``tests/dataplane/test_l7_worker.py``; these call the apply directly so
that each step is one apply, in order.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import pytest

from dataplane.l7 import applier
from dataplane.l7.engine import Engine
from dataplane.l7.runtime import Processes
from farms import services
from farms.models import ApplyRun, Farm
from l7.models import HttpService
from tests.support.l7_lab import HAProxyLab
from tests.support.lab import backend4

VIP = "198.18.100.1"
HELD_PORT = 8000  # lbweb's own web server holds it on the appliance: the port of the issue
pytestmark = pytest.mark.django_db


@pytest.fixture
def haproxy(lab, tmp_path, monkeypatch, settings):
    settings.LBWEB_MANAGE_SYSCTL = False  # the lab's HAProxy binds VIPs its namespace holds; never the host's sysctl
    engine_lab = HAProxyLab(lab, tmp_path / "haproxy").start()
    monkeypatch.setattr(applier, "_ENGINE", engine_lab.engine)
    yield engine_lab
    engine_lab.stop()


@pytest.fixture
def port_held(haproxy):
    """Another process of the LB's namespace listens on VIP:HELD_PORT (no SO_REUSEPORT: HAProxy cannot share it)."""
    code = (
        "import socket, sys, time\n"
        f"s = socket.socket(); s.bind(({VIP!r}, {HELD_PORT})); s.listen()\n"
        "print('listening', flush=True); time.sleep(3600)\n"
    )
    proc = subprocess.Popen(
        ["ip", "netns", "exec", haproxy.lab.lb, sys.executable, "-c", code], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "listening"
    yield
    proc.kill()
    proc.wait(timeout=5)


def web_farm(name: str = "web", ports: str = "80", *backends: str) -> tuple[Farm, list]:
    farm = services.farm_create(name=name, vip=VIP, ports=ports, mode="http")
    rows = [services.backend_create(farm=farm, address=backend4(b), port=80) for b in backends or ("b1",)]
    return farm, rows


def status(farm: Farm) -> tuple[str, str]:
    row = Farm.objects.get(pk=farm.pk)
    return row.apply_status, row.apply_error


def served_by(haproxy: HAProxyLab, count: int = 8, port: int = 80) -> Counter:
    return Counter(haproxy.get(VIP, "/", port=port).backend for _ in range(count))


def test_the_newest_worker_serves_after_a_refused_reload():
    """``show proc`` after a reload HAProxy refused: no worker at reloads 0, the one at 1 serves."""
    text = (
        "#<PID>          <type>          <reloads>       <uptime>        <version>\n"
        "29429           master          1 [failed: 1]   0d00h00m06s     2.6.12-1+deb12u4\n"
        "# workers\n"
        "29438           worker          1               0d00h00m06s     2.6.12-1+deb12u4\n"
        "# programs\n"
    )
    from dataplane.l7.runtime import _MASTER, _WORKER

    master = _MASTER.search(text)
    workers = tuple((int(pid), int(reloads)) for pid, reloads in _WORKER.findall(text))
    processes = Processes(int(master.group(1)), int(master.group(2)), int(master.group(3)), workers)
    assert processes.failed == 1 and processes.current_worker == 29438
    leaving = Processes(1, 3, 0, ((40, 0), (30, 1), (20, 2)))  # a reload done, two old workers still finishing
    assert leaving.current_worker == 40


def test_haproxy_recovers_from_a_refused_reload(haproxy, port_held):
    """Issue 39, item 1: a farm on a port another process holds passes ``haproxy -c`` and HAProxy refuses to load
    it. Once it is deleted, every change applies: HAProxy is driven again, live and by reload."""
    web, (b1,) = web_farm("web", "80", "b1")
    assert applier.apply().ok
    taken, _ = web_farm("taken", str(HELD_PORT), "b2")
    assert not applier.apply().ok
    assert haproxy.engine.cli.processes().failed == 1  # the master counts the refused reload

    # The farm is deleted and the other one changes: live (a new backend's weight), then by reload (a new port).
    services.farm_delete(farm=taken)
    b2 = services.backend_create(farm=web, address=backend4("b2"), port=80)
    applier.apply()
    services.backend_update(backend=b2, weight=3)
    run = applier.apply()
    assert run.ok and run.kind == "incremental", run.error
    assert status(web) == ("applied", "")
    assert served_by(haproxy) == Counter({"b2": 6, "b1": 2})  # weights 3 and 1, round robin
    before = haproxy.engine.cli.processes().current_worker
    services.farm_update(farm=web, ports="80,81")
    run = applier.apply()
    assert run.ok and run.kind == "full", run.error
    assert status(web) == ("applied", "")
    assert set(served_by(haproxy, port=81)) == {"b1", "b2"}
    processes = haproxy.engine.cli.processes()
    assert processes.current_worker != before and processes.failed == 0


def test_a_farm_haproxy_cannot_load_is_isolated(haproxy, port_held):
    """Issue 39, item 2, for a refusal no validation can foresee: HAProxy's check passes the farm on a port
    another process holds and the reload fails. That farm alone is failed; the other farm's change, in the same
    apply, is served; the files are those HAProxy serves, so that a restart of HAProxy loads."""
    web, (b1,) = web_farm("web", "80", "b1")
    assert applier.apply().ok
    taken, _ = web_farm("taken", str(HELD_PORT), "b2")
    services.backend_create(farm=web, address=backend4("b3"), port=80)
    run = applier.apply()
    assert not run.ok and f"farm {taken.pk}: HAProxy could not load the configuration" in run.error, run.error
    state, error = status(taken)
    assert state == "failed" and "port another process holds" in error, error
    assert status(web) == ("applied", "")
    assert set(served_by(haproxy)) == {"b1", "b3"}
    assert f"{VIP}:{HELD_PORT}" not in (haproxy.conf_dir / "lbweb.cfg").read_text()
    assert applier.apply() is None and status(taken)[0] == "failed"  # isolated: not searched for again


def test_a_farm_haproxy_refuses_is_isolated_and_the_others_apply(haproxy):
    """Issue 39, item 2: one farm with a value HAProxy's PCRE2 refuses and another farm's weight change in one
    apply: the weight change is served, the bad farm failed with HAProxy's words, and what it served before
    still serves."""
    web, (b1, b2) = web_farm("web", "80", "b1", "b2")
    odd, (b3,) = web_farm("odd", "81", "b3")
    assert applier.apply().ok
    assert served_by(haproxy, port=81) == Counter({"b3": 8})

    HttpService.objects.create(farm=odd, name="odd", host_regex="(?a)x")  # Python's re takes it, PCRE2 does not
    services.mark_farms_changed([odd.pk])
    services.backend_update(backend=b1, weight=3)
    run = applier.apply()
    assert not run.ok and f"farm {odd.pk}: " in run.error and f"farm {web.pk}" not in run.error
    state, error = status(odd)
    assert state == "failed" and "regex" in error and "(?a)x" in error, error  # HAProxy's own words
    assert error.startswith("isolated, retried when the farm changes: ")
    assert status(web) == ("applied", "")
    assert served_by(haproxy) == Counter({"b1": 6, "b2": 2})  # the other farm's change is served
    assert served_by(haproxy, port=81) == Counter({"b3": 8})  # the refused farm as it was served before
    assert "(?a)x" not in (haproxy.conf_dir / "lbweb.cfg").read_text()

    # Isolated: later applies leave it as it is served (no search again), until it changes.
    services.backend_update(backend=b2, weight=2)
    assert applier.apply().ok
    assert status(odd)[0] == "failed" and status(web) == ("applied", "")
    HttpService.objects.filter(farm=odd).update(host_regex="^x$")
    services.mark_farms_changed([odd.pk])
    assert applier.apply().ok
    assert status(odd) == ("applied", "")


def test_a_new_worker_process_knows_what_haproxy_serves(haproxy, monkeypatch):
    """The worker restarts (a new Engine: nothing in memory): it takes what HAProxy serves from the record the
    last apply left, so its first apply changes nothing, and an isolated farm keeps what it served before. A
    record HAProxy has reloaded since is not trusted."""
    web, _ = web_farm("web", "80", "b1")
    odd, _ = web_farm("odd", "81", "b3")
    assert applier.apply().ok
    HttpService.objects.create(farm=odd, name="odd", host_regex="(?a)x")
    services.mark_farms_changed([odd.pk])
    assert not applier.apply().ok and status(odd)[0] == "failed"
    worker = haproxy.engine.cli.processes().current_worker

    restarted = Engine(haproxy.conf_dir, haproxy.socket)
    monkeypatch.setattr(applier, "_ENGINE", restarted)
    assert applier.apply() is None  # HAProxy already serves exactly this
    assert haproxy.engine.cli.processes().current_worker == worker
    assert served_by(haproxy, port=81) == Counter({"b3": 8})  # the isolated farm, as it was served
    assert status(web) == ("applied", "") and status(odd)[0] == "failed"

    restarted.cli.reload()  # someone else reloads HAProxy: the record no longer says what the worker serves
    assert Engine(haproxy.conf_dir, haproxy.socket).recall() is None


def test_a_bad_change_reverted_is_applied_at_the_next_apply(haproxy):
    """Issue 39, item 4: after a change HAProxy refused is reverted to what HAProxy already runs, nothing is
    written (HAProxy serves exactly the database), and every farm shows applied, at once and at a reconcile."""
    web, _ = web_farm("web", "80", "b1")
    other, _ = web_farm("other", "81", "b2")
    assert applier.apply().ok
    service = HttpService.objects.create(farm=web, name="odd", host_regex=r"a\N{DIGIT ONE}")
    services.mark_farms_changed([web.pk])
    assert not applier.apply().ok
    assert status(web)[0] == "failed"

    service.delete()
    services.mark_farms_changed([web.pk, other.pk])
    runs = ApplyRun.objects.count()
    assert applier.apply() is None and ApplyRun.objects.count() == runs  # HAProxy already serves it
    assert status(web) == ("applied", "") and status(other) == ("applied", "")
    assert applier.apply(reason="reconcile") is None
    assert status(web) == ("applied", "") and status(other) == ("applied", "")


def test_ports_haproxy_does_not_bind_are_not_shown_applied(haproxy):
    """Issue 39, item 6 (the status part): a farm whose ports exceed what HAProxy binds (an old row: validation
    refuses such a list now) is failed with which ports are not bound; the others serve."""
    wide, _ = web_farm("wide", "80", "b1")
    Farm.objects.filter(pk=wide.pk).update(ports="9001-9100")
    services.mark_farms_changed([wide.pk])
    applier.apply()
    state, error = status(wide)
    assert state == "failed" and "ports 9065-9100 are not bound" in error, error
    assert set(served_by(haproxy, port=9064)) == {"b1"}
    assert (
        "not bound, beyond the ports an HTTP farm binds: ports 9065-9100"
        in (haproxy.conf_dir / "lbweb.cfg").read_text()
    )
    assert applier.apply() is None and status(wide) == (state, error)  # and so it stays, applies or not
