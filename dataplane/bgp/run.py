"""The supervised wrapper of BIRD (deploy/supervisord.conf, deploy/systemd/lbweb-bird.service):

    python -m dataplane.bgp.run [--dir LBWEB_BGP_DIR]

It waits until the worker has written BIRD's configuration (BGP is on: nothing runs otherwise), then runs BIRD in
the foreground with its control socket in the same directory. The worker reloads BIRD itself, through that socket
(``birdc configure``: the sessions stay up). When the worker removes the file (BGP turned off), BIRD is stopped and
the wrapper waits again. BIRD ending by itself ends the wrapper (status 1): its supervisor restarts it.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from ..wrapper import POLL, StopSignal

PR_SET_PDEATHSIG = 1
BIRD = "/usr/sbin/bird"


def argv_for(directory: Path) -> list[str]:
    return [BIRD, "-f", "-c", str(directory / "bird.conf"), "-s", str(directory / "bird.ctl"),
            "-P", str(directory / "bird.pid")]  # fmt: skip


def _die_with_parent() -> None:
    """In BIRD's process before it runs: SIGTERM when the wrapper dies, even by SIGKILL (no BIRD is left behind
    to hold the port and the socket when the supervisor starts a new wrapper)."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def run(directory: Path) -> int:
    """Until SIGTERM: wait for the configuration, run BIRD while it exists. 0 when stopped, 1 when BIRD ended."""
    conf = directory / "bird.conf"
    stopping = StopSignal()
    while not stopping:
        if not conf.exists():
            time.sleep(POLL)
            continue
        child = subprocess.Popen(argv_for(directory), preexec_fn=_die_with_parent)
        while child.poll() is None and not stopping and conf.exists():
            time.sleep(POLL)
        if child.poll() is not None:
            return 1
        child.terminate()  # BIRD ends its sessions with a Cease notification
        child.wait(timeout=30)
    return 0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default=os.environ.get("LBWEB_BGP_DIR", ""))
    args = parser.parse_args(argv)
    directory = Path(args.dir or Path(os.environ.get("LBWEB_VAR_DIR", "var")) / "bgp")
    sys.exit(run(directory))


if __name__ == "__main__":
    main()
