"""The transition handler: keepalived's ``vrrp_notify_fifo_script``, one long-lived process per keepalived.

    python -m dataplane.cluster.transition --plan STATE_DIR/plan.json FIFO      (keepalived appends FIFO)

keepalived writes every state change of the instance to the FIFO, in order (``INSTANCE "lbweb" MASTER 150``);
this process handles them one after the other, so a quick MASTER -> BACKUP never runs its two halves at once.
Nothing it runs comes from the FIFO but the state word, matched against a fixed set; every command has a fixed
argv built here, no shell.

On MASTER, in this order (the order is the point, see ``compiler.cluster.render``):
  1. ``conntrackd -c``: commit the external cache (the peer's connections) into the kernel;
  2. persistence entries rebuilt from the now complete conntrack table (a client with a connection to a
     backend of a persistence farm is bound to that backend again, for the farm's TTL);
  3. the floating addresses added (farm VIPs, SNAT sources, gateways): only now can packets arrive;
  4. gratuitous ARP / unsolicited NA for each;
  5. ``conntrackd -f``, ``-R``, ``-B``: flush the caches, take the kernel's table as ours, send it to the peer.
On BACKUP: addresses removed, ``conntrackd -n`` (ask the master for its whole table). On FAULT: addresses
removed, ``conntrackd -t`` (shorten the kernel's timers: this node's entries are stale from now on). When
keepalived goes away (end of the FIFO) the addresses are removed, so two nodes never hold them for long.

Each transition is a JSON line in the journal (``transitions.jsonl``: state, reason, each step with its time);
``role`` holds the current state. The Django side reads both (``cluster.services.ingest_journal``): this
process never imports Django, so nothing slow stands between the election and the addresses.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import ipaddress
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from compiler.cluster.spec import ClusterSpec, FloatingAddress, PersistenceSpec

from .announce import announce

STATES = ("MASTER", "BACKUP", "FAULT", "STOP")
CONNTRACKD = "/usr/sbin/conntrackd"
CONNTRACK = "/usr/sbin/conntrack"
NFT = "/usr/sbin/nft"


def load(path: str | Path) -> ClusterSpec:
    return ClusterSpec.from_dict(json.loads(Path(path).read_text()))


class Handler:
    def __init__(self, plan_path: str | Path):
        self.plan_path = Path(plan_path)
        self.state = "INIT"

    @property
    def spec(self) -> ClusterSpec:
        return load(self.plan_path)  # read at every event: the worker rewrites it when farms change

    # -- steps ---------------------------------------------------------------------------------

    def conntrackd(self, spec: ClusterSpec, flag: str) -> str:
        result = subprocess.run(
            [CONNTRACKD, "-C", spec.conntrackd_conf, flag], capture_output=True, text=True, timeout=30
        )
        out = (result.stdout + result.stderr).strip()
        if result.returncode:
            raise RuntimeError(f"conntrackd {flag} exited {result.returncode}: {out}")
        return out

    def add_addresses(self, spec: ClusterSpec) -> list[str]:
        from pyroute2 import IPRoute

        added = []
        with IPRoute() as ipr:
            for fa in spec.addresses:
                iface = ipaddress.ip_interface(fa.address)
                index = ipr.link_lookup(ifname=fa.interface)
                if not index:
                    raise RuntimeError(f"no interface {fa.interface} for {fa.address}")
                try:
                    kwargs = {"flags": 0x02} if iface.version == 6 else {}  # IFA_F_NODAD: usable at once
                    ipr.addr("add", index=index[0], address=fa.ip, prefixlen=iface.network.prefixlen, **kwargs)
                    added.append(fa.address)
                except Exception as exc:  # already there: fine
                    if getattr(exc, "code", None) != errno.EEXIST:
                        raise
        return added

    def remove_addresses(self, spec: ClusterSpec) -> list[str]:
        from pyroute2 import IPRoute

        removed = []
        with IPRoute() as ipr:
            for fa in spec.addresses:
                index = ipr.link_lookup(ifname=fa.interface)
                if not index:
                    continue
                iface = ipaddress.ip_interface(fa.address)
                try:
                    ipr.addr("del", index=index[0], address=fa.ip, prefixlen=iface.network.prefixlen)
                    removed.append(fa.address)
                except Exception as exc:  # not there: fine
                    if getattr(exc, "code", None) not in (errno.EADDRNOTAVAIL, errno.ENOENT, errno.ENODEV):
                        raise
        return removed

    def announce(self, spec: ClusterSpec) -> int:
        sent = 0
        for fa in spec.addresses:
            with contextlib.suppress(OSError):
                announce(fa.interface, fa.ip)
                sent += 1
        return sent

    def rebuild_persistence(self, spec: ClusterSpec) -> int:
        lines = []
        for farm in spec.persistence:
            lines += _persistence_elements(farm, _conntrack_pairs(farm))
        if not lines:
            return 0
        result = subprocess.run([NFT, "-f", "-"], input="\n".join(lines) + "\n", capture_output=True, text=True)
        if result.returncode:
            raise RuntimeError(f"nft: {result.stderr.strip()}")
        return len(lines)

    # -- transitions -----------------------------------------------------------------------------

    def handle(self, state: str) -> dict:
        spec = self.spec
        previous, self.state = self.state, state
        entry = {"node": spec.local.name, "state": state, "from": previous, "at": time.time(), "steps": []}
        entry["reason"] = self.reason(spec, state, previous)
        plans = {
            "MASTER": [
                ("commit", lambda: self.conntrackd(spec, "-c")),
                ("persistence", lambda: self.rebuild_persistence(spec)),
                ("addresses", lambda: self.add_addresses(spec)),
                ("announce", lambda: self.announce(spec)),
                ("flush", lambda: self.conntrackd(spec, "-f")),
                ("resync", lambda: self.conntrackd(spec, "-R")),
                ("bulk", lambda: self.conntrackd(spec, "-B")),
            ],
            "BACKUP": [
                ("addresses", lambda: self.remove_addresses(spec)),
                ("request", lambda: self.conntrackd(spec, "-n")),
            ],
            "FAULT": [
                ("addresses", lambda: self.remove_addresses(spec)),
                ("shorten", lambda: self.conntrackd(spec, "-t")),
            ],
            "STOP": [("addresses", lambda: self.remove_addresses(spec))],
        }
        if spec.vips_by_keepalived:  # the baseline: keepalived adds and removes them (before this runs)
            plans = {k: [p for p in v if p[0] not in ("addresses", "announce")] for k, v in plans.items()}
        for name, step in plans[state]:
            started = time.time()
            record = {"step": name, "started": started}
            try:
                record["result"] = step()
                record["ok"] = True
            except Exception as exc:  # a failed step is recorded; the next ones still run
                record["ok"], record["error"] = False, str(exc)
            record["ended"] = time.time()
            entry["steps"].append(record)
        entry["done"] = time.time()
        self.write(spec, entry)
        return entry

    def reason(self, spec: ClusterSpec, state: str, previous: str) -> str:
        if state == "FAULT":
            down = [i for i in spec.track_interfaces if _operstate(i) not in ("up", "unknown")]
            if down:
                return "tracked interface down: " + ", ".join(down)
            return "a tracked process is not running (conntrackd)"
        if state == "MASTER":
            return f"elected: no advertisement from {spec.peer.name} at a higher priority"
        if state == "BACKUP":
            if previous == "MASTER":
                return f"{spec.peer.name} advertised a higher priority"
            if previous == "FAULT":
                return "recovered from fault; following the master"
            return "started; following the master"
        return "keepalived stopped"

    def write(self, spec: ClusterSpec, entry: dict) -> None:
        directory = Path(spec.state_dir)
        with open(directory / "transitions.jsonl", "a") as journal:
            journal.write(json.dumps(entry, sort_keys=True) + "\n")
        tmp = directory / "role.tmp"
        tmp.write_text(json.dumps({"state": entry["state"], "since": entry["at"], "node": entry["node"]}))
        os.replace(tmp, directory / "role")

    def run(self, fifo: str) -> None:
        """Handle the FIFO's events until keepalived goes away: the FIFO ends, or keepalived (its VRRP process,
        also when its parent was killed) sends SIGTERM. Then give the addresses up."""

        def stop(signum, frame):
            raise SystemExit(0)

        signal.signal(signal.SIGTERM, stop)
        try:
            with open(fifo) as stream:
                for line in stream:
                    state = parse(line)
                    if state:
                        self.handle(state)
        finally:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the release below is not interrupted
            if self.state != "STOP":
                self.handle("STOP")


def parse(line: str) -> str | None:
    """``INSTANCE "lbweb" MASTER 150`` -> "MASTER"; anything else (group events, unknown words) -> None."""
    parts = line.split()
    if len(parts) >= 3 and parts[0] == "INSTANCE" and parts[2] in STATES:
        return parts[2]
    return None


def _operstate(interface: str) -> str:
    try:
        return Path(f"/sys/class/net/{interface}/operstate").read_text().strip()
    except OSError:
        return "missing"


def _conntrack_pairs(farm: PersistenceSpec) -> set[tuple[str, str]]:
    """(client, backend) of every conntrack entry of the farm (its mark): the original source and the reply's."""
    family = "ipv6" if farm.family == 6 else "ipv4"
    result = subprocess.run(
        [CONNTRACK, "-L", "-f", family, "-m", str(farm.mark)], capture_output=True, text=True, timeout=30
    )
    pairs = set()
    for line in result.stdout.splitlines():
        sources = [word[4:] for word in line.split() if word.startswith("src=")]
        if len(sources) >= 2:
            pairs.add((sources[0], sources[1]))
    return pairs


def _persistence_elements(farm: PersistenceSpec, pairs: set[tuple[str, str]]) -> list[str]:
    sets = dict(farm.sets)
    lines = []
    for client, backend in sorted(pairs):
        name = sets.get(backend)
        if name:
            lines.append(f"add element inet lbweb {name} {{ {client} timeout {farm.ttl}s }}")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plan", required=True)
    parser.add_argument("fifo")
    args = parser.parse_args(argv)
    socket.setdefaulttimeout(5)
    Handler(args.plan).run(args.fifo)


if __name__ == "__main__":
    main(sys.argv[1:])

__all__ = ["FloatingAddress", "Handler", "main", "parse"]
