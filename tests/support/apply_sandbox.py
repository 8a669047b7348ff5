"""Apply nftables documents with libnftables in a throwaway network namespace, in a child process.

The child (``python -m tests.support.apply_sandbox``, started under ``unshare -n``) owns a network namespace
nobody else sees, which disappears with it: nothing is applied to the host's namespace, nothing needs
cleaning up, and parallel runs never meet. Because libnftables runs in the child, a crash inside it
(``*** stack smashing detected ***``, signal 6) is reported as a crash of that document, and the next
document gets a fresh child, instead of killing the test run.

Protocol: one JSON request per line on stdin, ``{"document": {...}, "links": ["eth1", ...]}`` (dummy
interfaces a DSR or offload farm hooks; veth pairs created when missing), one JSON answer per line on stdout,
``{"ok": bool, "error": str}``. ``{"capabilities": true}`` answers with the kernel's capabilities, as the
worker probes them.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Outcome:
    ok: bool
    error: str = ""
    crashed: bool = False


class Sandbox:
    """The parent's handle on the child; ``apply`` never raises for what the document does."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.crashes = 0

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _start(self) -> subprocess.Popen:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen(
                ["unshare", "-n", sys.executable, "-m", "tests.support.apply_sandbox"],
                cwd=ROOT,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        return self.proc

    def _ask(self, request: dict) -> dict | Outcome:
        proc = self._start()
        proc.stdin.write(json.dumps(request) + "\n")
        proc.stdin.flush()
        line = proc.stdout.readline()
        if line:
            return json.loads(line)
        code = proc.wait()
        stderr = proc.stderr.read().strip()[-500:]
        self.proc = None
        self.crashes += 1
        how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
        return Outcome(ok=False, crashed=True, error=f"the libnftables process died ({how}): {stderr}")

    def apply(self, document: dict, links: tuple[str, ...] = ()) -> Outcome:
        answer = self._ask({"document": document, "links": list(links)})
        if isinstance(answer, Outcome):
            return answer
        return Outcome(ok=answer["ok"], error=answer.get("error", ""))

    def capabilities(self) -> dict[str, bool]:
        answer = self._ask({"capabilities": True})
        if isinstance(answer, Outcome):
            raise RuntimeError(answer.error)
        return answer["capabilities"]

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


# -- the child ------------------------------------------------------------------------------


def _ensure_links(names: list[str]) -> None:
    from pyroute2 import IPRoute

    global _peers
    with IPRoute() as ipr:
        for name in names:
            if not ipr.link_lookup(ifname=name):  # a veth pair: not every kernel has the dummy driver
                _peers += 1
                ipr.link("add", ifname=name, kind="veth", peer={"ifname": f"lbwebpeer{_peers}"})
            ipr.link("set", index=ipr.link_lookup(ifname=name)[0], state="up")


_peers = 0


def _empty(nft) -> None:
    """Remove every table of this private namespace (they are all the previous document's)."""
    rc, out, _err = nft.cmd("list tables")
    tables = [i["table"] for i in json.loads(out)["nftables"] if "table" in i] if rc == 0 and out else []
    if tables:
        nft.cmd(
            json.dumps(
                {"nftables": [{"delete": {"table": {"family": t["family"], "name": t["name"]}}} for t in tables]}
            )
        )


def main() -> None:
    import nftables

    nft = nftables.Nftables()
    nft.set_json_output(True)
    _ensure_links(["lo"])
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("capabilities"):
            from dataplane.kernel import capabilities
            from dataplane.kernel.applier import Kernel

            answer = {"capabilities": capabilities.probe(Kernel())}
        else:
            _empty(nft)
            _ensure_links(request.get("links", []))
            rc, _out, err = nft.cmd(json.dumps(request["document"]))
            answer = {"ok": rc == 0, "error": (err or "").strip()}
            if rc == 0 and request["document"].get(
                "nftables"
            ):  # the worker reads the table back (reconcile, kernel --check): that must work too
                rc, _out, err = nft.cmd("list table inet lbweb")
                if rc != 0:
                    answer = {"ok": False, "error": f"applied, but listing the table failed: {err.strip()}"}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
