"""Brings HAProxy to an ``EngineSpec``: write the files, check them with ``haproxy -c``, then either change the
running worker through the runtime API (weights, states, capacity: no reload) or reload hitlessly. No Django.

Only the worker calls this: it is the only process that changes the data plane
(docs/how-a-change-reaches-the-kernel.md). The files are written even when the runtime API is enough, so the next
reload, or a restart of HAProxy, starts from the same truth.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from compiler.haproxy.config import CONFIG_NAME, Bundle, render, server_state, server_weight
from compiler.haproxy.spec import EngineSpec

from .runtime import EngineError, MasterCLI

BASE_CONFIG = Path(__file__).resolve().parents[2] / "deploy" / "haproxy.cfg"
FILE_MODE = 0o640  # the directory is the worker's, setgid to the engine's group: HAProxy reads, nobody else


class ConfigError(EngineError):
    """``haproxy -c`` refused the generated configuration (its alerts are the message)."""


def check(spec: EngineSpec, base_config: Path = BASE_CONFIG, haproxy: str = "haproxy") -> None:
    """Run ``haproxy -c`` on ``spec`` rendered in a scratch directory (certificates and error pages included)."""
    with tempfile.TemporaryDirectory(prefix="lbweb-haproxy-check-") as scratch:
        refusal = _check_in(render(spec, scratch), Path(scratch), base_config, haproxy)
    if refusal:
        raise ConfigError(refusal)


def _check_in(bundle: Bundle, scratch: Path, base_config: Path, haproxy: str) -> str:
    write_files(bundle, scratch)
    result = subprocess.run(
        [haproxy, "-c", "-f", str(base_config), "-f", str(scratch / CONFIG_NAME)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if result.returncode == 0:
        return ""
    output = (result.stdout + result.stderr).strip()
    alerts = [line.split(" : ", 1)[-1] for line in output.splitlines() if "ALERT" in line]
    message = "\n".join(alerts) or output or f"haproxy -c exited with status {result.returncode}"
    return message.replace(str(scratch), "<conf>")


def write_files(bundle: Bundle, directory: Path) -> None:
    """Write every file of ``bundle`` atomically (rename), ``lbweb.cfg`` last; remove files no longer in it."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in sorted(bundle.files, key=lambda n: n == CONFIG_NAME):
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
        with os.fdopen(fd, "w") as out:
            out.write(bundle.files[name])
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    for sub in ("certs", "crt-lists", "errors"):
        for path in (directory / sub).glob("*") if (directory / sub).is_dir() else ():
            if f"{sub}/{path.name}" not in bundle.files:
                path.unlink()


def runtime_view(spec: EngineSpec) -> dict[tuple[str, str], tuple[int, str, int]]:
    """(backend, server) -> (weight, state, maxconn): what the runtime API can change without a reload."""
    return {
        (service.backend_name, server.name): (server_weight(server), server_state(server), server.capacity or 0)
        for farm in spec.farms
        if farm.enabled
        for service in farm.services
        for server in service.servers
    }


def structure(spec: EngineSpec) -> EngineSpec:
    """``spec`` with what the runtime API changes set to one value: two specs with the same structure differ
    only in what a runtime command can apply."""
    neutral = {"weight": 1, "state": "enabled", "healthy": True}
    farms = []
    for farm in spec.farms:
        services = []
        for service in farm.services:
            servers = tuple(dataclasses.replace(s, **neutral, capacity=None) for s in service.servers)
            services.append(dataclasses.replace(service, servers=servers))
        farms.append(dataclasses.replace(farm, services=tuple(services)))
    return dataclasses.replace(spec, farms=tuple(farms))


@dataclass
class Outcome:
    digest: str
    reloaded: bool = False
    runtime_commands: list[str] = field(default_factory=list)
    engine_running: bool = True


class Engine:
    """The configuration directory, the master socket, and what the running worker was given last."""

    def __init__(
        self,
        conf_dir: str | Path,
        master_socket: str,
        base_config: Path = BASE_CONFIG,
        haproxy: str = "haproxy",
    ):
        self.conf_dir = Path(conf_dir)
        self.cli = MasterCLI(master_socket)
        self.base_config = base_config
        self.haproxy = haproxy
        self.running: EngineSpec | None = None  # what the current HAProxy worker serves, when known

    def render(self, spec: EngineSpec) -> Bundle:
        return render(spec, str(self.conf_dir))

    def apply(self, spec: EngineSpec) -> Outcome:
        """Check, write, then runtime commands or a reload; raise ``ConfigError``/``EngineError`` on refusal."""
        check(spec, self.base_config, self.haproxy)
        bundle = self.render(spec)
        outcome = Outcome(digest=bundle.digest())
        write_files(bundle, self.conf_dir)
        if not self.cli.alive():
            # Not started yet (or restarting): it reads these files when it starts.
            self.running = None
            outcome.engine_running = False
            return outcome
        if self.running is not None and structure(self.running) == structure(spec):
            old, new = runtime_view(self.running), runtime_view(spec)
            for (backend, server), (weight, state, maxconn) in sorted(new.items()):
                if old.get((backend, server)) == (weight, state, maxconn):
                    continue
                self.cli.set_maxconn(backend, server, maxconn)
                self.cli.set_weight(backend, server, weight)
                self.cli.set_state(backend, server, state)
                outcome.runtime_commands.append(f"{backend}/{server} weight {weight} state {state} maxconn {maxconn}")
        else:
            self.cli.reload()
            outcome.reloaded = True
        self.running = spec
        return outcome


def clear(directory: Path) -> None:
    """Remove everything lbweb wrote in ``directory`` (tests)."""
    for name in (CONFIG_NAME, "certs", "crt-lists", "errors"):
        path = directory / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
