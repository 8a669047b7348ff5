"""The supervised wrapper of rsyslog (deploy/supervisord.conf, deploy/systemd/lbweb-rsyslog.service):

    python -m dataplane.syslog.run [--dir LBWEB_VAR_DIR/syslog]

It waits until the worker has written ``rsyslog.conf`` (a syslog server is configured: nothing runs otherwise), then
runs ``rsyslogd -n`` in the foreground on it. rsyslog reads its configuration only at start: when the worker
rewrites the file, rsyslog is restarted; when the worker removes it, rsyslog is stopped and the wrapper waits again.
rsyslog runs with umask 007, so HAProxy's group may write to the access log socket it makes in HAProxy's ``log/``
directory (and no one else). A rsyslog that ends by itself ends the wrapper (status 1): its supervisor restarts it.
A restarted rsyslog reads the kernel's whole buffer again; it sends only the lines from the second the previous one
stopped on (``LBWEB_SYSLOG_SINCE``). No Django: it starts before the database is needed, and restarts rsyslog
within a second of a change.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from compiler.syslog.render import SINCE_ENV

from ..wrapper import POLL, StopSignal, mtime

RSYSLOGD = "/usr/sbin/rsyslogd"


def argv_for(directory: Path) -> list[str]:
    return [RSYSLOGD, "-n", "-f", str(directory / "rsyslog.conf"), "-i", str(directory / "rsyslogd.pid")]


def _start(directory: Path, since: int) -> subprocess.Popen:
    """rsyslog, told from when the kernel's lines are new (compiler/syslog/render.py: the backlog it reads)."""
    env = {**os.environ, SINCE_ENV: str(since)}
    return subprocess.Popen(argv_for(directory), umask=0o007, env=env)


def _stop(child: subprocess.Popen) -> None:
    child.terminate()
    try:
        child.wait(timeout=30)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def run(directory: Path) -> int:
    """Until SIGTERM: rsyslog while its configuration exists. 0 when stopped, 1 when rsyslog ended by itself."""
    conf = directory / "rsyslog.conf"
    stopping = StopSignal()
    child: subprocess.Popen | None = None
    seen = None
    since = int(time.time())  # the kernel's lines from this second on: the first rsyslog sends no old ones
    while not stopping:
        now = mtime(conf)
        if child is not None and child.poll() is not None:
            return 1
        if child is not None and now != seen:
            _stop(child)
            child, since = None, int(time.time())
        if child is None and now is not None:
            seen = now
            child = _start(directory, since)
        time.sleep(POLL)
    if child is not None:
        _stop(child)
    return 0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default="")
    args = parser.parse_args(argv)
    directory = Path(args.dir or Path(os.environ.get("LBWEB_VAR_DIR", "var")) / "syslog")
    sys.exit(run(directory))


if __name__ == "__main__":
    main()
