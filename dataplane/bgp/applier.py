"""Worker side of BGP: BIRD's file from the database and this node's kernel, checked before use, and BIRD
reloaded through its control socket without dropping a session.

:func:`deploy` reads which farms can serve here (``bgp.specs.farm_states``: up, not failed on this node, held by
this node's kernel, with a backend that takes new connections), lets ``compiler.bgp.routes`` decide what is
announced, writes ``LBWEB_BGP_DIR/bird.conf`` beside the one in use, has ``bird -p`` read it, renames it into
place and asks BIRD to load it (``birdc configure``). A change of routes reconfigures only BIRD's static
protocols, so the sessions stay up and the routers get updates and withdrawals. What was decided, and why a VIP
is withdrawn, is kept in ``BgpSettings.status`` for the page and the API.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import subprocess
from pathlib import Path

from django.conf import settings
from django.utils import timezone

import compiler.names
from bgp.engine_check import CheckFailed, check_bird
from bgp.models import BgpSettings
from bgp.specs import bgp_spec, farm_states
from compiler.bgp import render, routes
from farms.choices import ApplyStatusChoices

from ..fingerprints import observe
from ..kernel.sandbox import IsolatedKernel

log = logging.getLogger("lbweb.bgp")
BIRDC = "/usr/sbin/birdc"
TIMEOUT = 10
_loaded: dict = {"digest": None, "status": None}  # what BIRD last loaded and the status last written, here


def directory() -> Path:
    return Path(settings.LBWEB_BGP_DIR)


def held_chains(kernel=None) -> set[str]:
    """The chains of ``table inet lbweb`` in this node's kernel (a farm's chain there: the kernel holds it)."""
    return observe(kernel or IsolatedKernel()).chains


def birdc(*words: str) -> str:
    """One command over BIRD's control socket (``birdc -s``); raises CheckFailed when BIRD does not answer."""
    argv = [BIRDC, "-s", str(directory() / "bird.ctl"), *words]
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CheckFailed("birdc", " ".join(words), str(exc)) from exc
    if result.returncode:
        raise CheckFailed("birdc", " ".join(words), (result.stdout + result.stderr).strip()[-400:])
    return result.stdout


def configure() -> str:
    """``birdc configure``: BIRD reads its file again and changes what changed (sessions kept)."""
    out = birdc("configure")
    if not re.search(r"Reconfigured|Reconfiguration in progress|Nothing to do", out):
        raise CheckFailed("birdc configure", "bird.conf", out.strip()[-400:])
    return out


SESSION = re.compile(r"^(peer\d+)\s+BGP\s+\S+\s+(\S+)\s+\S+\s*(.*)$")


def sessions() -> dict[str, dict]:
    """Each peer's session as BIRD reports it (``show protocols``): {"peerN": {"state", "info"}}."""
    found = {}
    for line in birdc("show", "protocols").splitlines():
        match = SESSION.match(line.strip())
        if match:
            found[match.group(1)] = {"state": match.group(2), "info": match.group(3).strip()}
    return found


def write_checked(path: Path, text: str) -> bool:
    """Replace ``path`` with ``text`` once ``bird -p`` read it (False: it was already so). A refusal leaves the
    file in use as it was and raises."""
    if path.exists() and path.read_text() == text:
        return False
    staged = path.with_name(path.name + ".new")
    staged.write_text(text)
    os.chmod(staged, 0o600)
    try:
        check_bird(staged)
    except BaseException:
        staged.unlink(missing_ok=True)
        raise
    os.replace(staged, path)
    return True


def _reload(text: str) -> str:
    """``birdc configure`` unless BIRD already loaded ``text`` ("" or why it failed). BIRD not started yet reads the
    file itself when its wrapper starts it."""
    digest = hashlib.sha256(text.encode()).hexdigest()
    if _loaded["digest"] == digest or not (directory() / "bird.ctl").exists():
        return ""
    try:
        configure()
    except CheckFailed as exc:
        return str(exc)
    _loaded["digest"] = digest
    return ""


def _record(status: dict) -> None:
    """The status for the page and the API, written only when more than its time changed (every 2 s otherwise)."""
    same = {k: v for k, v in status.items() if k != "at"}
    if _loaded.get("status") == same:
        return
    _loaded["status"] = same
    BgpSettings.objects.filter(pk=1).update(status=status)


def decide(bgp: BgpSettings, chains: set[str], now=None):
    """(routes, {farm: why}) for this node now."""
    now = now or timezone.now()

    def held(farm) -> bool:
        return compiler.names.farm_chain_name_of(farm.name) in chains

    def failed(farm) -> bool:
        return farm.apply_status == ApplyStatusChoices.FAILED

    elapsed = (now - bgp.drained_at).total_seconds() if bgp.drained and bgp.drained_at else 0.0
    return routes.decide(
        farm_states(held, failed), drained=bgp.drained, drain_elapsed=elapsed, drain_seconds=bgp.drain_seconds
    )


def deploy(kernel=None) -> dict:
    """Bring BIRD to the database and the kernel; with BGP off, remove its file (the wrapper stops BIRD)."""
    conf = directory() / "bird.conf"
    bgp = BgpSettings.objects.filter(pk=1, enabled=True).first()
    if bgp is None:
        removed = conf.exists()
        conf.unlink(missing_ok=True)
        _loaded["digest"] = None
        _record({"enabled": False})
        return {"enabled": False, "removed": removed}
    directory().mkdir(mode=0o700, parents=True, exist_ok=True)
    announced, why = decide(bgp, held_chains(kernel))
    status = {"enabled": True, "at": timezone.now().isoformat(), "farms": why,
              "announced": [r.prefix for r in announced], "error": ""}  # fmt: skip
    try:
        text = render.bird_conf(bgp_spec(bgp, announced))
    except ValueError as exc:
        text, status["error"] = None, f"lbweb refused a value: {exc}"
    changed = False
    if text is not None:
        try:
            changed = write_checked(conf, text)
        except CheckFailed as exc:
            status["error"] = str(exc)
        else:
            status["error"] = _reload(text)
        try:
            status["sessions"] = sessions()
        except CheckFailed:
            status["sessions"] = {}
            status["bird"] = "BIRD is not answering on its control socket (starting, or stopped)"
    if status["error"]:
        log.warning("BGP: %s", status["error"])
    _record(status)
    return {"enabled": True, "changed": changed, "announced": status["announced"], "error": status["error"]}
