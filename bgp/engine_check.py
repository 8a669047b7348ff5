"""BIRD's own verdict on the file lbweb writes for it, asked the same way by the web (a BGP change is refused
before it is saved, ``bgp.services``) and by the worker (the file in use is replaced only once it passed,
``dataplane.bgp.applier``).

``bird -p -c FILE`` parses the file with the daemon's own parser and exits: it starts no protocol, opens no socket
and touches no kernel state, so the web process may run it too.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

BIRD = "/usr/sbin/bird"
TIMEOUT = 20  # seconds; BIRD parses in milliseconds


class CheckFailed(Exception):
    """BIRD refused a file lbweb wrote (``engine`` is ``lbweb`` when the generator itself refused a value)."""

    def __init__(self, engine: str, name: str, detail: str):
        self.engine, self.name, self.detail = engine, name, detail
        super().__init__(f"{engine} refused {name}: {detail}")


def check_bird(path: Path) -> None:
    """``bird -p -c FILE``: raises CheckFailed on a file BIRD would refuse."""
    try:
        result = subprocess.run([BIRD, "-p", "-c", str(path)], capture_output=True, text=True, timeout=TIMEOUT)
    except FileNotFoundError as exc:
        raise CheckFailed("bird -p", path.name, f"{BIRD} is not installed on this node (Debian's bird2)") from exc
    except subprocess.TimeoutExpired as exc:
        raise CheckFailed("bird -p", path.name, f"no answer in {TIMEOUT} s") from exc
    output = (result.stdout + result.stderr).replace(f"bird: {path}:", "line ").strip()
    if result.returncode or output:
        raise CheckFailed("bird -p", path.name, output[-800:] or f"exit status {result.returncode}")


def check_text(text: str) -> None:
    """The file's text, checked in a scratch directory (CheckFailed when BIRD refuses it)."""
    with tempfile.TemporaryDirectory(prefix="lbweb-bird-check-") as scratch:
        path = Path(scratch) / "bird.conf"
        path.write_text(text)
        check_bird(path)
