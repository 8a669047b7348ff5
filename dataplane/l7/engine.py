"""Brings HAProxy to an ``EngineSpec``: write the files, check them with ``haproxy -c``, then either change the
running worker through the runtime API (weights, states, capacity: no reload) or reload hitlessly. No Django.

Only the worker calls this: it is the only process that changes the data plane
(docs/how-a-change-reaches-the-kernel.md). The files are written even when the runtime API is enough, so the next
reload, or a restart of HAProxy, starts from the same truth.

A farm HAProxy refuses is isolated, as the kernel's refused units are (``dataplane/bisection.py``): every other farm
applies, and the refused one stays as the running worker serves it (``Engine.apply_isolating``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from compiler.haproxy.config import CONFIG_NAME, Bundle, render, server_state, server_weight
from compiler.haproxy.spec import EngineSpec, FarmSpec, as_json, from_json

from ..bisection import bisect
from .runtime import EngineError, MasterCLI, ReloadRefused

BASE_CONFIG = Path(__file__).resolve().parents[2] / "deploy" / "haproxy.cfg"
FILE_MODE = 0o640  # the directory is the worker's, setgid to the engine's group: HAProxy reads, nobody else
# What the running worker serves, for the next worker process (Engine.recall); hidden, so HAProxy's "-f <dir>"
# (every *.cfg file there that is not hidden) never reads it, and 0600: it holds the certificates' keys.
SERVED_NAME = ".lbweb-served.json"


class ConfigError(EngineError):
    """``haproxy -c`` refused the generated configuration (its alerts are the message)."""


def refusal_words(exc: BaseException) -> str | None:
    """HAProxy's words when ``exc`` says it refused a configuration (its check, or loading it at a reload); None
    for anything else (not reachable, a reload that did not finish: what it serves is not known)."""
    return str(exc) if isinstance(exc, ConfigError | ReloadRefused) else None


def merge(wanted: EngineSpec, served: EngineSpec | None, kept: Iterable[int]) -> EngineSpec:
    """``wanted`` with the farms ``kept`` as ``served`` has them (left out where it has none, or is not known)."""
    kept = set(kept)
    farms: dict[int, FarmSpec] = {f.id: f for f in wanted.farms if f.id not in kept}
    farms.update({f.id: f for f in (served.farms if served else ()) if f.id in kept})
    return dataclasses.replace(wanted, farms=tuple(farms[fid] for fid in sorted(farms)))


def changed_farms(served: EngineSpec | None, wanted: EngineSpec) -> list[int]:
    """The farms ``wanted`` adds, changes or removes, against ``served`` (every farm when it is not known)."""
    old = {f.id: f for f in (served.farms if served else ())}
    new = {f.id: f for f in wanted.farms}
    return sorted(fid for fid in old.keys() | new.keys() if old.get(fid) != new.get(fid))


def check(spec: EngineSpec, base_config: Path = BASE_CONFIG, haproxy: str = "haproxy", access_log: str = "") -> None:
    """Run ``haproxy -c`` on ``spec`` rendered in a scratch directory (certificates and error pages included)."""
    with tempfile.TemporaryDirectory(prefix="lbweb-haproxy-check-") as scratch:
        refusal = _check_in(render(spec, scratch, access_log), Path(scratch), base_config, haproxy)
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
        write_file(path, bundle.files[name], FILE_MODE)
    for sub in ("certs", "crt-lists", "errors"):
        for path in (directory / sub).glob("*") if (directory / sub).is_dir() else ():
            if f"{sub}/{path.name}" not in bundle.files:
                path.unlink()


def write_file(path: Path, text: str, mode: int) -> None:
    """Replace ``path`` with ``text`` atomically (a reader sees the old file or the new), with ``mode`` from the
    start."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


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
    return dataclasses.replace(spec, farms=tuple(farm_structure(farm) for farm in spec.farms))


def farm_structure(farm: FarmSpec | None) -> FarmSpec | None:
    """One farm's part of :func:`structure`."""
    if farm is None:
        return None
    neutral = {"weight": 1, "state": "enabled", "healthy": True, "capacity": None}
    services = []
    for service in farm.services:
        servers = tuple(dataclasses.replace(s, **neutral) for s in service.servers)
        services.append(dataclasses.replace(service, servers=servers))
    return dataclasses.replace(farm, services=tuple(services))


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
        access_log: str = "",
    ):
        self.conf_dir = Path(conf_dir)
        self.access_log = access_log  # rsyslog's socket for the access log (remote syslog), or none
        self.cli = MasterCLI(master_socket)
        self.base_config = base_config
        self.haproxy = haproxy
        self.running: EngineSpec | None = None  # what the current HAProxy worker serves, when known

    def render(self, spec: EngineSpec) -> Bundle:
        return render(spec, str(self.conf_dir), self.access_log)

    def apply(self, spec: EngineSpec, outcome: Outcome | None = None) -> Outcome:
        """Check, write, then runtime commands or a reload; raise ``ConfigError`` or ``ReloadRefused`` when HAProxy
        refuses it (then the files are again those of what the running worker serves, when that is known, so a
        restart of HAProxy starts from them), ``EngineError`` when HAProxy cannot be reached. What is done is
        added to ``outcome`` (a new one by default)."""
        check(spec, self.base_config, self.haproxy)
        bundle = self.render(spec)
        outcome = outcome or Outcome(digest="")
        outcome.digest, outcome.engine_running = bundle.digest(), True
        write_files(bundle, self.conf_dir)
        self._forget()  # until HAProxy is known to serve it (a crash from here on leaves nothing to trust)
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
            try:
                self.cli.reload()
            except ReloadRefused:
                if self.running is not None:
                    served = self.render(self.running)
                    write_files(served, self.conf_dir)
                    self._remember(self.running, served.digest())
                raise
            outcome.reloaded = True
        self.running = spec
        self._remember(spec, outcome.digest)
        return outcome

    def recall(self) -> EngineSpec | None:
        """What the running worker serves, known to this process or, when it has just started, from the record
        the last apply left: if HAProxy has neither reloaded nor restarted since (its master's pid and reload
        count are the record's) and the generator still writes the same files from it. Why: without it a new
        worker process knew nothing served, so its first apply reloaded HAProxy whatever changed, dropped the
        last served version of every farm HAProxy refused (isolated farms keep it, as the kernel's do), and a
        refused reload was searched across every farm (bench/l7_isolation.py: 13 reloads at 50 farms)."""
        if self.running is None:
            self.running = self._read_record()
        return self.running

    def _read_record(self) -> EngineSpec | None:
        try:
            record = json.loads((self.conf_dir / SERVED_NAME).read_text())
            processes = self.cli.processes()
            if [record["master"], record["reloads"]] != [processes.master_pid, processes.reloads]:
                return None
            spec = from_json(record["spec"])
            return spec if self.render(spec).digest() == record["digest"] else None
        except (OSError, EngineError, ValueError, KeyError, TypeError):
            return None

    def _remember(self, spec: EngineSpec, digest: str) -> None:
        try:
            processes = self.cli.processes()
        except EngineError:
            return
        record = {"master": processes.master_pid, "reloads": processes.reloads, "digest": digest, "spec": as_json(spec)}
        write_file(self.conf_dir / SERVED_NAME, json.dumps(record), 0o600)

    def _forget(self) -> None:
        (self.conf_dir / SERVED_NAME).unlink(missing_ok=True)

    def apply_isolating(self, spec: EngineSpec) -> tuple[Outcome, dict[int, str]]:
        """:meth:`apply`; when HAProxy refuses the whole, the farms it refuses are found (farm id -> HAProxy's words)
        and every other farm is applied. A refused farm stays as the running worker serves it, or out when it
        serves none of it, as the kernel keeps what it held of a refused L4 farm (``dataplane.unit_cache.hold``).

        Bisection over the changed farms (``dataplane/bisection.py``), by ``haproxy -c`` first, then by reloads
        for what only loading refuses. Why bisection, not each farm alone against what runs: one farm in error
        among 50 changed costs 14 checks (0.1-0.3 s each at 50 farms), not 50, and a change of one farm (the usual)
        costs nothing beyond the failed attempt. HAProxy's words name a line or a proxy, not always a farm (a
        post-parse check; nothing at all for a refused reload), so they are the farm's message but do not find
        it. ``bench/l7_isolation.py`` measures it; bench/RESULTS.md has the figures."""
        self.recall()
        try:
            return self.apply(spec), {}
        except (ConfigError, ReloadRefused) as exc:
            first: EngineError = exc
        base, outcome = self.running, Outcome(digest="")
        changed = changed_farms(base, spec)
        if not changed:
            raise first  # what HAProxy refuses is none of the farms (its settings for all): the apply fails whole
        refused: dict[int, str] = {}
        if isinstance(first, ConfigError):
            refused = self._refused_by_check(spec, base, changed, first)
            try:
                self.apply(merge(spec, base, refused), outcome)
                return outcome, refused
            except ReloadRefused as exc:
                first = exc
        loaded = [fid for fid in changed if fid not in refused]
        refused.update(self._refused_by_reload(spec, base, changed, loaded, first, outcome))
        # The files are those of what the worker serves; when that is not known, those without any refused farm.
        bundle = self.render(self.running or merge(spec, None, refused))
        outcome.digest = bundle.digest()
        write_files(bundle, self.conf_dir)
        return outcome, refused

    def _refused_by_check(
        self, spec: EngineSpec, base: EngineSpec | None, changed: list[int], first: ConfigError
    ) -> dict[int, str]:
        """The changed farms ``haproxy -c`` refuses, found without reloading HAProxy: each attempt checks the farms
        that passed so far and half of those left as ``spec`` has them, every other one as ``base`` does."""
        passed: set[int] = set()

        def check_with(group: list[int]) -> None:
            check(merge(spec, base, set(changed) - passed - set(group)), self.base_config, self.haproxy)
            passed.update(group)

        return bisect(changed, check_with, first, refusal_words)

    def _refused_by_reload(
        self,
        spec: EngineSpec,
        base: EngineSpec | None,
        changed: list[int],
        loaded: list[int],
        first: ReloadRefused,
        outcome: Outcome,
    ) -> dict[int, str]:
        """Those of the farms ``loaded`` (the check passed them) HAProxy cannot load (a port another process holds:
        ``-c`` binds nothing). Changes the runtime API applies need no reload, so no reload refuses them: they
        are applied first, in one go. The others are reloaded by halves, each half HAProxy loads served from
        then on (``self.running``), so the next attempt keeps it."""
        old = {f.id: f for f in (base.farms if base else ())}
        new = {f.id: f for f in spec.farms}
        live = {fid for fid in loaded if base and farm_structure(old.get(fid)) == farm_structure(new.get(fid))}
        if live:
            self.apply(merge(spec, base, set(changed) - live), outcome)

        def reload_with(group: list[int]) -> None:
            self.apply(merge(spec, self.running or base, set(changed) - set(group)), outcome)

        return bisect([fid for fid in loaded if fid not in live], reload_with, first, refusal_words)


def clear(directory: Path) -> None:
    """Remove everything lbweb wrote in ``directory`` (tests)."""
    for name in (CONFIG_NAME, SERVED_NAME, "certs", "crt-lists", "errors"):
        path = directory / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
