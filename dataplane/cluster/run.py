"""The supervised wrapper of keepalived and conntrackd (deploy/supervisord.conf, deploy/systemd/):

    python -m dataplane.cluster.run keepalived|conntrackd [--dir LBWEB_CLUSTER_DIR]

It waits until the worker has written the daemon's configuration (a cluster is configured: nothing runs on a
single appliance), then runs the daemon in the foreground. When the worker rewrites the file, keepalived is
reloaded (SIGHUP) and conntrackd restarted; when the worker removes it (the cluster disabled), the daemon is
stopped and the wrapper waits again. When keepalived ends, for whatever reason, the floating addresses are
released here as well (its handler does it too, but not if it was killed with it), so a dead keepalived never
leaves a node holding them. A daemon that ends by itself ends the wrapper (status 1): its supervisor restarts it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from ..wrapper import POLL, StopSignal, mtime


def argv_for(daemon: str, directory: Path) -> list[str]:
    if daemon == "keepalived":
        return [
            "/usr/sbin/keepalived", "--dont-fork", "--log-console", "--vrrp", "-f", str(directory / "keepalived.conf"),
            "-p", str(directory / "keepalived.pid"), "-r", str(directory / "vrrp.pid"),
            "-c", str(directory / "checkers.pid"),
        ]  # fmt: skip
    return ["/usr/sbin/conntrackd", "-C", str(directory / "conntrackd.conf")]


def release(directory: Path) -> None:
    from .transition import Handler

    plan = directory / "plan.json"
    if plan.exists():
        handler = Handler(plan)
        with contextlib.suppress(Exception):
            handler.handle("STOP")


def run(daemon: str, directory: Path) -> int:
    """Until SIGTERM: wait for the configuration, run the daemon while it exists. Returns 0 when stopped, 1 when the
    daemon ended by itself (its supervisor restarts the wrapper, with the daemon)."""
    conf = directory / f"{daemon}.conf"
    stopping = StopSignal()
    while not stopping:
        if mtime(conf) is None:
            time.sleep(POLL)
            continue
        ended = _supervise(daemon, directory, conf, stopping)
        if ended:
            return 1
    return 0


def _start(daemon: str, directory: Path) -> subprocess.Popen:
    if daemon == "conntrackd":
        (directory / "conntrackd.lock").unlink(missing_ok=True)  # left by a conntrackd that was killed
    return subprocess.Popen(argv_for(daemon, directory))


def _supervise(daemon: str, directory: Path, conf: Path, stopping: StopSignal) -> bool:
    """Run the daemon until it ends (True), or until SIGTERM or its configuration is removed (False)."""
    seen = mtime(conf)
    child = _start(daemon, directory)
    ended = False
    try:
        while True:
            if child.poll() is not None:
                ended = True
                break
            now = mtime(conf)
            if stopping or now is None:
                child.terminate()
                child.wait(timeout=30)
                break
            if now != seen:
                seen = now
                if daemon == "keepalived":
                    child.send_signal(signal.SIGHUP)  # keepalived reloads its file
                else:
                    child.terminate()
                    child.wait(timeout=30)
                    child = _start(daemon, directory)
            time.sleep(POLL)
    finally:
        if daemon == "keepalived":
            release(directory)
    return ended


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("daemon", choices=("keepalived", "conntrackd"))
    parser.add_argument("--dir", default=os.environ.get("LBWEB_CLUSTER_DIR", ""))
    args = parser.parse_args(argv)
    directory = Path(args.dir or Path(os.environ.get("LBWEB_VAR_DIR", "var")) / "cluster")
    sys.exit(run(args.daemon, directory))


if __name__ == "__main__":
    main()
