"""tests/support/image_side.py's supervisor, with a stand-in for deploy/image/test.sh: a real process tree (a
child, an orphan in a session of its own, like a daemon) and a real namespace named by the tag, as image_vm.py's
lab. Ended by pytest (stop), by pytest's own death (SIGKILL), or left to finish: nothing of it stays behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.support.image_side import ROOT, SideRun

# The stand-in: prints, makes TAG-w, starts a sleeping child and an orphan in its own session, and waits (or ends).
STAND_IN = textwrap.dedent(
    """\
    set -eu
    report=$2
    echo "out: tag $LBWEB_IMAGE_NS_TAG"
    echo "err: started" >&2
    ip netns add "$LBWEB_IMAGE_NS_TAG-w"
    sleep 300 &
    echo $! > "$(dirname "$report")/child.pid"
    setsid sleep 300 < /dev/null > /dev/null 2>&1 &
    echo $! > "$(dirname "$report")/orphan.pid"
    if [ "${STAND_IN_WAIT:-}" = 1 ]; then wait; fi
    echo '{"ok": true}' > "$report"
    ip netns del "$LBWEB_IMAGE_NS_TAG-w"
    exit 3
    """
)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the stand-in makes a network namespace: root")


@pytest.fixture
def stand_in(tmp_path) -> list[str]:
    script = tmp_path / "stand-in.sh"
    script.write_text(STAND_IN)
    return ["bash", str(script)]


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def left_behind(directory: Path) -> tuple[list[int], bool]:
    """The stand-in's processes still running, and whether its namespace is still there."""
    tag = json.loads((directory / "pids.json").read_text())["tag"]
    pids = [int((directory / f"{name}.pid").read_text()) for name in ("child", "orphan")]
    return [pid for pid in pids if alive(pid)], Path(f"/run/netns/{tag}-w").exists()


def wait_started(directory: Path) -> None:
    deadline = time.monotonic() + 20
    while not (directory / "orphan.pid").exists() or not (directory / "orphan.pid").read_text().strip():
        assert time.monotonic() < deadline, "the stand-in did not start"
        time.sleep(0.1)


def test_a_finished_run_gives_its_code_output_and_report_and_leaves_nothing(stand_in, tmp_path):
    run = SideRun(stand_in, tmp_path / "side").start()
    result = run.wait(60)
    assert result.returncode == 3
    assert "out: tag lbi" in result.stdout and "err: started" in result.stderr
    assert json.loads(run.report.read_text()) == {"ok": True}
    assert left_behind(run.directory) == ([], False)  # the orphan too: the supervisor ended what the run left


def test_stop_ends_every_process_of_the_run_and_removes_its_namespace(stand_in, tmp_path, monkeypatch):
    monkeypatch.setenv("STAND_IN_WAIT", "1")
    run = SideRun(stand_in, tmp_path / "side").start()
    wait_started(run.directory)
    running, namespace = left_behind(run.directory)
    assert len(running) == 2 and namespace
    started = time.monotonic()
    run.stop()
    assert time.monotonic() - started < 30
    assert left_behind(run.directory) == ([], False)
    result = run.wait(10)
    assert result.returncode != 0 and "stopped (SIGTERM)" in result.stderr, result.stderr


def test_a_run_past_its_time_is_stopped_and_says_so(stand_in, tmp_path, monkeypatch):
    monkeypatch.setenv("STAND_IN_WAIT", "1")
    run = SideRun(stand_in, tmp_path / "side").start()
    wait_started(run.directory)
    result = run.wait(timeout=time.monotonic() - run.started + 1)
    assert result.returncode != 0 and "not done" in result.stderr and "out: tag lbi" in result.stdout, result
    assert left_behind(run.directory) == ([], False)


def test_the_run_ends_when_pytest_is_killed(stand_in, tmp_path):
    """pytest killed (SIGKILL, or a timeout's os._exit): no hook runs; the kernel tells the supervisor."""
    directory = tmp_path / "side"
    parent = subprocess.Popen(
        [sys.executable, "-c", f"import time; from tests.support.image_side import SideRun\n"
         f"SideRun({stand_in!r}, {str(directory)!r}).start(); time.sleep(300)"],
        cwd=ROOT, env=dict(os.environ, STAND_IN_WAIT="1"),
    )  # fmt: skip
    try:
        wait_started(directory)
        assert len(left_behind(directory)[0]) == 2
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    deadline = time.monotonic() + 30
    while left_behind(directory) != ([], False):
        assert time.monotonic() < deadline, left_behind(directory)
        time.sleep(0.2)
    deadline = time.monotonic() + 10
    while not (directory / "result.json").exists():
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert json.loads((directory / "result.json").read_text())["stopped"] == ["SIGTERM"]


class Item:
    """What plan() reads of a collected test: its markers, its fixtures, its module."""

    def __init__(self, name: str, image: bool = False, report: bool = False):
        self.name, self.image = name, image
        self.fixturenames = ["report"] if report else []
        self.module = type(
            "Module", (), {"IN_THE_MACHINE": True, "readme_commands": lambda: [["deploy/image/test.sh"]]}
        )

    def get_closest_marker(self, name: str):
        return self.image if name == "image" else None


def planned(items: list[Item], collectonly: bool = False) -> tuple[list[str], list[str]]:
    from tests.support import image_side

    config = type("Config", (), {"option": type("Option", (), {"collectonly": collectonly})})
    image_side.PLANNED[:] = []
    image_side.plan(config, items)
    command, image_side.PLANNED[:] = list(image_side.PLANNED), []
    return [item.name for item in items], command


def test_the_tests_reading_the_report_go_last_when_others_run_beside(monkeypatch):
    from tests.support import image_side

    monkeypatch.delenv("LBWEB_IMAGE_BESIDE", raising=False)
    monkeypatch.setattr(image_side, "upgrade_commit_present", lambda: True)  # a shallow clone too
    session = [
        Item("a"),
        Item("readme", image=True),
        Item("ui", True, True),
        Item("deb", True),
        Item("units", True, True),
    ]
    assert planned(session) == (["a", "readme", "deb", "ui", "units"], ["deploy/image/test.sh"])
    alone = [Item("readme", image=True), Item("ui", True, True), Item("deb", True)]
    assert planned(alone) == (["readme", "ui", "deb"], [])  # the fixture runs it, when it is due
    assert planned([Item("a"), Item("ui", True, True)], collectonly=True) == (["a", "ui"], [])
    monkeypatch.setenv("LBWEB_IMAGE_BESIDE", "0")
    assert planned([Item("a"), Item("ui", True, True)]) == (["a", "ui"], [])
