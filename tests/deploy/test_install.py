"""deploy/install.sh, run as the README gives it, into a throw-away prefix (units, /etc/lbweb and the state directory
moved there too): the application tree, the users, the configuration and state modes, the units, and the installed
application working as user lbweb from its read-only directory with the set-up steps of its own unit."""

from __future__ import annotations

import grp
import os
import pwd
import re
import shlex
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.support.units import APP_DIR, ROOT, TMPFILES, read_unit, setup_steps, unit_files, verify

SYSTEMD_IS_PID1 = Path("/run/systemd/system").exists()


def readme_command() -> list[str]:
    """The first command of the README's "Installing as a service (systemd)" section."""
    section = ROOT.joinpath("README.md").read_text().split("## Installing as a service (systemd)", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    return shlex.split(block.splitlines()[0].split("#", 1)[0])


@pytest.fixture(scope="module")
def install():
    if os.geteuid() != 0:
        pytest.fail("deploy/install.sh creates system users and root-owned files: run the suite as root")
    base = Path(tempfile.mkdtemp(prefix="lbweb-install-test-", dir="/var/tmp"))
    base.chmod(0o755)  # lbweb must reach the application below it
    paths = {
        "prefix": base / "opt" / "lbweb",
        "units": base / "units",
        "tmpfiles": base / "tmpfiles.d",
        "etc": base / "etc",
        "state": base / "state",
    }
    env = dict(
        os.environ,
        LBWEB_UNIT_DIR=str(paths["units"]),
        LBWEB_TMPFILES_DIR=str(paths["tmpfiles"]),
        LBWEB_ETC_DIR=str(paths["etc"]),
        LBWEB_STATE_DIR=str(paths["state"]),
    )

    def run(*extra: str) -> str:
        command = [*readme_command(), "--prefix", str(paths["prefix"]), *extra]
        result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
        return result.stdout

    paths["first_output"] = run("--no-start")
    yield paths, run
    shutil.rmtree(base)


def as_lbweb(install_paths, *command: str, **env: str) -> subprocess.CompletedProcess:
    """A command of the installed application as its unit runs it: user lbweb, UMask 0077, cwd the app directory."""
    return subprocess.run(
        [f"{install_paths['prefix']}/.venv/bin/python", *command],
        cwd=install_paths["prefix"],
        env={"PATH": "/usr/bin:/bin", "LBWEB_VAR_DIR": str(install_paths["state"]), **env},
        user="lbweb",
        group="lbweb",
        extra_groups=[],
        umask=0o077,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_readme_gives_the_installer():
    assert readme_command()[0] == "deploy/install.sh"


def test_application_is_the_checkouts_tracked_files_root_owned_and_read_only(install):
    paths, _ = install
    prefix = paths["prefix"]
    assert "--no-start" in paths["first_output"]
    assert prefix.is_symlink() and prefix.resolve().parent == prefix.parent / "lbweb-releases"
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    release = prefix.resolve()
    copied = {
        str(path.relative_to(release))
        for path in release.rglob("*")
        if not path.is_dir() and not {".venv", "node_modules", "__pycache__"} & set(path.relative_to(release).parts)
    }
    assert copied == {name for name in tracked if (ROOT / name).exists()} | {".lbweb-release"}
    assert not (release / "var").exists()
    for path in [release, *release.rglob("*")]:
        info = path.lstat()
        if not stat.S_ISLNK(info.st_mode):
            assert info.st_uid == 0 and not info.st_mode & 0o022, path
    assert (release / "node_modules" / "chart.js" / "dist").is_dir()


def test_virtualenv_is_debians_python_with_the_pinned_requirements(install):
    paths, _ = install
    venv = paths["prefix"] / ".venv"
    assert "home = /usr/bin" in (venv / "pyvenv.cfg").read_text()
    assert str((venv / "bin" / "python").resolve()).startswith("/usr/bin/python3")
    frozen = subprocess.run(
        [venv / "bin" / "python", "-m", "pip", "freeze"], capture_output=True, text=True, check=True
    ).stdout.lower()
    pinned = [line.lower() for line in (ROOT / "requirements.txt").read_text().split() if "==" in line]
    assert [pin for pin in pinned if pin.replace("_", "-") not in frozen.replace("_", "-")] == []


def test_users(install):
    lbweb, probe = pwd.getpwnam("lbweb"), pwd.getpwnam("lbweb-probe")
    for user in (lbweb, probe):
        assert user.pw_shell in ("/usr/sbin/nologin", "/bin/false") and user.pw_uid < 1000
    assert grp.getgrgid(lbweb.pw_gid).gr_name == "lbweb"
    assert grp.getgrgid(probe.pw_gid).gr_name == "lbweb-probe"
    assert "lbweb-probe" not in grp.getgrnam("lbweb").gr_mem  # it must not read lbweb.env
    assert not Path(probe.pw_dir).exists()


def test_configuration_and_state_modes(install):
    paths, _ = install
    lbweb = pwd.getpwnam("lbweb")
    for path, mode, uid, group in (
        (paths["etc"], 0o750, 0, "lbweb"),
        (paths["etc"] / "lbweb.env", 0o640, 0, "lbweb"),
        (paths["state"], 0o700, lbweb.pw_uid, "lbweb"),
    ):
        info = path.stat()
        assert (stat.S_IMODE(info.st_mode), info.st_uid, grp.getgrgid(info.st_gid).gr_name) == (mode, uid, group)


def test_units_are_installed_for_the_prefix_and_verify(install):
    paths, _ = install
    installed = sorted(paths["units"].iterdir())
    assert [path.name for path in installed] == [path.name for path in unit_files()]
    for unit in unit_files():
        path = paths["units"] / unit.name
        assert stat.S_IMODE(path.stat().st_mode) == 0o644 and path.stat().st_uid == 0
        assert path.read_text() == unit.read_text().replace(APP_DIR, str(paths["prefix"]))
    assert verify(installed) == ""
    tmpfiles = paths["tmpfiles"] / "lbweb.conf"
    assert tmpfiles.read_text() == TMPFILES.read_text() and stat.S_IMODE(tmpfiles.stat().st_mode) == 0o644


def test_installed_application_runs_its_checks_as_lbweb_and_cannot_change_itself(install):
    paths, _ = install
    check = as_lbweb(paths, "manage.py", "check")
    assert check.returncode == 0, check.stderr
    write = as_lbweb(paths, "-c", "open('manage.py', 'a')")
    assert write.returncode != 0 and "Permission denied" in write.stderr


@pytest.mark.parametrize("step", [step[1] for step in setup_steps()])
def test_setup_unit_steps_run_as_lbweb_and_leave_private_state(install, step):
    """Each ExecStart of the installed lbweb-setup.service, as its unit runs it (the steps in the contract's order)."""
    paths, _ = install
    unit = read_unit(paths["units"] / "lbweb-setup.service")["Service"]
    line = next(line for line in unit["ExecStart"] if shlex.split(line)[2] == step)
    command = shlex.split(line)
    assert command[0] == f"{paths['prefix']}/.venv/bin/python"
    known = as_lbweb(paths, "manage.py", "help", "--commands").stdout.split()
    if step not in known:
        pytest.skip(f"manage.py {step} is not in this checkout yet (issue 11: another part)")
    result = as_lbweb(paths, *command[1:], LBWEB_ADMIN_PASSWORD="install-test-password")
    assert result.returncode == 0, result.stdout + result.stderr
    assert stat.S_IMODE(paths["state"].stat().st_mode) == 0o700
    for path in paths["state"].rglob("*"):
        info = path.lstat()
        assert info.st_uid == pwd.getpwnam("lbweb").pw_uid, path
        # The public UI files are 0644 (Django's FILE_UPLOAD_PERMISSIONS), behind the 0700 directory; nothing else
        # (database, WAL, secret key, certificate and key) is open to the group or others.
        if path.relative_to(paths["state"]).parts[0] != "static":
            assert not info.st_mode & 0o077, path


def test_second_run_keeps_the_release_and_the_operators_configuration(install):
    paths, run = install
    release = paths["prefix"].resolve()
    env_file = paths["etc"] / "lbweb.env"
    env_file.write_text(env_file.read_text() + "ALLOWED_HOSTS=lb.example.org\n")
    output = run() if not SYSTEMD_IS_PID1 else run("--no-start")
    assert "is already built" in output
    if not SYSTEMD_IS_PID1:
        assert "systemd is not PID 1 here" in output
    assert paths["prefix"].resolve() == release
    assert env_file.read_text().endswith("ALLOWED_HOSTS=lb.example.org\n")
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o640
