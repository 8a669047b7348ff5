"""Data-plane benchmark: lbweb's farms against the kernel's limit and HAProxy, side by side.

    .venv/bin/python bench/dataplane.py            # as root; the full run (~25 minutes)
    .venv/bin/python bench/dataplane.py --quick    # smoke run: 5 s per case, 3 rounds (~5 minutes)

Builds the namespace lab of tests/support/lab.py, plus one Ethernet segment for DSR (bench/topology.py), with
nginx (and, for the UDP cases, dnsmasq) on the three backends, starts lbweb in the LB namespace
(gunicorn, the real Celery worker, its own Redis and SQLite) and creates the farms through the REST
API, then runs wrk (HTTP) or dnsperf (DNS over UDP) from the client namespace against every case,
alternating cases within each round and rotating their order from round to round so that drift on
a shared machine hits every case alike. Prints a table of medians and ratios to each case's
baseline, writes a JSON file and a PNG chart, and removes every namespace and process it made, also
on failure.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import http.client
import ipaddress
import json
import os
import platform
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import compiler  # noqa: E402
from bench import measure, report, topology  # noqa: E402
from bench.appliance import Appliance  # noqa: E402
from bench.servers import DNS_NAME, nginx_starter, start_dnsmasq, start_haproxy, stop  # noqa: E402
from compiler.spec import BackendSpec, FarmSpec  # noqa: E402
from tests.support.lab import backend4, run_in_netns, vip4  # noqa: E402

APT_TOOLS = {
    "wrk": "wrk",
    "nginx": "nginx-light",
    "haproxy": "haproxy",
    "dnsperf": "dnsperf",
    "dnsmasq": "dnsmasq-base",
    "nftlb": "nftlb",  # only its rulesets are measured: the nftlb-* cases
}
REQUIREMENTS = ROOT / "bench" / "requirements.txt"
HTTP_CONNS = ("keep-alive", "close")
DATAGRAMS = "datagrams"  # the "connection kind" of the UDP cases: one query, one answer, no connection
BACKEND_NAMES = ("b1", "b2", "b3")
ROUTED_BACKENDS = tuple(backend4(b) for b in BACKEND_NAMES)
SEGMENT_BACKENDS = tuple(topology.segment_backend4(b) for b in BACKEND_NAMES)
HAPROXY_VIP = vip4(3)
STATELESS_VIP = vip4(5)
DNAT_UDP_VIP = vip4(6)
DSR_VIP = topology.dsr_vip4(1)
DNS_PORT = 53
DNS_CONTROL_PORT = 5300
MINIMAL_VIPS = {"dnat": vip4(11), "snat": vip4(12), "udp": vip4(13), "stateless": vip4(14), "dnat-100": vip4(15)}
NFTLB_VIPS = {"dnat": vip4(21), "snat": vip4(22), "udp": vip4(23)}
MANY_VIP = vip4(7)  # lbweb's farm of MANY_BACKENDS backends
# lbweb's compiled farm of each kind, loaded without the worker; "dnat-udp" is a DNAT farm of the DNS service
COMPILED_VIPS = {"dnat": vip4(31), "stlsdnat": vip4(32), "snat": vip4(33), "dnat-udp": vip4(34)}
COMPILED_UDP = ("stlsdnat", "dnat-udp")  # the compiled kinds that serve DNS over UDP
BESIDE_FILLER = ("dnat", "stlsdnat")  # the compiled farms the 10,000-farm document holds beside its filler
FILLER_FARMS = 10_000  # the other farms of the lbweb-c10k-* cases: half DNAT (TCP), half stateless (UDP)
FILLER_BASE = "198.19.0.1"  # their VIPs, then their backends: map keys only, no packet is sent to them
MANY_BACKENDS = 100
EXTRA_BACKEND_BASE = 100  # 198.18.1.100-199: secondary addresses of the backends for the 100-backend farms
HAPROXY_SOURCE = "198.18.1.2"  # HAProxy's connections to the backends; lbweb's SNAT uses 198.18.1.1
# Each SNAT ruleset has its own source address: the TIME-WAIT sockets one leaves on the backends must
# not meet the next case's connections (lbweb's SNAT uses 198.18.1.1, the LB's address).
MINIMAL_SOURCE, NFTLB_SOURCE = "198.18.1.3", "198.18.1.4"
COMPILED_SOURCE, UNCOUNTED_SNAT_SOURCE = "198.18.1.5", "198.18.1.6"  # lbweb-c1-snat's, lbweb-c1-snat-uncounted's
LB_CLIENT_SIDE = "198.18.0.1"
SETTLE = 2.0  # seconds of quiet after lbweb's worker starts or stops
CLIENT_UID = 61000  # + 10 x case + client: each client's uid, which policy routing maps to its address


@dataclass
class Case:
    """One way of putting the LB between the client and the backends.

    ``lbweb``: lbweb's worker runs and its tables are in the LB's kernel during this case (for the
    other cases the worker is stopped and its tables removed: a plain router, no conntrack).
    ``tool``: ``wrk`` (HTTP to nginx) or ``dnsperf`` (DNS over UDP to dnsmasq). ``segment``: the
    clients use the DSR segment (tests/support/lab_l2.py's addresses) instead of the routed link.
    ``prepare`` runs once before the rounds; ``available`` returns why the case cannot run, or None.
    """

    name: str
    baseline: str
    lbweb: bool
    host: str = ""  # where the clients connect: a VIP, or "" for a baseline (each client its backend)
    tool: str = "wrk"
    segment: bool = False
    conns: tuple[str, ...] = HTTP_CONNS
    prepare: Callable[[Bench], None] = lambda bench: None
    available: Callable[[Bench], str | None] = lambda bench: None
    ruleset: str = ""  # a case of another ruleset: its tables, loaded (nft -f) for each of its runs only
    ruleset_json: Path | None = None  # the same, as a libnftables JSON document (nft -j -f)
    peers: dict[str, str] = field(default_factory=dict)  # "minimal"/"nftlb" -> the case of the same farm
    lb_sysctls: dict[str, str] = field(default_factory=dict)  # set in the LB for this case's runs only
    lb_reader: tuple[str, ...] = ()  # a process run in the LB during this case's runs (its cost is in the figure)
    unavailable: str | None = field(default=None, init=False)

    def addresses(self, clients: int) -> list[str]:
        """The address each client sends to."""
        if self.host:
            return [self.host] * clients
        backends = SEGMENT_BACKENDS if self.segment else ROUTED_BACKENDS
        return [backends[i % len(backends)] for i in range(clients)]


class Bench:
    """The lab, lbweb, HAProxy and the DNS servers for one invocation."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.lab = topology.BenchLab(tag=f"lbb{os.getpid() % 100000}", backend_server=nginx_starter(workdir))
        self.appliance: Appliance | None = None
        self.haproxy: subprocess.Popen | None = None
        self.dns: list[subprocess.Popen] = []
        self.farm_ids: list[int] = []
        self.clients: dict[str, list[measure.Client]] = {}
        self.document: Path | None = None  # the compiled case's document in the LB's kernel (lbweb's table)
        self.sysctls_before: dict[str, str] = {}  # what a case's lb_sysctls replaced, put back after its run
        self.reader: subprocess.Popen | None = None  # a case's lb_reader, while its run lasts
        self.reader_reports: list[dict] = []  # what each reader printed when it was stopped

    def add_clients(self, cases: list[Case], count: int) -> None:
        """``count`` clients per case, each with its own source address: TIME-WAIT sockets one case
        leaves on the backends never meet another case's connections."""
        for c, case in enumerate(cases):
            group = []
            for i, target in enumerate(case.addresses(count)):
                uid = CLIENT_UID + 10 * c + i
                if case.segment:
                    group.append(
                        measure.Client(
                            uid,
                            f"198.18.2.{20 + 10 * c + i}",
                            target,
                            device=topology.SEGMENT_HOST_INTERFACE,
                            gateway=topology.SEGMENT_LB,
                            on_link=topology.SEGMENT_PREFIX,
                        )
                    )
                else:
                    group.append(measure.Client(uid, f"198.18.0.{10 + 10 * c + i}", target))
            self.clients[case.name] = group
        measure.add_clients(self.lab, [x for group in self.clients.values() for x in group], LB_CLIENT_SIDE)
        # wrk closes first when a proxy's FIN comes after the response (HAProxy): without reuse, one
        # client machine runs out of ports that real clients, many machines, never share.
        self.lab.ns(self.lab.client, "sysctl", "-qw", "net.ipv4.tcp_tw_reuse=1")

    def load(self, case: Case, conn: str, args: argparse.Namespace) -> measure.Load:
        return measure.Load(
            clients=self.clients[case.name],
            tool=case.tool,
            script=self.workdir / "wrk_report.lua",
            queries=self.workdir / "dns-queries.txt",
            close=conn == "close",
            duration=args.duration,
            connections=args.connections,
        )

    def start_dns(self) -> None:
        """dnsmasq on every backend (once), each answering with its backend's address: on port 53 for the
        baseline and the stateless farm, on port 5300 for the stateful control (a stateless farm knows its
        replies by backend address and port, so no other farm may share them)."""
        if self.dns:
            return
        (self.workdir / "dns-queries.txt").write_text(f"{DNS_NAME} A\n")
        for name, ns in self.lab.backends.items():
            for port in (DNS_PORT, DNS_CONTROL_PORT):
                self.dns.append(start_dnsmasq(ns, self.workdir, name, backend4(name), port))

    def ensure_lbweb(self, wanted: bool) -> None:
        """Bring the LB to the state a case needs: lbweb running with its tables, or a plain router."""
        appliance = self.appliance
        if appliance is None or appliance.running == wanted:
            return
        if wanted:
            appliance.start_worker()  # its start-up reconcile rebuilds the tables from the database
            appliance.wait_reconciled()
            for farm_id in self.farm_ids:
                appliance.api.wait_applied(farm_id)
            time.sleep(SETTLE)  # let the worker's start-up burst of CPU pass before the next run
        else:
            appliance.stop_worker()
            appliance.drop_tables()
            time.sleep(SETTLE)

    def load_ruleset(self, case: Case) -> None:
        """A ruleset case's tables go in before its run (the LB is a plain router otherwise), and its sysctls."""
        for key, value in case.lb_sysctls.items():
            self.sysctls_before[key] = self.lab.ns(self.lab.lb, "sysctl", "-n", key).stdout.strip()
            self.lab.ns(self.lab.lb, "sysctl", "-qw", f"{key}={value}")
        if case.lb_reader:
            command = ["ip", "netns", "exec", self.lab.lb, *case.lb_reader]
            self.reader = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        if case.ruleset:
            command = ["ip", "netns", "exec", self.lab.lb, "nft", "-f", "-"]
            subprocess.run(command, input=case.ruleset, text=True, check=True, capture_output=True)
        self.swap_document(case.ruleset_json)

    def swap_document(self, path: Path | None) -> None:
        """Load a compiled case's document (``nft -j -f``), unless it is the one already loaded: a document of
        10,000 farms takes the kernel a minute, so the cases that share one run in a row on one load.
        ``None``: remove what a compiled case left (before any other case runs)."""
        if path == self.document:
            return
        if self.document is not None:
            self.lab.ns(self.lab.lb, "nft", "delete", "table", "inet", "lbweb", check=False)
            self.document = None
        if path is not None:
            command = ["ip", "netns", "exec", self.lab.lb, "nft", "-j", "-f", str(path)]
            subprocess.run(command, check=True, capture_output=True)
            self.document = path

    def drop_ruleset(self, case: Case) -> None:
        if self.reader is not None:
            self.reader.terminate()
            output, _ = self.reader.communicate(timeout=30)
            self.reader_reports.append({"case": case.name, **json.loads(output or "{}")})
            print(f"  {case.name} reader: {output.strip()}", flush=True)
            self.reader = None
        for key in case.lb_sysctls:  # back to what every other case runs with
            self.lab.ns(self.lab.lb, "sysctl", "-qw", f"{key}={self.sysctls_before.pop(key)}")
        for family, name in ruleset_tables(case.ruleset):
            self.lab.ns(self.lab.lb, "nft", "delete", "table", family, name, check=False)

    def add_lb_address(self, address: str) -> None:
        """A secondary address of the LB on the backends' side (SNAT keeps 198.18.1.1 as the primary); once for
        every case that uses it (``replace``: a second case's call finds it there)."""
        self.lab.ns(self.lab.lb, "ip", "addr", "replace", f"{address}/24", "dev", "br0")

    def add_backend_addresses(self) -> None:
        """MANY_BACKENDS addresses over the three backends (nginx listens on every address): a farm of 100
        backends without 100 servers. Once, for every case that needs them."""
        if getattr(self, "_many", False):
            return
        self._many = True
        names = sorted(self.lab.backends)
        for i in range(MANY_BACKENDS):
            ns = self.lab.backends[names[i % len(names)]]
            self.lab.ns(ns, "ip", "addr", "add", f"{many_backend(i)}/32", "dev", "eth0")

    def destroy(self) -> None:
        stop(self.haproxy)
        for proc in self.dns:
            stop(proc)
        if self.appliance:
            self.appliance.stop()
        self.lab.destroy()


def lbweb_case(
    name: str,
    mode: str,
    vip: str,
    *,
    baseline: str = "baseline",
    protocol: str = "tcp",
    backends: tuple[str, ...] = ROUTED_BACKENDS,
    backend_port: int | None = None,
    tool: str = "wrk",
    segment: bool = False,
    conns: tuple[str, ...] = HTTP_CONNS,
    before: Callable[[Bench], None] = lambda bench: None,
    peers: dict[str, str] | None = None,
    **farm: str,
) -> Case:
    """A farm of lbweb in ``mode`` on ``vip`` (port 80, or 53 for DNS) over the three backends, created
    through the REST API; ``farm``: more fields of the farm (the scheduler is round robin unless given)."""

    def available(bench: Bench) -> str | None:
        if mode not in bench.appliance.api.modes():
            return f"not available: mode {mode} not implemented"
        return None

    def prepare(bench: Bench) -> None:
        before(bench)
        created = bench.appliance.api.create_farm(
            name=name,
            vip=vip,
            protocol=protocol,
            ports=str(DNS_PORT if tool == "dnsperf" else 80),
            mode=mode,
            **({"scheduler": "rr"} | farm),
            backends=[{"address": b} | ({"port": backend_port} if backend_port else {}) for b in backends],
        )
        bench.farm_ids.append(created["id"])

    return Case(
        name,
        baseline,
        lbweb=True,
        host=vip,
        tool=tool,
        segment=segment,
        conns=conns,
        prepare=prepare,
        available=available,
        peers=peers or {},
    )


def many_backend(i: int) -> str:
    return f"198.18.1.{EXTRA_BACKEND_BASE + i}"


def ruleset_tables(ruleset: str) -> list[tuple[str, str]]:
    return [tuple(line.split()[1:3]) for line in ruleset.splitlines() if line.startswith("table ")]


def _numgen_map(values: list[str]) -> str:
    return ", ".join(f"{i} : {v}" for i, v in enumerate(values))


def minimal_ruleset(kind: str, vip: str, backends: tuple[str, ...] = ROUTED_BACKENDS) -> str:
    """What one would write by hand for one farm: a DNAT in the nat hook (SNAT: a ct mark and a
    masquerade; stateless UDP: two address rewrites in the raw hook, no conntrack)."""
    if kind == "stateless":
        replies, pick = ", ".join(backends), _numgen_map(list(backends))
        return f"""table ip minimal {{
    chain raw {{
        type filter hook prerouting priority raw; policy accept;
        ip daddr {vip} udp dport {DNS_PORT} notrack ip daddr set numgen inc mod {len(backends)} map {{ {pick} }}
        ip saddr {{ {replies} }} udp sport {DNS_PORT} notrack ip saddr set {vip}
    }}
}}
"""
    if kind == "udp":
        targets = [f"{b} . {DNS_CONTROL_PORT}" for b in backends]
        match = f"ip daddr {vip} udp dport {DNS_PORT}"
        nat = f"dnat ip to numgen inc mod {len(backends)} map {{ {_numgen_map(targets)} }}"
    else:
        match = f"ip daddr {vip} tcp dport 80"
        nat = f"dnat to numgen inc mod {len(backends)} map {{ {_numgen_map(list(backends))} }}"
    mark = "ct mark set 0x1 " if kind == "snat" else ""
    postrouting = (
        f"""
    chain postrouting {{
        type nat hook postrouting priority srcnat; policy accept;
        ct mark 0x1 snat to {MINIMAL_SOURCE}
    }}"""
        if kind == "snat"
        else ""
    )
    return f"""table ip minimal {{
    chain prerouting {{
        type nat hook prerouting priority dstnat; policy accept;
        {match} {mark}{nat}
    }}{postrouting}
}}
"""


def nftlb_config(kind: str, vip: str) -> dict:
    """nftlb's own farm document for the same farm (nftlb 1.0.7's attribute names)."""
    backends = [
        {"name": f"b{i + 1}", "ip-addr": b, "state": "up"} | ({"port": str(DNS_CONTROL_PORT)} if kind == "udp" else {})
        for i, b in enumerate(ROUTED_BACKENDS)
    ]
    farm = {
        "name": f"bench{kind}",
        "family": "ipv4",
        "virtual-addr": vip,
        "virtual-ports": str(DNS_PORT if kind == "udp" else 80),
        "mode": "snat" if kind == "snat" else "dnat",
        "protocol": "udp" if kind == "udp" else "tcp",
        "scheduler": "rr",
        "state": "up",
        "backends": backends,
    } | ({"source-addr": NFTLB_SOURCE} if kind == "snat" else {})
    return {"farms": [farm]}


def nftlb_case(name: str, kind: str, **extra) -> Case:
    """nftlb 1.0.7 (Debian's package) builds the ruleset of the same farm from its own configuration, in
    the LB namespace (``nftlb -e -c``: apply, then exit); the ruleset it leaves is what the case loads
    for each run. nftlb itself is not in the packet path either way."""
    vip = NFTLB_VIPS[kind]
    case = Case(name, extra.pop("baseline", "baseline"), lbweb=False, host=vip, **extra)

    def available(bench: Bench) -> str | None:
        return None if shutil.which("nftlb") else "not available: nftlb is not installed (Debian package nftlb)"

    def prepare(bench: Bench) -> None:
        if kind == "udp":
            bench.start_dns()
        if kind == "snat":
            bench.add_lb_address(NFTLB_SOURCE)
        config = bench.workdir / f"nftlb-{kind}.json"
        config.write_text(json.dumps(nftlb_config(kind, vip)))
        lab = bench.lab
        lab.ns(lab.lb, "nftlb", "-e", "-c", str(config), "-k", "lbweb-bench")
        case.ruleset = lab.ns(lab.lb, "nft", "list", "table", "ip", "nftlb").stdout
        (bench.workdir / f"nftlb-{kind}.nft").write_text(case.ruleset)
        lab.ns(lab.lb, "nft", "delete", "table", "ip", "nftlb")
        for family in ("ip", "ip6", "netdev"):  # anything else nftlb made (it makes tables per family)
            lab.ns(lab.lb, "nft", "delete", "table", family, "nftlb", check=False)

    case.available, case.prepare = available, prepare
    return case


def minimal_case(name: str, kind: str, **extra) -> Case:
    backends = extra.pop("backends", ROUTED_BACKENDS)
    vip = MINIMAL_VIPS[kind]
    before = extra.pop("before", lambda bench: None)
    case = Case(name, extra.pop("baseline", "baseline"), lbweb=False, host=vip, **extra)
    case.ruleset = minimal_ruleset(kind.removesuffix("-100"), vip, backends)

    def prepare(bench: Bench) -> None:
        before(bench)
        if kind == "snat":
            bench.add_lb_address(MINIMAL_SOURCE)

    case.prepare = prepare
    return case


def compiled_farm(kind: str) -> FarmSpec:
    """The farm of a compiled case, as the REST API would make it (round robin over the three backends); each kind
    has ids and backend ids of its own. SNAT uses a source address of its own, as the minimal and nftlb cases do."""
    number = list(COMPILED_VIPS).index(kind)
    udp = kind in COMPILED_UDP
    port = DNS_PORT if udp else 80
    backend_port = DNS_CONTROL_PORT if kind == "dnat-udp" else None
    backends = tuple(
        BackendSpec(id=3 * number + i + 1, address=b, port=backend_port) for i, b in enumerate(ROUTED_BACKENDS)
    )
    return FarmSpec(
        id=1 + number,
        name=f"bench-{kind}",
        vip=COMPILED_VIPS[kind],
        protocol="udp" if udp else "tcp",
        ports=((port, port),),
        mode=kind.removesuffix("-udp"),
        backends=backends,
        source_addr=COMPILED_SOURCE if kind == "snat" else "",
    )


def filler_farms(count: int) -> list[FarmSpec]:
    """``count`` more farms beside a compiled case's: even ones DNAT over TCP, odd ones stateless UDP, three
    backends each, all on addresses of their own (a stateless farm knows its replies by backend address)."""
    base = ipaddress.IPv4Address(FILLER_BASE)
    farms = []
    for i in range(count):
        udp = i % 2 == 1
        backends = tuple(BackendSpec(id=3 * i + j + 10, address=str(base + count + 3 * i + j)) for j in range(3))
        port = DNS_PORT if udp else 80
        farms.append(
            FarmSpec(
                id=i + 3,
                name=f"x{i}",
                vip=str(base + i),
                protocol="udp" if udp else "tcp",
                ports=((port, port),),
                mode="stlsdnat" if udp else "dnat",
                backends=backends,
            )
        )
    return farms


def without_forward(command: dict) -> dict | None:
    """A diagnostic variant's edit: the forward hook (per-backend byte accounting) left out."""
    body = next(iter(next(iter(command.values())).values()))
    return None if isinstance(body, dict) and "forward" in (body.get("name"), body.get("chain")) else command


def forward_counter_only(command: dict) -> dict | None:
    """A diagnostic variant's edit: the forward hook's rules one anonymous counter instead of the counter-map
    lookups (one a direction), to tell the hook's own cost (entering a base chain) from the lookups'."""
    rule = command.get("add", {}).get("rule")
    if rule is None or rule["chain"] != "forward":
        return command
    if '"reply"' in json.dumps(rule["expr"]):
        return None
    return {"add": {"rule": {**rule, "expr": [{"counter": None}]}}}


def without_fib(command: dict) -> dict | None:
    """A diagnostic variant's edit: the FIB test that keeps the appliance's own conversations with a
    stateless farm's backends unrewritten, taken out of the rule that holds it (as the minimal ruleset
    does without it)."""
    rule = command.get("add", {}).get("rule")
    if rule is None or '"fib"' not in json.dumps(rule):
        return command
    return {"add": {"rule": {**rule, "expr": [e for e in rule["expr"] if '"fib"' not in json.dumps(e)]}}}


def with_counters(command: dict) -> dict | None:
    """A diagnostic variant's edit: the stateless farm with counters, inline rather than named (the farm's in
    its chain, and ``jump`` where the pick has ``goto``; a backend's in its chain where the farm has backend
    chains, which a farm of portless backends, such as the bench's, does not: its pick writes the address
    itself): what counting a stateless farm's datagrams would cost them."""
    rule = command.get("add", {}).get("rule")
    if rule is None or not rule["chain"].startswith(("farm-", "be-")):
        return command
    if rule["chain"].startswith("be-"):
        expr = [{"counter": None}, *rule["expr"]]
    else:  # the farm's chain: the counter after its notrack, and jump where the pick has goto
        notrack, *pick = rule["expr"]
        expr = json.loads(json.dumps([notrack, {"counter": None}, *pick]).replace('"goto"', '"jump"'))
    return {"add": {"rule": {**rule, "expr": expr}}}


def compiled_case(
    name: str,
    kind: str,
    filler: int,
    edit: Callable[[dict], dict | None] | None = None,
    beside_nat: bool = False,
    farm_options: dict | None = None,
    **extra,
) -> Case:
    """lbweb's compiler output for one farm of ``kind`` (``COMPILED_VIPS``), loaded with ``nft -j -f`` while the
    worker is stopped; with ``filler``, beside that many other farms (and the DNAT and stateless compiled farms,
    ``BESIDE_FILLER``: both 10,000-farm cases share one document, loaded once for both): the per-packet cost of
    lbweb's ruleset at a size the worker would take many minutes to build through the services. The document is the
    worker's full apply's (``full_document``). ``edit``: each command as a diagnostic variant has it (None: left
    out). ``beside_nat``: those two farms in the same table, as ``filler`` puts them there (a stateless farm beside
    a DNAT farm: the NAT chain makes the kernel track every packet of the namespace). ``farm_options``: the farm's
    own settings changed, as an operator would change them (``FarmSpec`` fields, the model's names)."""
    case = Case(name, extra.pop("baseline", "baseline"), lbweb=False, host=COMPILED_VIPS[kind], **extra)

    def prepare(bench: Bench) -> None:
        if kind in COMPILED_UDP:
            bench.start_dns()
        farms = [compiled_farm(k) for k in BESIDE_FILLER] if filler or beside_nat else [compiled_farm(kind)]
        farms = [replace(x, **(farm_options or {})) if x.name == f"bench-{kind}" else x for x in farms]
        for farm in farms:
            if farm.source_addr:
                bench.add_lb_address(farm.source_addr)
        path = bench.workdir / (f"compiled-{filler}.json" if filler else f"{name}.json")
        if not path.exists():
            document = compiler.full_document([*farms, *filler_farms(filler)])
            edited = document["nftables"] if edit is None else [edit(c) for c in document["nftables"]]
            document["nftables"] = [c for c in edited if c is not None]
            path.write_text(json.dumps(document))
        case.ruleset_json = path

    case.prepare = prepare
    return case


def prepare_haproxy(bench: Bench) -> None:
    lab = bench.lab
    lab.ns(lab.lb, "ip", "addr", "add", f"{HAPROXY_VIP}/32", "dev", "lo")
    lab.ns(lab.lb, "ip", "addr", "add", f"{HAPROXY_SOURCE}/24", "dev", "br0")  # secondary: SNAT keeps .1.1
    bench.haproxy = start_haproxy(lab.lb, bench.workdir, HAPROXY_VIP, 80, list(ROUTED_BACKENDS), source=HAPROXY_SOURCE)


def all_cases() -> list[Case]:
    """Every case, in table order: each baseline first, then the cases measured against it."""
    dns = {"tool": "dnsperf", "conns": (DATAGRAMS,)}
    stateless_peers = {"minimal": "minimal-stateless"}
    many = tuple(many_backend(i) for i in range(MANY_BACKENDS))
    dnat_peers = {"minimal": "minimal-dnat", "nftlb": "nftlb-dnat"}
    snat_peers = {"minimal": "minimal-snat", "nftlb": "nftlb-snat"}
    udp_peers = {"minimal": "minimal-dnat-udp", "nftlb": "nftlb-dnat-udp"}
    uncounted = {"count_bytes": False}  # the operator's switch: no per-backend byte counting

    def stateless_variant(name: str, **options) -> Case:
        """The one compiled stateless farm, changed by ``options`` (see compiled_case), against it and minimal."""
        peers = stateless_peers | {"1 farm": "lbweb-c1-stateless"}
        return compiled_case(name, "stlsdnat", 0, baseline="baseline-udp", peers=peers, **options, **dns)

    def dnat_variant(name: str, **options) -> Case:
        """The one compiled DNAT farm, changed by ``options`` (see compiled_case), against it, minimal and nftlb."""
        peers = dnat_peers | {"1 farm": "lbweb-c1-dnat"}
        return compiled_case(name, "dnat", 0, peers=peers, **options)

    def conntrack_accounting(name: str, reader: tuple[str, ...] | None = None) -> Case:
        """The DNAT farm without its forward hook, conntrack counting each flow's bytes instead; with ``reader``
        (its arguments), bench/ct_destroy_reader.py reading every destroy event in the LB meanwhile."""
        command = () if reader is None else (sys.executable, str(Path(__file__).with_name("ct_destroy_reader.py")))
        return dnat_variant(
            name,
            edit=without_forward,
            lb_sysctls={"net.netfilter.nf_conntrack_acct": "1"},
            lb_reader=(*command, *(reader or ())),
        )

    return [
        Case("baseline", "baseline", lbweb=False),
        minimal_case("minimal-dnat", "dnat"),
        nftlb_case("nftlb-dnat", "dnat"),
        lbweb_case("lbweb-dnat", "dnat", vip4(1), peers=dnat_peers),
        minimal_case("minimal-snat", "snat"),
        nftlb_case("nftlb-snat", "snat"),
        lbweb_case("lbweb-snat", "snat", vip4(2), peers=snat_peers),
        compiled_case("lbweb-c1-snat", "snat", 0, peers=snat_peers),
        compiled_case(
            "lbweb-c1-snat-uncounted",
            "snat",
            0,
            # a source address of its own: the TIME-WAIT sockets one SNAT case leaves on the backends must not meet
            # the next case's connections (the two compiled SNAT cases run one after the other)
            farm_options=uncounted | {"source_addr": UNCOUNTED_SNAT_SOURCE},
            peers=snat_peers | {"1 farm": "lbweb-c1-snat"},
        ),
        minimal_case("minimal-dnat-100", "dnat-100", backends=many, before=Bench.add_backend_addresses),
        lbweb_case(
            "lbweb-dnat-100",
            "dnat",
            MANY_VIP,
            backends=many,
            before=Bench.add_backend_addresses,
            peers={"minimal": "minimal-dnat-100", "nftlb": "nftlb-dnat"},
        ),
        compiled_case("lbweb-c1-dnat", "dnat", 0, peers=dnat_peers),
        dnat_variant("lbweb-c1-dnat-noacct", edit=without_forward),
        dnat_variant("lbweb-c1-dnat-uncounted", farm_options=uncounted),
        conntrack_accounting("lbweb-c1-dnat-ctacct"),  # the kernel's side alone: nothing reads it
        # what the collector would have to run to read that accounting: every destroy event, in Python
        conntrack_accounting("lbweb-c1-dnat-ctevents", reader=()),
        # the same events received and not parsed: what of -ctevents' cost is the kernel's
        conntrack_accounting("lbweb-c1-dnat-ctevents-recv", reader=("--count-only",)),
        dnat_variant("lbweb-c1-dnat-fwdcounter", edit=forward_counter_only),
        compiled_case(
            "lbweb-c10k-dnat",
            "dnat",
            FILLER_FARMS,
            peers=dnat_peers | {"1 farm": "lbweb-c1-dnat"},
        ),
        Case("haproxy-tcp", "baseline", lbweb=False, host=HAPROXY_VIP, prepare=prepare_haproxy),
        Case("baseline-l2", "baseline-l2", lbweb=False, segment=True),
        lbweb_case(
            "lbweb-dsr",
            "dsr",
            DSR_VIP,
            baseline="baseline-l2",
            backends=SEGMENT_BACKENDS,
            segment=True,
            interface=topology.SEGMENT_LB_INTERFACE,
            scheduler="hash",  # a TCP flow must always meet the same backend: no conntrack remembers it
            sched_param="srcip srcport",
        ),
        Case("baseline-udp", "baseline-udp", lbweb=False, prepare=Bench.start_dns, **dns),
        minimal_case("minimal-stateless", "stateless", baseline="baseline-udp", before=Bench.start_dns, **dns),
        lbweb_case(
            "lbweb-stateless",
            "stlsdnat",
            STATELESS_VIP,
            baseline="baseline-udp",
            protocol="udp",
            before=Bench.start_dns,
            peers={"minimal": "minimal-stateless"},
            **dns,
        ),
        compiled_case("lbweb-c1-stateless", "stlsdnat", 0, baseline="baseline-udp", peers=stateless_peers, **dns),
        stateless_variant("lbweb-c1-stateless-nofib", edit=without_fib),
        stateless_variant("lbweb-c1-stateless-counted", edit=with_counters),
        stateless_variant("lbweb-c1-stateless-tracked", beside_nat=True),
        compiled_case(
            "lbweb-c10k-stateless",
            "stlsdnat",
            FILLER_FARMS,
            baseline="baseline-udp",
            # like for like: half the 10,000 farms are DNAT, so this table tracks packets as -tracked does
            peers=stateless_peers | {"1 farm": "lbweb-c1-stateless-tracked"},
            **dns,
        ),
        minimal_case("minimal-dnat-udp", "udp", baseline="baseline-udp", before=Bench.start_dns, **dns),
        nftlb_case("nftlb-dnat-udp", "udp", baseline="baseline-udp", **dns),
        # A control for the stateless farm: the same UDP service through conntrack and NAT.
        lbweb_case(
            "lbweb-dnat-udp",
            "dnat",
            DNAT_UDP_VIP,
            baseline="baseline-udp",
            protocol="udp",
            backend_port=DNS_CONTROL_PORT,
            before=Bench.start_dns,
            peers=udp_peers,
            **dns,
        ),
        compiled_case("lbweb-c1-dnat-udp", "dnat-udp", 0, baseline="baseline-udp", peers=udp_peers, **dns),
        compiled_case(
            "lbweb-c1-dnat-udp-uncounted",
            "dnat-udp",
            0,
            baseline="baseline-udp",
            farm_options=uncounted,
            peers=udp_peers | {"1 farm": "lbweb-c1-dnat-udp"},
            **dns,
        ),
    ]


# -- the run ----------------------------------------------------------------------------------


def ensure_tools(install: bool) -> None:
    """wrk, nginx, HAProxy, dnsperf and dnsmasq from Debian, matplotlib from PyPI (bench/requirements.txt)."""
    missing = sorted({pkg for binary, pkg in APT_TOOLS.items() if not shutil.which(binary)})
    if missing:
        command = ["apt-get", "install", "-y", "--no-install-recommends", *missing]
        if not install:
            sys.exit(f"missing Debian packages; run: apt-get update && {' '.join(command)}")
        print(f"installing {' '.join(missing)} from Debian", flush=True)
        _apt_install(command)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        pip = [str(ROOT / ".venv" / "bin" / "pip"), "install", "-q", "-r", str(REQUIREMENTS)]
        if not install:  # the figures do not need it: the run goes on without its chart
            print(f"matplotlib is missing, no chart will be drawn; to have one, run: {' '.join(pip)}", flush=True)
            return
        subprocess.run(pip, check=True)


def _apt_install(command: list[str]) -> None:
    """apt-get install without letting the packages start their services in the host's namespace."""
    policy = Path("/usr/sbin/policy-rc.d")
    ours = not policy.exists()
    if ours:
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
    try:
        subprocess.run(["apt-get", "update", "-q"], check=True)
        subprocess.run(command, check=True, env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    finally:
        if ours:
            policy.unlink()


def dns_query(ident: int) -> bytes:
    """A DNS query (recursion desired) for an A record of :data:`DNS_NAME`."""
    name = b"".join(bytes([len(label)]) + label.encode() for label in DNS_NAME.split(".")) + b"\0"
    return struct.pack("!HHHHHH", ident, 0x0100, 1, 0, 0, 0) + name + struct.pack("!HH", 1, 1)


def dns_ask(address: str, ident: int = 0x6C62) -> tuple[bytes, tuple[str, int]]:
    """One query to ``address``:53 from the calling thread's namespace: the answer and where it came from."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(1)
        sock.sendto(dns_query(ident), (address, DNS_PORT))
        data, peer = sock.recvfrom(2048)
        return data, peer[:2]


def probe(bench: Bench, case: Case) -> None:
    """One request to each address of the case must be answered before the load starts: by nginx, or
    by dnsmasq with an answer that comes from the address the query went to (a VIP: rewritten by the LB)."""

    def get(address: str) -> bool:
        conn = http.client.HTTPConnection(address, 80, timeout=3)
        try:
            conn.request("GET", "/")
            return conn.getresponse().read().startswith(b"lbweb bench")
        finally:
            conn.close()

    def ask(address: str) -> bool:
        data, peer = dns_ask(address)
        return data[:2] == dns_query(0x6C62)[:2] and data[3] & 0x0F == 0 and peer == (address, DNS_PORT)

    check = ask if case.tool == "dnsperf" else get
    deadline = time.monotonic() + 20
    for address in sorted(set(case.addresses(len(BACKEND_NAMES)))):
        while True:
            try:
                if run_in_netns(bench.lab.client, lambda a=address: check(a)):
                    break
            except (OSError, http.client.HTTPException):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{case.name}: {address} does not answer before the run")
            time.sleep(0.2)


def machine() -> dict:
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if "model name" in line
        ),
        platform.processor(),
    )
    mem = next(
        line.split()[1] for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal")
    )

    def version(*command: str, line: str = "") -> str:
        result = subprocess.run(command, capture_output=True, text=True)
        lines = (result.stdout + result.stderr).strip().splitlines()
        return next((x.strip() for x in lines if x.startswith(line)), lines[0] if lines else "")

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    # "-dirty": the tree measured was not the commit alone (a diagnostic variant being tried, say)
    dirty = "-dirty" if git("status", "--porcelain", "--untracked-files=no") else ""
    return {
        "commit": git("rev-parse", "HEAD") + dirty,
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "kernel": platform.release(),
        "memory_gib": round(int(mem) / 1024 / 1024, 1),
        "loadavg_start": Path("/proc/loadavg").read_text().split()[:3],
        "wrk": version("wrk", "-v"),
        "nginx": version("nginx", "-v"),
        "haproxy": version("haproxy", "-v"),
        "dnsperf": version("dnsperf", "-h", line="Version"),
        "dnsmasq": version("dnsmasq", "--version"),
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run: 5 s per case, 3 rounds, short idle sample")
    parser.add_argument("--duration", type=float, help="seconds per run (default 30, --quick 5)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; each runs every case once (default 3)")
    parser.add_argument("--cases", help="comma-separated subset of: " + ", ".join(c.name for c in all_cases()))
    parser.add_argument(
        "--conns",
        default=",".join(HTTP_CONNS),
        help="HTTP cases: keep-alive, close or both (default both); the UDP cases always run (datagrams)",
    )
    parser.add_argument(
        "--clients",
        type=int,
        default=3,
        help="wrk or dnsperf processes, each with its own address (default 3; the baselines spread over the "
        "backends only with a multiple of 3)",
    )
    parser.add_argument(
        "--connections",
        type=int,
        default=48,
        help="connections (UDP: queries in flight), shared by the clients (default 48)",
    )
    parser.add_argument("--idle", type=float, help="seconds of idle CPU sampling per round (default 3, --quick 1)")
    parser.add_argument("--gap", type=float, default=1.0, help="pause between runs in seconds (default 1)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results", help="where the JSON and PNG go")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (configurations, logs)")
    parser.add_argument(
        "--lb-sysctl",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set in the LB's namespace for every case of the invocation (repeatable); say, a short TIME-WAIT "
        "(net.netfilter.nf_conntrack_tcp_timeout_time_wait=1) so that conntrack destroys connections at the "
        "rate they open within a few seconds' run, as an appliance does in its steady state",
    )
    parser.add_argument("--install-only", action="store_true", help="install what the bench needs, then exit")
    parser.add_argument("--no-install", action="store_true", help="print what is missing instead of installing it")
    args = parser.parse_args(argv)
    args.duration = args.duration or (5 if args.quick else 30)
    args.idle = args.idle if args.idle is not None else (1 if args.quick else 3)
    args.conns = [c for c in args.conns.split(",") if c]
    if set(args.conns) - set(HTTP_CONNS) or not args.conns:
        parser.error(f"--conns takes {', '.join(HTTP_CONNS)}")
    return args


def select(args: argparse.Namespace) -> list[Case]:
    cases = all_cases()
    if not args.cases:
        return cases
    wanted = args.cases.split(",")
    unknown = set(wanted) - {c.name for c in cases}
    if unknown:
        sys.exit(f"unknown case(s): {', '.join(sorted(unknown))}")
    return [c for c in cases if c.name in wanted]


def run(args: argparse.Namespace) -> dict:
    cases = select(args)
    if os.geteuid() != 0:
        sys.exit("the benchmark builds network namespaces: run it as root")
    # Under bench/results/ (ignored by git), not /tmp: nothing else on the machine cleans it up under our feet;
    # not under var/ either, lbweb's private state directory (0700), which the clients' uids cannot enter.
    (ROOT / "bench" / "results").mkdir(exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="work-", dir=ROOT / "bench" / "results"))
    workdir.chmod(0o755)  # the clients run wrk under their own uids and read its script from here
    shutil.copy(ROOT / "bench" / "wrk_report.lua", workdir / "wrk_report.lua")
    bench = Bench(workdir)
    info = machine()
    started = time.monotonic()
    runs: list[dict] = []
    try:
        bench.lab.build()
        for setting in args.lb_sysctl:
            bench.lab.ns(bench.lab.lb, "sysctl", "-qw", setting)
        if any(c.lbweb for c in cases):
            bench.appliance = Appliance(bench.lab, workdir).start()
        for case in cases:
            case.unavailable = case.available(bench)
            if case.unavailable is None:
                case.prepare(bench)
        runnable = [c for c in cases if c.unavailable is None]
        bench.add_clients(runnable, args.clients)
        # Run order: the cases without lbweb, then those with it, so that the worker starts and stops
        # at most twice a round; the order still rotates from round to round.
        running_order = sorted(runnable, key=lambda c: (c.lbweb, str(c.ruleset_json or "")))  # shared loads in a row
        for r in range(args.rounds):
            idle = measure.idle_rates(args.idle)
            order = running_order[r % len(runnable) :] + running_order[: r % len(runnable)]
            for case in order:
                if not case.lbweb:
                    bench.ensure_lbweb(False)  # first: stopping the worker removes lbweb's table, a document's too
                bench.swap_document(case.ruleset_json)
                bench.ensure_lbweb(case.lbweb)
                conns = [c for c in case.conns if c in args.conns or c not in HTTP_CONNS]
                for conn in conns if r % 2 == 0 else conns[::-1]:
                    bench.lab.ns(bench.lab.lb, "conntrack", "-F", check=False)
                    bench.load_ruleset(case)
                    time.sleep(args.gap)
                    try:
                        probe(bench, case)
                        raw = measure.run_load(bench.lab, bench.load(case, conn, args))
                    finally:
                        bench.drop_ruleset(case)
                    figures = measure.figures(raw, idle)
                    runs.append({"round": r + 1, "case": case.name, "conn": conn, "figures": figures, "raw": raw})
                    if case.tool == "dnsperf":
                        extra = f"lost {figures['lost']} of {raw['load']['sent']} sent"
                    else:
                        extra = (
                            f"SYN rtx {figures['syn_retrans']}  TIME-WAIT backends {raw['backend_tw_at_start']}"
                            f" client {raw['client_tw_at_end']}"
                        )
                    print(
                        f"[round {r + 1}/{args.rounds}] {case.name:<15} {conn:<10} {figures['req_s']:>8.0f} req/s"
                        f"  p99 {figures['p99_ms']:7.2f} ms  LB {figures['lb_us']:6.1f} us/req"
                        f" {figures['lb_packets']:5.1f} pkt/req  errors {figures['errors']}  {extra}",
                        flush=True,
                    )
        bench.swap_document(None)
    finally:
        bench.destroy()
        if args.keep:
            print(f"work directory kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    info["loadavg_end"] = Path("/proc/loadavg").read_text().split()[:3]
    case_rows = [
        {
            "name": c.name,
            "baseline": c.baseline,
            "conns": [x for x in c.conns if x in args.conns or x not in HTTP_CONNS],
        }
        | ({"unavailable": c.unavailable} if c.unavailable else {})
        | ({"peers": c.peers} if c.peers else {})
        for c in cases
    ]
    rows = report.summarise(runs, case_rows)
    return {
        "benchmark": "lbweb data plane",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "commit": info.pop("commit"),
        "machine": info,
        "settings": {
            "duration_s": args.duration,
            "rounds": args.rounds,
            "clients": args.clients,
            "connections": args.connections,
            "idle_sample_s": args.idle,
            "lb_sysctls": args.lb_sysctl,
        },
        "elapsed_s": round(time.monotonic() - started, 1),
        "lab_namespaces": bench.lab.namespaces,
        "cpu_method": measure.__doc__,
        "cases": case_rows,
        "summary": rows,
        "runs": runs,
        "readers": bench.reader_reports,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    ensure_tools(install=not args.no_install)
    if args.install_only:
        return 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # still tear the lab down
    document = run(args)
    args.out.mkdir(parents=True, exist_ok=True)
    json_path, png_path = args.out / "dataplane.json", args.out / "dataplane.png"
    report.write_json(json_path, document)
    title = (
        f"lbweb data plane, {document['machine']['nproc']} CPU {document['machine']['cpu_model']}, "
        f"{args.duration:g} s x {args.rounds} rounds, {args.clients} clients, {args.connections} connections"
    )
    with contextlib.suppress(ImportError):
        kinds = [*args.conns, *([DATAGRAMS] if any(r["conn"] == DATAGRAMS for r in document["summary"]) else [])]
        report.chart(png_path, document["summary"], kinds, title)
    print()
    print(report.table(document["summary"]))
    print()
    print(report.peer_table(document["summary"]))
    print()
    print("x base: median of the case / median of the baseline with the same connection kind (same invocation).")
    print("x minimal by round: the case's req/s over the minimal ruleset's in each round, their median and its")
    print("bootstrap 90 % interval: a goal of 0.97 is met when the interval's low end clears it.")
    print("LB us/req = softirq + CPU of the LB's processes per request;  all us/req = all busy CPU of the machine.")
    print("LB pkt/req = packets into the LB namespace per request (DSR: the client's direction only).")
    print("datagrams: dnsperf, one DNS query per request over UDP; lost = queries unanswered within 5 s.")
    print("Baselines: baseline = routed through the LB namespace as a plain router; baseline-l2 = the client")
    print("straight to the backends on the DSR segment (no LB on the path); baseline-udp = dnsperf via the router.")
    print(measure.__doc__.split("\n\n", 1)[1].strip())
    print(f"\nJSON: {json_path}\nPNG:  {png_path}\nelapsed: {document['elapsed_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
