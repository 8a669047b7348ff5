"""Users and capabilities for tests of least privilege: the system users, setpriv, /proc reads.

The appliance runs its processes as ``lbweb`` and command checks as ``lbweb-probe`` (PROCESSES.md);
tests create those users when the machine lacks them, the way the installer does, and start
processes under them with util-linux's ``setpriv``.
"""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

CAP_NET_ADMIN = 12
CAP_NET_RAW = 13


def ensure_system_user(name: str) -> pwd.struct_passwd:
    """The system user ``name`` (with its own group), created like the installer does when absent."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
            check=True,
            capture_output=True,
        )
        return pwd.getpwnam(name)


def setpriv(user: str, caps: tuple[str, ...] = ()) -> list[str]:
    """A command prefix: become ``user`` (its own group only) keeping only ``caps`` (e.g. "net_raw")."""
    entry = pwd.getpwnam(user)
    keep = "".join(f",+{cap}" for cap in caps)
    return [
        "setpriv",
        f"--reuid={entry.pw_uid}",
        f"--regid={entry.pw_gid}",
        "--clear-groups",
        f"--inh-caps=-all{keep}",
        f"--ambient-caps=-all{keep}",
        f"--bounding-set=-all{keep}",
        "--no-new-privs",
    ]


def proc_status(pid: int) -> dict[str, str]:
    """/proc/<pid>/status as a dict (Uid, CapEff, NoNewPrivs, ...)."""
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {key: value.strip() for key, _, value in (line.partition(":") for line in lines)}


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (ip netns exec and setpriv exec in place, so this finds the program)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        for task in Path(f"/proc/{current}/task").iterdir():
            children = (task / "children").read_text().split()
            todo += [int(child) for child in children]
    return found


@contextmanager
def prober_socket_dir(tag: str) -> Iterator[Path]:
    """The prober's runtime directory as the supervisor makes it: owner lbweb-probe, group lbweb, 2750.

    The setgid bit gives the socket the group lbweb, so lbweb's processes (and no one else but root) connect.
    """
    directory = Path(tempfile.mkdtemp(prefix=f"lbweb-prober-{tag}-"))
    try:
        os.chown(directory, pwd.getpwnam("lbweb-probe").pw_uid, grp.getgrnam("lbweb").gr_gid)
        os.chmod(directory, 0o2750)
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@contextmanager
def owned_by(user: str, *paths: Path) -> Iterator[None]:
    """Hand ``paths`` (those that exist) to ``user`` for the test, as lbweb owns its state; restore them after."""
    entry = pwd.getpwnam(user)
    before = {path: (st.st_uid, st.st_gid) for path in paths if path.exists() for st in [path.stat()]}
    try:
        for path in before:
            os.chown(path, entry.pw_uid, entry.pw_gid)
        yield
    finally:
        for path, (uid, gid) in before.items():
            if path.exists():
                os.chown(path, uid, gid)
