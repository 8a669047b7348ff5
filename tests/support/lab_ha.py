"""The HA lab of issue 16: a client, a router, two LB nodes on a shared segment, three backends, real keepalived
and conntrackd configured by lbweb's generators, lbweb's compiled ruleset in each node, lbweb's transition handler.

    client 198.18.0.2-5 -- 198.18.0.1 [router] 198.18.2.1 --- front segment (bridge in the router) ---
                                                       n1 eth0 198.18.2.11        n2 eth0 198.18.2.12
                                                       n1 sync0 198.18.3.1 ----- n2 sync0 198.18.3.2 (sync link)
                                                       n1 back0 198.18.1.2        n2 back0 198.18.1.3
                                     --- back segment (bridge in namespace sw) --- b1 .11  b2 .12  b3 .13
    floating (held by the master only): farm VIPs 198.18.2.101-103/24 (eth0), the backends' gateway 198.18.1.1/24
    and the SNAT source 198.18.1.100/24 (back0).

Only 198.18.0.0/15, only in namespaces named with the pid; :meth:`HaLab.destroy` removes everything, processes
included (each by its pid).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import compiler
import compiler.names
from compiler.cluster import render
from compiler.cluster.spec import ClusterSpec, FloatingAddress, NodeSpec, PersistenceSpec
from compiler.spec import BackendSpec, FarmSpec
from tests.support.lab import sh

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
BACKENDS = {"b1": "198.18.1.11", "b2": "198.18.1.12", "b3": "198.18.1.13"}
CLIENTS = ("198.18.0.2", "198.18.0.3", "198.18.0.4", "198.18.0.5")
NODES = {
    "n1": {"front": "198.18.2.11", "back": "198.18.1.2", "sync": "198.18.3.1", "priority": 150},
    "n2": {"front": "198.18.2.12", "back": "198.18.1.3", "sync": "198.18.3.2", "priority": 100},
}
VIPS = {"dnat": "198.18.2.101", "snat": "198.18.2.102", "persist": "198.18.2.103"}
# keepalived and conntrackd as on the appliance (deploy/PROCESSES.md): user lbweb, CAP_NET_ADMIN and CAP_NET_RAW;
# keepalived also CAP_SETGID (it calls setgroups before every script, even as the script's own user)
PRIVDROP = (str(ROOT / "deploy" / "privdrop"), "lbweb", "net_admin,net_raw")
PRIVDROP_KEEPALIVED = (str(ROOT / "deploy" / "privdrop"), "lbweb", "net_admin,net_raw,setgid")
GATEWAY, SNAT_SOURCE, MANAGEMENT = "198.18.1.1", "198.18.1.100", "198.18.2.100"


NODE_LINKS = ("eth0", "back0", "sync0")  # the interfaces tests/cluster/test_cluster_api.py's body() names


@contextlib.contextmanager
def node_links(tag: str):
    """A namespace with one node's interfaces (NODE_LINKS, each one end of a veth pair, up), as keepalived -t and
    conntrackd want them to exist; yields its name, removed afterwards."""
    if os.geteuid() != 0:
        raise RuntimeError("needs root (a network namespace)")
    name = f"lbt-{tag}-{os.getpid()}"
    sh("ip", "netns", "add", name)
    try:
        sh("ip", "-n", name, "link", "set", "lo", "up")
        for dev in NODE_LINKS:
            sh("ip", "-n", name, "link", "add", "name", dev, "type", "veth", "peer", "name", f"{dev}p")
            sh("ip", "-n", name, "link", "set", "dev", dev, "up")
        yield name
    finally:
        sh("ip", "netns", "del", name, check=False)


@contextlib.contextmanager
def reachable_dir(prefix: str):
    """A directory lbweb can enter, removed afterwards. Not under pytest's tmp_path: a pytest session starting
    meanwhile (any other, the machine is shared) makes /tmp/pytest-of-root 0700 again, and lbweb is locked out."""
    path = Path(tempfile.mkdtemp(prefix=f"{prefix}-{os.getpid()}-", dir="/tmp"))
    try:
        os.chmod(path, 0o755)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def farms() -> list[FarmSpec]:
    """The three farms of the proof: DNAT, SNAT (from a floating source) and DNAT with source-address persistence."""
    backends = tuple(BackendSpec(id=i + 1, address=a, port=80) for i, a in enumerate(BACKENDS.values()))
    return [
        FarmSpec(id=1, name="dnat", vip=VIPS["dnat"], ports=((80, 80),), mode="dnat", backends=backends),
        FarmSpec(
            id=2, name="snat", vip=VIPS["snat"], ports=((80, 80),), mode="snat", source_addr=SNAT_SOURCE,
            backends=tuple(BackendSpec(id=i + 4, address=b.address, port=80) for i, b in enumerate(backends)),
        ),
        FarmSpec(
            id=3, name="persist", vip=VIPS["persist"], ports=((80, 80),), mode="dnat", scheduler="weight",
            persistence=("srcip",), persist_ttl=300,
            backends=tuple(BackendSpec(id=i + 7, address=b.address, port=80) for i, b in enumerate(backends)),
        ),
    ]  # fmt: skip


def persistence_specs(farm_list: list[FarmSpec]) -> tuple[PersistenceSpec, ...]:
    return tuple(
        PersistenceSpec(
            farm=f.name, mark=f.mark, ttl=f.persist_ttl, family=f.family,
            sets=tuple((b.address, compiler.names.persist_set_name(f, b.id)) for b in f.backends),
        )
        for f in farm_list
        if f.persistence
    )  # fmt: skip


class HaLab:
    def __init__(
        self, work: Path, advert: float = 0.5, preempt_delay: int = 3, tag: str | None = None, classic: bool = False
    ):
        """``classic``: keepalived holds the floating addresses and the commit runs after them (the baseline)."""
        self.classic = classic
        self.tag = tag or f"lbh{os.getpid() % 100000}"
        self.work = work
        self.advert = advert
        self.preempt_delay = preempt_delay
        self.client, self.router, self.switch = (f"{self.tag}-{n}" for n in ("cl", "rt", "sw"))
        self.nodes = {name: f"{self.tag}-{name}" for name in NODES}
        self.backends = {name: f"{self.tag}-{name}" for name in BACKENDS}
        self.procs: dict[str, subprocess.Popen] = {}
        self.servers: list[subprocess.Popen] = []

    @property
    def namespaces(self) -> list[str]:
        return [self.client, self.router, self.switch, *self.nodes.values(), *self.backends.values()]

    def ns(self, ns: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return sh("ip", "netns", "exec", ns, *args, check=check)

    # -- topology ---------------------------------------------------------------------------------

    def build(self) -> HaLab:
        try:
            self._build()
        except BaseException:
            self.destroy()
            raise
        return self

    def _veth(self, ns_a: str, a: str, ns_b: str, b: str) -> None:
        sh("ip", "link", "add", a, "netns", ns_a, "type", "veth", "peer", "name", b, "netns", ns_b)

    def _up(self, ns: str, dev: str, *addresses: str) -> None:
        for address in addresses:
            self.ns(ns, "ip", "addr", "add", address, "dev", dev)
        self.ns(ns, "ip", "link", "set", dev, "up")

    def _build(self) -> None:
        for ns in self.namespaces:
            sh("ip", "netns", "add", ns)
            self.ns(ns, "ip", "link", "set", "lo", "up")
        self._veth(self.client, "eth0", self.router, "c0")
        self._up(self.client, "eth0", *(f"{c}/24" for c in CLIENTS))
        self.ns(self.client, "ip", "route", "add", "default", "via", "198.18.0.1")
        self._up(self.router, "c0", "198.18.0.1/24")
        self.ns(self.router, "ip", "link", "add", "front", "type", "bridge")
        self._up(self.router, "front", "198.18.2.1/24")
        self.ns(self.router, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        self.ns(self.switch, "ip", "link", "add", "back", "type", "bridge")
        self.ns(self.switch, "ip", "link", "set", "back", "up")
        for name, ns in self.nodes.items():
            cfg = NODES[name]
            self._veth(ns, "eth0", self.router, f"p-{name}")
            self.ns(self.router, "ip", "link", "set", f"p-{name}", "master", "front")
            self.ns(self.router, "ip", "link", "set", f"p-{name}", "up")
            self._up(ns, "eth0", f"{cfg['front']}/24")
            self._veth(ns, "back0", self.switch, f"p-{name}")
            self.ns(self.switch, "ip", "link", "set", f"p-{name}", "master", "back")
            self.ns(self.switch, "ip", "link", "set", f"p-{name}", "up")
            self._up(ns, "back0", f"{cfg['back']}/24")
            self.ns(ns, "ip", "route", "add", "default", "via", "198.18.2.1")
            for key in ("net.ipv4.ip_forward=1", "net.netfilter.nf_conntrack_tcp_be_liberal=1"):
                self.ns(ns, "sysctl", "-qw", key, check=False)
        self._veth(self.nodes["n1"], "sync0", self.nodes["n2"], "sync0")
        self._up(self.nodes["n1"], "sync0", "198.18.3.1/30")
        self._up(self.nodes["n2"], "sync0", "198.18.3.2/30")
        for name, ns in self.backends.items():
            self._veth(ns, "eth0", self.switch, f"p-{name}")
            self.ns(self.switch, "ip", "link", "set", f"p-{name}", "master", "back")
            self.ns(self.switch, "ip", "link", "set", f"p-{name}", "up")
            self._up(ns, "eth0", f"{BACKENDS[name]}/24")
            self.ns(ns, "ip", "route", "add", "default", "via", GATEWAY)
            self.servers.append(
                subprocess.Popen(
                    ["ip", "netns", "exec", ns, sys.executable, str(HERE / "lab_server.py"), name, "80"],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        document = json.dumps(compiler.full_document(farms()))
        for ns in self.nodes.values():
            sh("ip", "netns", "exec", ns, "nft", "-j", "-f", "-", input=document)

    # -- cluster engines ------------------------------------------------------------------------

    def spec(self, name: str) -> ClusterSpec:
        cfg, (peer_name,) = NODES[name], [n for n in NODES if n != name]
        peer = NODES[peer_name]
        state_dir = self.work / name
        return ClusterSpec(
            local=NodeSpec(name, cfg["priority"], cfg["front"], cfg["sync"]),
            peer=NodeSpec(peer_name, peer["priority"], peer["front"], peer["sync"]),
            vrid=51,
            interface="eth0",
            sync_interface="sync0",
            state_dir=str(state_dir),
            # through env: keepalived resolves the script's symlinks, and the venv's python is one
            handler=(
                "/usr/bin/env",
                f"PYTHONPATH={ROOT}",
                sys.executable,
                "-m",
                "dataplane.cluster.transition",
                "--plan",
                str(state_dir / "plan.json"),
            ),  # fmt: skip
            management=FloatingAddress(f"{MANAGEMENT}/24", "eth0"),
            vrrp_version=3,
            advert_interval=self.advert,
            preempt_delay=self.preempt_delay,
            track_interfaces=("eth0", "back0"),
            track_processes=("conntrackd",),
            addresses=(
                *(FloatingAddress(f"{vip}/24", "eth0") for vip in VIPS.values()),
                FloatingAddress(f"{GATEWAY}/24", "back0"),
                FloatingAddress(f"{SNAT_SOURCE}/24", "back0"),
            ),
            persistence=persistence_specs(farms()),
            vips_by_keepalived=self.classic,
            ignore_addresses=tuple(sorted({v for n in NODES.values() for k, v in n.items() if k != "priority"})),
        )

    def write_configs(self) -> None:
        """``work`` must be reachable by lbweb (the daemons run as lbweb): see :func:`reachable_dir`."""
        self.work.mkdir(mode=0o755, parents=True, exist_ok=True)
        for name in NODES:
            spec = self.spec(name)
            Path(spec.state_dir).mkdir(mode=0o700, parents=True, exist_ok=True)
            shutil.chown(spec.state_dir, "lbweb", "lbweb")  # the daemons run as lbweb, as on the appliance
            Path(spec.keepalived_conf).write_text(render.keepalived_conf(spec))
            Path(spec.conntrackd_conf).write_text(render.conntrackd_conf(spec))
            Path(spec.plan_path).write_text(render.plan(spec))

    def _spawn(self, key: str, ns: str, argv: list[str]) -> subprocess.Popen:
        log = open(self.work / f"{key}.log", "ab")  # noqa: SIM115 (closed with the process)
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        proc = subprocess.Popen(
            ["ip", "netns", "exec", ns, *argv], stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env,
            start_new_session=True,
        )  # fmt: skip
        log.close()
        self.procs[key] = proc
        return proc

    def start_conntrackd(self, name: str) -> None:
        """The appliance's program: dataplane/cluster/run.py (as lbweb, with its capabilities) runs conntrackd."""
        argv = [
            *PRIVDROP,
            sys.executable,
            "-m",
            "dataplane.cluster.run",
            "conntrackd",
            "--dir",
            self.spec(name).state_dir,
        ]
        self._spawn(f"conntrackd-{name}", self.nodes[name], argv)

    def start_keepalived(self, name: str) -> None:
        """The appliance's program: dataplane/cluster/run.py runs keepalived, reloads it, releases the addresses."""
        argv = [
            *PRIVDROP_KEEPALIVED,
            sys.executable,
            "-m",
            "dataplane.cluster.run",
            "keepalived",
            "--dir",
            self.spec(name).state_dir,
        ]
        self._spawn(f"keepalived-{name}", self.nodes[name], argv)

    def kill_keepalived(self, name: str) -> None:
        """SIGKILL to keepalived itself (its pid file), as a crash: its wrapper ends too; the lab, as the
        supervisor would, starts the program again later (:meth:`start_keepalived`)."""
        pid = int((Path(self.spec(name).state_dir) / "keepalived.pid").read_text())
        os.kill(pid, signal.SIGKILL)
        proc = self.procs.pop(f"keepalived-{name}")
        proc.wait(timeout=30)

    def start(self) -> None:
        self.write_configs()
        for name in NODES:
            self.start_conntrackd(name)
        time.sleep(0.5)
        for name in NODES:
            self.start_keepalived(name)

    def kill(self, key: str, sig: int = signal.SIGKILL, group: bool = False) -> None:
        """Signal a process we started (``ip netns exec`` became it), or its whole session (its children too)."""
        proc = self.procs.pop(key)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig) if group else os.kill(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)

    def role(self, name: str) -> str:
        try:
            return json.loads((Path(self.spec(name).state_dir) / "role").read_text())["state"]
        except (OSError, ValueError):
            return "INIT"

    def journal(self, name: str) -> list[dict]:
        path = Path(self.spec(name).state_dir) / "transitions.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def master(self) -> str | None:
        masters = [n for n in NODES if self.role(n) == "MASTER"]
        return masters[0] if len(masters) == 1 else None

    def wait_master(self, timeout: float = 30, not_: str | None = None) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = self.master()
            if m and m != not_:
                return m
            time.sleep(0.05)
        raise AssertionError(f"no master (roles {[self.role(n) for n in NODES]})")

    def wait_preferred(self, timeout: float = 30) -> str:
        """The higher-priority node master: at start, a loaded machine may let the other one win the first
        election; the preferred one takes over after ``preempt_delay``."""
        preferred = max(NODES, key=lambda n: NODES[n]["priority"])
        deadline = time.monotonic() + timeout
        while self.master() != preferred:
            if time.monotonic() > deadline:
                raise AssertionError(f"{preferred} is not master (roles {[self.role(n) for n in NODES]})")
            time.sleep(0.05)
        return preferred

    def holds(self, name: str, address: str) -> bool:
        out = self.ns(self.nodes[name], "ip", "-o", "addr", "show").stdout
        return f" {address}/" in out

    def persistence_entries(self, name: str) -> int:
        total = 0
        for spec in persistence_specs(farms()):
            for _, set_name in spec.sets:
                out = self.ns(self.nodes[name], "nft", "-j", "list", "set", "inet", "lbweb", set_name, check=False)
                if out.returncode == 0:
                    body = json.loads(out.stdout)["nftables"][1]["set"]
                    total += len(body.get("elem", []))
        return total

    def conntrack_count(self, name: str) -> int:
        out = self.ns(self.nodes[name], "conntrack", "-C", check=False).stdout.strip()
        return int(out or 0)

    def link(self, name: str, up: bool) -> None:
        """The node's front link loses its carrier (the switch port goes down): its routes stay, as with a
        pulled cable (an administrative ``ip link set down`` in the node would flush them)."""
        self.ns(self.router, "ip", "link", "set", f"p-{name}", "up" if up else "down")

    def destroy(self) -> None:
        for key in list(self.procs):
            self.kill(key, signal.SIGKILL, group=True)
        for proc in self.servers:
            proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        self.servers.clear()
        for ns in self.namespaces:
            for pid in sh("ip", "netns", "pids", ns, check=False).stdout.split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            sh("ip", "netns", "del", ns, check=False)


# -- the proof: failovers under traffic ------------------------------------------------------------------------


class Traffic:
    """tests/support/ha_traffic.py in the client namespace: keep-alive connections and new ones, until :meth:`stop`."""

    def __init__(self, lab: HaLab, keepalive: int = 50):
        vips = ",".join(f"{k}={v}" for k, v in VIPS.items())
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", lab.client, sys.executable, str(HERE / "ha_traffic.py"), "--vips", vips,
             "--sources", ",".join(CLIENTS), "--keepalive", str(keepalive)],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.ready = json.loads(self.proc.stdout.readline())["ready"]

    def stop(self) -> dict:
        self.proc.send_signal(signal.SIGTERM)
        out, _ = self.proc.communicate(timeout=60)
        return json.loads(out)


def _transition(lab: HaLab, name: str, state: str, after: float) -> dict | None:
    for entry in lab.journal(name):
        if entry["state"] == state and entry["at"] >= after:
            return entry
    return None


def _up_at(entry: dict) -> float:
    """When the new master's floating addresses came up: by the handler, or (classic) by keepalived before it."""
    step = next((s for s in entry["steps"] if s["step"] == "addresses"), None)
    return step["ended"] if step else entry["at"]


def failover(lab: HaLab, kind: str, settle: float = 3.0) -> dict:
    """One change of master under traffic. ``kill``: SIGKILL the master's keepalived (restarted a second later,
    as its supervisor does); ``link``: the master's front link down (up again once the peer took over);
    ``failback``: the preferred node, back as backup, takes the master role again after ``preempt_delay``."""
    old = lab.wait_master()
    row = {"kind": kind, "from": old}
    if kind == "failback":
        preferred = max(NODES, key=lambda n: NODES[n]["priority"])
        assert old != preferred, "failback needs the preferred node to be backup"
        deadline = time.monotonic() + lab.preempt_delay + 30
        while time.monotonic() < deadline and lab.role(preferred) != "MASTER":
            time.sleep(0.05)
        entries = [e for e in lab.journal(preferred) if e["state"] == "MASTER"]
        entry = entries[-1]
        row["event_at"] = entry["at"]
        new = preferred
    else:
        row["event_at"] = time.time()
        if kind == "kill":
            lab.kill_keepalived(old)
        else:
            lab.link(old, up=False)
        new = lab.wait_master(timeout=30, not_=old)
        entry = _transition(lab, new, "MASTER", row["event_at"])
    row["to"] = new
    row["up_at"] = _up_at(entry)
    row["failover_s"] = round(row["up_at"] - row["event_at"], 3)
    commit = next(s for s in entry["steps"] if s["step"] == "commit")
    row["commit_before_addresses"] = commit["ended"] <= row["up_at"]
    row["steps_ok"] = all(s["ok"] for s in entry["steps"])
    row["persistence_entries"] = lab.persistence_entries(new)
    row["conntrack_entries"] = lab.conntrack_count(new)
    if kind == "kill":
        time.sleep(1)
        lab.start_keepalived(old)
    elif kind == "link":
        time.sleep(0.5)
        lab.link(old, up=True)
    time.sleep(settle)
    return row


def analyse(rows: list[dict], report: dict, ready: float) -> dict:
    """Per failover: connections lost, new-connection failures inside its window (from the event until the new
    master's addresses are up) and beyond it; persistence bindings moved."""
    windows = [(r["event_at"] - 0.2, r["up_at"] + 0.2) for r in rows]
    lost = [k for k in report["keepalive"] if k["lost_at"]]
    failures = [n for n in report["new"] if not n["ok"] and n["at"] >= ready]
    inside = [n for n in failures if any(a <= n["at"] <= b for a, b in windows)]
    for r, (a, b) in zip(rows, windows, strict=True):
        r["lost"] = sum(1 for k in lost if a <= k["lost_at"] <= b + 25)
        r["new_failed_in_window"] = sum(1 for n in inside if a <= n["at"] <= b)
    # persistence: the backend each source got from the persistence farm, before the first event and after each
    persist = [n for n in report["new"] if n["ok"] and n["farm"] == "persist"]
    first = {}
    for n in persist:
        first.setdefault(n["source"], n["backend"])
    moved = sorted({n["source"] for n in persist if n["backend"] != first[n["source"]]})
    return {
        "failovers": rows,
        "keepalive_connections": len(report["keepalive"]),
        "established_lost": len(lost),
        "lost_detail": [{"farm": k["farm"], "at": k["lost_at"], "error": k["error"]} for k in lost],
        "new_attempts": len([n for n in report["new"] if n["at"] >= ready]),
        "new_failed": len(failures),
        "new_failed_in_window": len(inside),
        "new_failed_beyond_window": len(failures) - len(inside),
        "beyond_detail": [n for n in failures if n not in inside][:20],
        "persistence_sources_moved": moved,
    }
