"""The appliance image's test (``deploy/image/test.sh``: two packages, the image, then qemu) beside the suite.

It is mostly one emulated machine booting, so tests/conftest.py starts it when the session begins and puts the
tests that read its report last; ``tests/deploy/test_image.py``'s ``report`` fixture then waits for it (``run``).
Alone (``pytest tests/deploy/test_image.py``, or LBWEB_IMAGE_BESIDE=0) the fixture starts it itself, when due.

Either way the command runs under a small supervisor, ``python -m tests.support.image_side``, the leader of a
process group of its own: its output goes to ``stdout.log`` and ``stderr.log`` in test-output/image/ (the report
to ``report.json``, the result to ``result.json``). Its lab's namespaces carry a tag named here
(LBWEB_IMAGE_NS_TAG, read by tests/support/image_vm.py). When pytest stops it (Ctrl-C, the end of the session)
or pytest itself goes (a kill, a timeout: the kernel tells the supervisor, PR_SET_PDEATHSIG), the supervisor
sends SIGTERM to every process of the run by PID (qemu included: image_vm.py then stops its machines and removes
its lab), SIGKILL after STOP_GRACE seconds to those left, and removes the namespaces that remain.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DIRECTORY = ROOT / "test-output" / "image"
STOP_GRACE = 60  # s: image_vm stops two machines (20 s each at most) and removes its lab
LAB_NAMESPACES = ("w", "c", "b1", "b2")  # tests/support/image_vm.py's Lab: TAG-w, TAG-c, TAG-b1, TAG-b2
PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36


class SideRun:
    """One run of the image test's command under the supervisor, its files in ``directory``."""

    def __init__(self, command: list[str], directory: Path = DIRECTORY):
        self.command = list(command)
        self.directory = Path(directory)
        self.report = self.directory / "report.json"
        self.result = self.directory / "result.json"
        self.proc: subprocess.Popen | None = None
        self.started = 0.0

    def start(self) -> SideRun:
        shutil.rmtree(self.directory, ignore_errors=True)
        self.directory.mkdir(parents=True)
        supervisor = [sys.executable, "-m", "tests.support.image_side", "--dir", str(self.directory)]
        supervisor += ["--parent", str(os.getpid()), "--", *self.command, "--report", str(self.report)]
        self.started = time.monotonic()
        self.proc = subprocess.Popen(supervisor, cwd=ROOT, start_new_session=True, stdin=subprocess.DEVNULL)
        return self

    def wait(self, timeout: float) -> subprocess.CompletedProcess:
        """The command's exit code and output, as ``subprocess.run(..., capture_output=True)`` gives them. Not
        done ``timeout`` s after it started: stopped, and its output says so (the test shows it, and the consoles)."""
        assert self.proc
        late = ""
        try:
            self.proc.wait(max(1.0, timeout - (time.monotonic() - self.started)))
        except subprocess.TimeoutExpired:
            late = f"\ntests/support/image_side.py: not done {timeout:g} s after it started: stopped"
            self.stop()
        returncode = json.loads(self.result.read_text())["returncode"] if self.result.exists() else -1
        stdout, stderr = (self.text(name) for name in ("stdout.log", "stderr.log"))
        if self.proc.returncode:
            stderr += f"\n(tests/support/image_side.py supervisor exited {self.proc.returncode})"
        return subprocess.CompletedProcess(self.command, returncode, stdout, stderr + late)

    def text(self, name: str) -> str:
        path = self.directory / name
        return path.read_text(errors="replace") if path.exists() else ""

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        """End the run now: the supervisor ends each of its processes and removes its namespaces."""
        if not self.running():
            return
        assert self.proc
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(STOP_GRACE + 30)
        except subprocess.TimeoutExpired:  # the supervisor itself hangs: its group, by the group's id (its PID)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


CURRENT: SideRun | None = None  # the run started beside this session (tests/conftest.py), if any
PLANNED: list[str] = []  # its command, once the session's tests are known


def plan(config, items: list) -> None:
    """When the session collected the tests that read the image's report and others (not marked image): these
    run last (the module fixture ``report`` stays one), and the command that ``start_planned`` starts. The same
    conditions as the fixture's (LBWEB_IMAGE_TEST, root, the commit to upgrade from) or nothing starts."""
    readers = [item for item in items if item.get_closest_marker("image") and "report" in item.fixturenames]
    beside = [item for item in items if not item.get_closest_marker("image")]
    if not readers or not beside or config.option.collectonly:
        return
    module = readers[0].module
    if os.environ.get("LBWEB_IMAGE_BESIDE", "1") == "0" or not module.IN_THE_MACHINE or os.geteuid() != 0:
        return
    if not upgrade_commit_present():
        return
    items[:] = [item for item in items if item not in readers] + readers
    PLANNED[:] = next(command for command in module.readme_commands() if command[0] == "deploy/image/test.sh")


def start_planned() -> None:
    global CURRENT
    if PLANNED and CURRENT is None:
        CURRENT = SideRun(PLANNED).start()


def upgrade_commit_present() -> bool:
    """The commit deploy/image/test.sh upgrades from is in this clone (as the fixture checks)."""
    v1 = re.search(r"LBWEB_UPGRADE_FROM:-([0-9a-f]{40})", ROOT.joinpath("deploy/image/test.sh").read_text()).group(1)
    v1 = os.environ.get("LBWEB_UPGRADE_FROM", v1)
    return not subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{v1}^{{commit}}"]).returncode


def summary() -> str:
    """One line for the end of the session: where the run beside it wrote, how long it took."""
    if CURRENT is None:
        return ""
    done = json.loads(CURRENT.result.read_text()) if CURRENT.result.exists() else {}
    return (
        f"appliance image test beside the suite: {CURRENT.directory.relative_to(ROOT)}/ (report, stdout.log, "
        f"stderr.log), exit {done.get('returncode')}, {done.get('seconds')} s"
    )


def run(command: list[str], report: Path, timeout: float) -> subprocess.CompletedProcess:
    """``command --report report``: the run started beside the session when there is one (its report copied to
    ``report``), else one started now; either way waited for, for at most ``timeout`` s from its start."""
    side = CURRENT if CURRENT is not None and CURRENT.command == list(command) else None
    if side is None:
        side = SideRun(command).start()
    try:
        result = side.wait(timeout)
    finally:
        side.stop()
    if side.report.exists():
        shutil.copy(side.report, report)
    result.args = [*command, "--report", str(report)]
    return result


def stop_beside() -> None:
    if CURRENT is not None:
        CURRENT.stop()


# --- the supervisor (python -m tests.support.image_side) ---


def prctl(option: int, value: int) -> None:
    if ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0):
        raise OSError(ctypes.get_errno(), f"prctl({option})")


def processes() -> dict[int, tuple[int, str]]:
    """Every process: pid -> (parent pid, state)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                found[int(entry.name)] = (int(fields[1]), fields[0])
    return found


def descendants() -> set[int]:
    """The run's live processes: the supervisor's descendants (a subreaper: orphans of the run come back to it)."""
    table, found = processes(), {os.getpid()}
    while more := {pid for pid, (ppid, state) in table.items() if ppid in found and pid not in found and state != "Z"}:
        found |= more
    return found - {os.getpid()}


def reap(proc: subprocess.Popen) -> None:
    """Collect the exit of the command (Popen keeps its code) and of orphans that came back here."""
    proc.poll()
    for pid, (ppid, state) in processes().items():
        if ppid == os.getpid() and state == "Z" and pid != proc.pid:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)


def end(proc: subprocess.Popen, tag: str) -> None:
    """SIGTERM to each process of the run, SIGKILL to those left after STOP_GRACE s; then the lab's namespaces."""
    for signum, grace in ((signal.SIGTERM, STOP_GRACE), (signal.SIGKILL, 10)):
        for pid in descendants():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)
        deadline = time.monotonic() + grace
        while descendants() and time.monotonic() < deadline:
            time.sleep(0.5)
            reap(proc)
        if not descendants():
            break
    for name in LAB_NAMESPACES:
        if Path(f"/run/netns/{tag}-{name}").exists():
            subprocess.run(["ip", "netns", "del", f"{tag}-{name}"], check=False)


def supervise(directory: Path, parent: int, command: list[str]) -> int:
    stopping: list[str] = []
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda signum, _: stopping.append(signal.Signals(signum).name))
    prctl(PR_SET_PDEATHSIG, signal.SIGTERM)  # pytest's thread that started this ends: SIGTERM here
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    if os.getppid() != parent:  # it ended before the line above
        stopping.append("pytest ended")
    tag = f"lbi{os.getpid()}s"
    started = time.monotonic()
    with open(directory / "stdout.log", "w") as out, open(directory / "stderr.log", "w") as err:
        proc = subprocess.Popen(
            command, cwd=ROOT, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
            env=dict(os.environ, LBWEB_IMAGE_NS_TAG=tag),
        )  # fmt: skip
    (directory / "pids.json").write_text(json.dumps({"supervisor": os.getpid(), "command": proc.pid, "tag": tag}))
    while proc.poll() is None and not stopping:
        if os.getppid() != parent:
            stopping.append("pytest ended")
        time.sleep(0.5)
    end(proc, tag)  # after a stop, the whole run; after its end, whatever it left behind (nothing, normally)
    proc.wait()
    if stopping:
        with open(directory / "stderr.log", "a") as err:
            print(f"\ntests/support/image_side.py: stopped ({stopping[0]}): every process of the run ended", file=err)
    result = {"returncode": proc.returncode, "seconds": round(time.monotonic() - started, 1), "stopped": stopping[:1]}
    (directory / "result.json.part").write_text(json.dumps(result) + "\n")
    (directory / "result.json.part").rename(directory / "result.json")
    return 1 if stopping else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", required=True, type=Path)
    parser.add_argument("--parent", required=True, type=int, help="pytest's pid: the run ends when it does")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    return supervise(args.dir, args.parent, command)


if __name__ == "__main__":
    sys.exit(main())
