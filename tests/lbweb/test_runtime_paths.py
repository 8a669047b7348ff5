"""Runtime paths under /run are per state directory (issue 39, item 11): two appliances started from two clones at
once never share HAProxy's directory or the prober's socket, and the appliance's own systemd layout is unchanged.

``lbweb/paths.py`` is the one definition; deploy/run.sh runs it as ``python lbweb/paths.py NAME`` (as here), the
settings call it. The whole run.sh from a private clone is ``tests/deploy/test_readme_first_command.py``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.support.units import ROOT, STATE_DIR, TMPFILES, UNIT_DIR, prober_socket, read_unit


def runtime_paths(**env: str) -> tuple[str, str]:
    """(HAProxy's directory, the prober's socket) as deploy/run.sh gets them, in an environment of only ``env``."""
    clean = {"PATH": os.environ["PATH"], **env}
    found = [
        subprocess.run(
            [sys.executable, "lbweb/paths.py", name], cwd=ROOT, env=clean, capture_output=True, text=True, check=True
        ).stdout.strip()
        for name in ("haproxy_dir", "prober_socket")
    ]
    return found[0], found[1]


def test_two_state_directories_get_two_sets_of_runtime_paths(tmp_path):
    one = runtime_paths(LBWEB_VAR_DIR=str(tmp_path / "one" / "var"))
    two = runtime_paths(LBWEB_VAR_DIR=str(tmp_path / "two" / "var"))
    assert one[0] != two[0] and one[1] != two[1]
    assert re.fullmatch(r"/run/lbweb-haproxy-[0-9a-f]{8}", one[0])
    assert re.fullmatch(r"/run/lbweb-prober/prober-[0-9a-f]{8}\.sock", one[1])
    assert runtime_paths(LBWEB_VAR_DIR=str(tmp_path / "one" / "var")) == one  # the same directory, the same paths


def test_clones_seen_at_one_path_in_their_namespaces_keep_their_own():
    """deploy/run.sh runs a clone from a private directory in a mount namespace where it is /run/lbweb-app: every
    clone's state directory is /run/lbweb-app/var there, so the paths come from the one the host sees."""
    seen = "/run/lbweb-app/var"
    one = runtime_paths(LBWEB_VAR_DIR=seen, LBWEB_VAR_DIR_HOST="/root/clone-one/var")
    two = runtime_paths(LBWEB_VAR_DIR=seen, LBWEB_VAR_DIR_HOST="/root/clone-two/var")
    assert one[0] != two[0] and one[1] != two[1]
    assert one == runtime_paths(LBWEB_VAR_DIR="/root/clone-one/var")  # as if run without a namespace


def test_given_paths_are_kept():
    given = runtime_paths(LBWEB_VAR_DIR="/tmp/x", LBWEB_HAPROXY_DIR="/run/mine", LBWEB_PROBER_SOCKET="/run/p.sock")
    assert given == ("/run/mine", "/run/p.sock")


def test_the_appliances_layout_is_unchanged():
    """The appliance's state directory keeps the plain names its units, tmpfiles and the contract use."""
    haproxy, prober = runtime_paths(LBWEB_VAR_DIR=STATE_DIR)
    assert (haproxy, prober) == ("/run/lbweb-haproxy", prober_socket())
    command = read_unit(UNIT_DIR / "lbweb-haproxy.service")["Service"]["ExecStart"][0]
    assert f"-S {haproxy}/sock/master.sock," in command and f"-f {haproxy}/conf" in command
    assert f"d {haproxy}/conf " in TMPFILES.read_text() and f"d {haproxy}/sock " in TMPFILES.read_text()
    assert f"LBWEB_PROBER_SOCKET={prober}" in read_unit(UNIT_DIR / "lbweb-prober.service")["Service"]["Environment"]
