"""keepalived's and conntrackd's own verdict on the files lbweb writes for them, asked the same way by the web
(a cluster change is refused before it is saved, ``cluster.services.cluster_update``) and by the worker (a file
is replaced only once it passed, ``dataplane.cluster.applier.deploy``).

Both engines are run as parsers only, never as daemons, so the web process may ask them too (it starts no
daemon and touches no kernel state):

- keepalived: ``keepalived -t -f FILE`` (its configuration test). It also fails on an interface this node does
  not have, as the real keepalived would refuse it.
- conntrackd has no test mode. ``conntrackd -C FILE -s`` reads and parses the whole file with the daemon's own
  parser (``init_config``) and only then sends a statistics request to the UNIX socket the file names: a running
  conntrackd answers it (a read), none there gives "can't connect". Either way the parse is done, and a syntax
  error exits before the request. conntrackd only *warns* about a value it cannot use ("198.18.3.2 is not a
  valid IPv6 address", "sync0 is an invalid interface") and would then run without it, so every warning and
  error except the request's own "can't connect" is a refusal here.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import tempfile
from pathlib import Path

from django.conf import settings

from compiler.cluster import grammar

KEEPALIVED = "/usr/sbin/keepalived"
CONNTRACKD = "/usr/sbin/conntrackd"
TIMEOUT = 20  # seconds; either parser answers in milliseconds
CONNTRACKD_PROBLEM = re.compile(r"\[(?:warning|ERROR)\]\s*(.*)|^(?:WARNING|ERROR): (.*)")
NO_DAEMON = "can't connect"


class CheckFailed(Exception):
    """An engine refused a file lbweb wrote (``engine`` is ``lbweb`` when the generator itself refused a value)."""

    def __init__(self, engine: str, name: str, detail: str):
        self.engine, self.name, self.detail = engine, name, detail
        super().__init__(f"{engine} refused {name}: {detail}")


def check_keepalived(path: Path) -> None:
    """``keepalived -t -f``: raises CheckFailed on a file keepalived would refuse.

    As keepalived's user (lbweb, the web's and the worker's): keepalived 2.2.7 run as root with a ``vrrp_script``
    in its file ends its own test run with SIGTERM, so root (the test suite) checks a copy lbweb can read, as
    lbweb. keepalived -t also exits 0 on a file it cannot read ("Config files missing"): that is a refusal here.
    """
    if os.geteuid() != 0:
        return _keepalived_test([KEEPALIVED, "-t", "-f", str(path)], path, str(path))
    with tempfile.NamedTemporaryFile("w", prefix="lbweb-keepalived-", suffix=".conf") as copy:
        copy.write(path.read_text())
        copy.flush()
        os.chmod(copy.name, 0o644)
        privdrop = str(Path(settings.BASE_DIR) / "deploy" / "privdrop")
        _keepalived_test([privdrop, "lbweb", "", KEEPALIVED, "-t", "-f", copy.name], path, copy.name)


def _run(engine: str, argv: list[str], name: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT)
    except FileNotFoundError as exc:  # the worker could not check (nor run) it either
        raise CheckFailed(engine, name, f"{argv[0]} is not installed on this node") from exc
    except subprocess.TimeoutExpired as exc:
        raise CheckFailed(engine, name, f"no answer in {TIMEOUT} s") from exc


def _keepalived_test(argv: list[str], path: Path, checked: str) -> None:
    result = _run("keepalived -t", argv, path.name)
    output = (result.stdout + result.stderr).replace(f"{checked}: ", "")
    lines = list(dict.fromkeys(line.strip() for line in output.splitlines() if line.strip()))  # it says most twice
    if result.returncode or any("missing" in line.lower() for line in lines):
        raise CheckFailed("keepalived -t", path.name, "; ".join(lines)[-800:] or f"exit status {result.returncode}")


def check_conntrackd(path: Path) -> None:
    """conntrackd's parser on the file (module docstring): raises CheckFailed on any error or warning."""
    result = _run("conntrackd", [CONNTRACKD, "-C", str(path), "-s"], path.name)
    problems, no_daemon = [], False
    for line in (result.stderr + result.stdout).splitlines():
        found = CONNTRACKD_PROBLEM.search(line)
        if found is None:
            continue
        message = (found.group(1) or found.group(2) or "").strip()
        if message.startswith(NO_DAEMON):
            no_daemon = True
        else:
            problems.append(message)
    if problems:
        raise CheckFailed("conntrackd", path.name, "; ".join(problems)[-800:])
    if result.returncode and not no_daemon:
        output = (result.stderr + result.stdout).strip()
        raise CheckFailed("conntrackd", path.name, output[-800:] or f"exit status {result.returncode}")


def check_texts(keepalived_conf: str, conntrackd_conf: str) -> list[CheckFailed]:
    """Both files, written into a scratch directory and checked there: what each engine refuses (none: [])."""
    failures = []
    with tempfile.TemporaryDirectory(prefix="lbweb-cluster-check-") as scratch:
        for name, text, check in (
            ("keepalived.conf", keepalived_conf, check_keepalived),
            ("conntrackd.conf", conntrackd_conf, check_conntrackd),
        ):
            path = Path(scratch) / name
            path.write_text(text)
            try:
                check(path)
            except CheckFailed as exc:
                failures.append(exc)
    return failures


def missing_interfaces(cluster) -> dict[str, str]:
    """The cluster's interfaces this node does not have, by field (keepalived and conntrackd would refuse them,
    and the handler could not add a floating address there)."""
    named = {
        "interface": [cluster.interface],
        "sync_interface": [cluster.sync_interface],
        "track_interfaces": cluster.track_interfaces.split(),
        "extra_addresses": [interface for _address, interface in cluster.floating_extra()],
    }
    errors = {}
    for field, names in named.items():
        missing = [name for name in dict.fromkeys(names) if not grammar.interface_problem(name) and not _exists(name)]
        if missing:
            errors[field] = f"Not an interface of this node ({settings.LBWEB_NODE_NAME}): {', '.join(missing)}."
    return errors


def _exists(name: str) -> bool:
    try:
        socket.if_nametoindex(name)
    except OSError:
        return False
    return True
