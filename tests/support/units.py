"""deploy/systemd's unit files and deploy/PROCESSES.md's process table, read for the tests that keep them equal.

The units are written for the appliance's paths (/opt/lbweb, /var/lib/lbweb); ``render`` writes copies that run
from another application directory, since ``systemd-analyze verify`` checks that every ExecStart exists.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
UNIT_DIR = ROOT / "deploy" / "systemd"
CONTRACT = ROOT / "deploy" / "PROCESSES.md"
APP_DIR = "/opt/lbweb"
STATE_DIR = "/var/lib/lbweb"


@dataclass(frozen=True)
class Program:
    """One row of the contract's table: what systemd and run.sh start, as whom, with which capabilities."""

    name: str
    command: tuple[str, ...]
    user: str
    capabilities: frozenset[str]


def _contract_text() -> str:
    return CONTRACT.read_text()


def contract() -> dict[str, Program]:
    programs = {}
    for line in _contract_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) != 4 or cells[0] in ("program", "") or cells[0].startswith("-"):
            continue
        command = re.search(r"`([^`]+)`", cells[1]).group(1).replace("$VAR", STATE_DIR)
        programs[cells[0]] = Program(
            cells[0], tuple(shlex.split(command)), cells[2], frozenset(re.findall(r"CAP_[A-Z_]+", cells[3]))
        )
    return programs


def setup_steps() -> list[tuple[str, str]]:
    """The contract's set-up steps, in order, as ("manage.py", command)."""
    paragraph = _contract_text().split("Set-up steps", 1)[1].split("\n\n", 1)[0]
    return [tuple(step.split()) for step in re.findall(r"`(manage\.py [a-z_]+)`", paragraph)]


def prober_socket() -> str:
    return re.search(r"`LBWEB_PROBER_SOCKET`, default `([^`]+)`", _contract_text()).group(1)


def socket_ports() -> dict[str, int]:
    """{"web": 443, "redirect": 80}: the ports the contract gives the socket units."""
    found = re.findall(r"`lbweb-([a-z]+)\.socket`\s*\((\d+)\)", _contract_text())
    return {name: int(port) for name, port in found}


TMPFILES = UNIT_DIR / "lbweb.tmpfiles"


def unit_files() -> list[Path]:
    return sorted(path for path in UNIT_DIR.glob("lbweb*") if path.suffix in (".service", ".socket", ".target"))


def read_unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """{section: {key: [values in order]}}; a key may repeat (ExecStart of a oneshot, SystemCallFilter)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        key, _, value = line.partition("=")
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def render(dest: Path, app_dir: str | Path) -> list[Path]:
    """Copies of the units with ``app_dir`` for /opt/lbweb, as deploy/install.sh writes them."""
    dest.mkdir(parents=True, exist_ok=True)
    written = []
    for unit in unit_files():
        target = dest / unit.name
        target.write_text(unit.read_text().replace(APP_DIR, str(app_dir)))
        written.append(target)
    return written


def verify(paths: list[Path]) -> str:
    """Everything ``systemd-analyze verify`` says about the units: empty when they are clean.

    It exits 0 on a warning such as an unknown key, so its output counts, not only its status.
    """
    result = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", "--generators=no", *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    output = (result.stdout + result.stderr).strip()
    return f"exit status {result.returncode}\n{output}" if result.returncode else output
