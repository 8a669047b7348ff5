"""keepalived and conntrackd as the oracles of the cluster's fields (issue 39).

A cluster is a body of values (:data:`BASE`, the settings and both nodes of ``PUT /api/v1/cluster/``) with some
of them replaced. :func:`validation_errors` is what ``clean()`` says of it (the models' validation and the two
nodes' :func:`~cluster.models.pair_errors`, no database). For a body it accepts, an :class:`EngineLab` (a network
namespace with the interfaces the body names, and a scratch directory) asks each engine about the very files
lbweb writes from it: :meth:`EngineLab.keepalived_verdict` runs ``keepalived -t`` and then keepalived itself with
``-d`` and compares its dump with the values given (the password, the addresses, the names: meaning intact, one
instance, no other block); :meth:`EngineLab.conntrackd_verdict` runs conntrackd's parser and checks that every value
is one token on its own line (no new keyword or block).

Used by tests/cluster/test_cluster_fields.py (examples, and a bounded hypothesis run) and bench/fuzz/ (the long run).
Needs root (the namespace) and Django's settings (the models; no database).
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import ipaddress
import os
import re
import selectors
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, replace
from pathlib import Path

from django.core.exceptions import ValidationError
from hypothesis import strategies as st

from cluster.engine_check import CheckFailed, check_conntrackd, check_keepalived
from cluster.models import Cluster, Node, pair_errors
from cluster.specs import cluster_spec
from compiler.cluster import grammar, render
from compiler.cluster.spec import ClusterSpec
from tests.cluster.test_cluster_api import body as api_body
from tests.support.lab import inside_netns, run_in_netns, sh
from tests.support.lab_ha import node_links, reachable_dir

ROOT = Path(__file__).resolve().parents[2]
KEEPALIVED = "/usr/sbin/keepalived"
BASE = api_body(vrrp_version=2, advert_interval=1.0, auth_pass="s3cret")  # with a password: VRRPv2
STAMP = re.compile(r"^\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}: ")  # keepalived --log-console's prefix


def body(values: dict) -> dict:
    """BASE with ``values`` in: ``{"auth_pass": "x", "nodes[1].address": "2001:2::12"}``; a value that is itself a
    dict of such values (several fields that only make sense together, e.g. both nodes' addresses) is merged."""
    result = copy.deepcopy(BASE)
    for key, value in _flat(values).items():
        found = re.fullmatch(r"nodes\[(\d)\]\.(\w+)", key)
        if found:
            result["nodes"][int(found.group(1))][found.group(2)] = value
        else:
            result[key] = value
    return result


def _flat(values: dict) -> dict:
    flat = {}
    for key, value in values.items():
        flat.update(_flat(value) if isinstance(value, dict) else {key: value})
    return flat


def rows(values: dict) -> tuple[Cluster, Node, Node]:
    data = body(values)
    nodes = data.pop("nodes")
    return Cluster(pk=1, **data), Node(**nodes[0]), Node(**nodes[1])


def validation_errors(values: dict) -> dict | None:
    """What the models' validation refuses, keyed as the API keys it (None: accepted)."""
    cluster, first, second = rows(values)
    errors: dict = {}
    for key, obj in (("", cluster), ("nodes[0].", first), ("nodes[1].", second)):
        try:
            obj.full_clean(validate_unique=False, validate_constraints=False)
        except ValidationError as exc:
            errors.update({f"{key}{field}": messages for field, messages in exc.message_dict.items()})
        except (TypeError, ValueError) as exc:  # a value no field takes (the serializer refuses it first)
            errors[key or "__all__"] = [str(exc)]
    if errors:
        return errors
    names = {first.name: "nodes[0]", second.name: "nodes[1]"}
    for (name, field), message in pair_errors(cluster, first, second).items():
        errors[f"{names[name]}.{field}" if name else field] = [message]
    return errors or None


def interfaces(cluster: Cluster) -> list[str]:
    names = [cluster.interface, cluster.sync_interface, *cluster.track_interfaces.split()]
    return list(dict.fromkeys(names))


@dataclass(frozen=True)
class Verdict:
    """An engine's answer about lbweb's file: its refusal, or what it read other than the values given."""

    refusal: str = ""
    lost: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.refusal and not self.lost

    @property
    def message(self) -> str:
        return self.refusal or "; ".join(self.lost)


class EngineLab:
    """A namespace with the node's interfaces (more are added as a body names them) and a directory keepalived's
    user can read. ``enter``: the calling thread works inside the namespace while the lab is open; otherwise
    :meth:`run` does each piece of work in a thread that is."""

    def __init__(self, tag: str = "fields", enter: bool = True):
        self.tag, self.enter = tag, enter
        self._stack = contextlib.ExitStack()
        self._links = 0

    def __enter__(self) -> EngineLab:
        self.ns = self._stack.enter_context(node_links(self.tag))
        self.dir = self._stack.enter_context(reachable_dir(f"lbweb-{self.tag}"))
        if self.enter:
            self._stack.enter_context(inside_netns(self.ns))
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()

    def run(self, work):
        return work(self) if self.enter else run_in_netns(self.ns, lambda: work(self))

    def ensure_links(self, names: list[str]) -> None:
        """Every interface the body names exists (the service refuses a missing one before the engines see it)."""
        for name in names:
            if grammar.interface_problem(name) or _exists(name):
                continue
            peer = f"lbp{self._links}"
            while _exists(peer):
                self._links += 1
                peer = f"lbp{self._links}"
            sh("ip", "link", "add", "name", name, "type", "veth", "peer", "name", peer)  # "name": ip takes a bare
            sh("ip", "link", "set", "dev", name, "up")  # word that prefixes one of its keywords for that keyword

    def spec(self, values: dict) -> ClusterSpec:
        cluster, first, second = rows(values)
        return cluster_spec(cluster, first, second, self.dir, ROOT)

    # -- keepalived ------------------------------------------------------------------------------------

    def checked(self, name: str, generate, spec: ClusterSpec, check) -> tuple[str | None, str]:
        """lbweb's file ``name`` for ``spec`` and the engine's check of it: (its text, "") or (None, why not)."""
        try:
            text = generate(spec)
        except ValueError as exc:
            return None, f"the generator refused a value clean() accepted: {exc}"
        path = self.dir / name
        path.write_text(text)
        try:
            check(path)
        except CheckFailed as exc:
            return None, str(exc)
        return text, ""

    def keepalived_verdict(self, values: dict) -> Verdict:
        """``keepalived -t`` on lbweb's file, then keepalived's own dump of it against the values given."""
        spec = self.spec(values)
        self.ensure_links(interfaces(rows(values)[0]))
        text, refusal = self.checked("keepalived.conf", render.keepalived_conf, spec, check_keepalived)
        if text is None:
            return Verdict(refusal=refusal)
        # the same file but for the handler (lbweb's would start, with no plan here): keepalived runs it
        path = self.dir / "keepalived.conf"
        path.write_text(render.keepalived_conf(replace(spec, handler=("/usr/bin/true",))))
        differences = compare(keepalived_dump(path, self.dir), expected(spec))
        return Verdict(lost=tuple(differences))

    # -- conntrackd ------------------------------------------------------------------------------------

    def conntrackd_verdict(self, values: dict) -> Verdict:
        """conntrackd's parser on lbweb's file; each value one token on its line, as in the base file."""
        spec = self.spec(values)
        self.ensure_links([spec.sync_interface])
        text, refusal = self.checked("conntrackd.conf", render.conntrackd_conf, spec, check_conntrackd)
        if text is None:
            return Verdict(refusal=refusal)
        reference = render.conntrackd_conf(replace(self.spec({}), ignore_addresses=spec.ignore_addresses))
        family = "IPv6" if ipaddress.ip_address(spec.local.sync_address).version == 6 else "IPv4"
        wanted = [
            f"\t\t{family}_address {spec.local.sync_address}\n",
            f"\t\t{family}_Destination_Address {spec.peer.sync_address}\n",
            f"\t\tInterface {spec.sync_interface}\n",
        ]
        missing = [line.strip() for line in wanted if line not in text]
        if len(text.split()) != len(reference.split()) or text.count("\n") != reference.count("\n"):
            missing.append("not the base file's words and lines: a value became more than one word")
        for mark in "{}#":
            if text.count(mark) != reference.count(mark):
                missing.append(f"{mark!r} {text.count(mark)} times (the base file: {reference.count(mark)})")
        return Verdict(lost=tuple(missing))


def _exists(name: str) -> bool:
    try:
        socket.if_nametoindex(name)  # in this thread's namespace (/sys/class/net is the host's)
    except OSError:
        return False
    return True


def keepalived_dump(path: Path, directory: Path, timeout: float = 10) -> list[str]:
    """keepalived run on ``path`` (VRRP only, in the current namespace) until it has dumped its configuration
    (``-d``); the dump's lines, stamps removed. Its processes are ended by their ids."""
    stamp = time.monotonic_ns()
    argv = [KEEPALIVED, "--dont-fork", "--log-console", "--dump-conf", "--vrrp", "-f", str(path),
            "-p", str(directory / f"k{stamp}.pid"), "-r", str(directory / f"v{stamp}.pid")]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    lines, buffer = [], b""
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        while time.monotonic() < deadline and not any("------< Interfaces >------" in line for line in lines):
            if not selector.select(timeout=0.1):
                continue
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                break
            buffer += chunk
            *complete, buffer = buffer.split(b"\n")
            lines += [STAMP.sub("", raw.decode(errors="replace")) for raw in complete]
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # the group keepalived and its VRRP child are in (started here)
    proc.wait()
    proc.stdout.close()
    for pid in directory.glob(f"*{stamp}.pid"):
        pid.unlink(missing_ok=True)
    return lines


def expected(spec: ClusterSpec) -> dict:
    """What keepalived's dump must say of lbweb's file for ``spec``."""
    vips = [spec.management] if spec.management else []
    return {
        "Router ID": f"lbweb-{spec.local.name}",
        "VRRP Instance": "lbweb",
        "VRRP Version": str(spec.vrrp_version),
        "Interface": spec.interface,
        "Using src_ip": f"{spec.local.address} (from configuration)",
        "Virtual Router ID": str(spec.vrid),
        "Priority": str(spec.local.priority),
        "advert ms": round(spec.advert_interval * 1000),
        "Password": spec.auth_pass if spec.auth_pass and spec.vrrp_version == 2 else None,
        "Preempt delay": f"{spec.preempt_delay} secs" if spec.preempt_delay else None,
        "vips": [(ipaddress.ip_interface(v.address), v.interface) for v in vips],
        "peers": [ipaddress.ip_address(spec.peer.address)],
        "tracked": sorted(i for i in spec.track_interfaces if i != spec.interface),
        "scripts": list(spec.track_processes),
    }


def parse(lines: list[str]) -> dict:
    """The parts of keepalived's dump that say what lbweb wrote: the global and instance settings (``Key = value``,
    the value as keepalived holds it), the instance's lists (``Virtual IP (1):`` and its items), the instances and
    scripts by name."""
    found: dict = {"instances": [], "scripts": [], "lists": {}}
    section, header = "", None
    for line in lines:
        if line.startswith("------<"):
            section, header = line, None
            continue
        indent = len(line) - len(line.lstrip(" "))
        key, sep, value = line[indent:].partition(" = ")
        if "Global definitions" in section and indent == 1 and sep:
            found.setdefault(key, value)
        elif "VRRP Topology" in section:
            if indent == 1 and key == "VRRP Instance":
                found["instances"].append(value)
            elif indent == 3 and not sep and line.rstrip().endswith(":"):
                header = line.strip()
                found["lists"][header] = []
            elif indent == 3:
                header = None
                if sep:
                    found.setdefault(key, value)
            elif indent == 5 and header:
                found["lists"][header].append(line.split())
        elif "VRRP Scripts" in section and indent == 1 and key == "VRRP Script":
            found["scripts"].append(value)
    lists = found["lists"]
    vips = next((items for name, items in lists.items() if name.startswith("Virtual IP")), [])
    found["vips"] = [(ipaddress.ip_interface(w[0]), w[2] if len(w) > 2 else "") for w in vips]
    found["peers"] = [ipaddress.ip_address(w[0]) for w in lists.get("Unicast Peer :", [])]
    found["tracked"] = sorted(w[0] for w in lists.get("Tracked interfaces :", []))
    number = re.fullmatch(r"(\d+) (sec|milli-sec)", found.get("Advert interval", ""))
    found["advert ms"] = int(number.group(1)) * (1000 if number.group(2) == "sec" else 1) if number else None
    return found


def compare(lines: list[str], wanted: dict) -> list[str]:
    """Where keepalived's dump differs from what lbweb meant (an empty list: every value intact)."""
    if not any("------< VRRP Topology >------" in line for line in lines):
        return ["keepalived dumped no VRRP instance: " + " | ".join(lines[-5:])]
    found = parse(lines)
    differences = []
    if found["instances"] != ["lbweb"]:
        differences.append(f"instances {found['instances']} (one, lbweb, was written)")
    if found["scripts"] != wanted["scripts"]:
        differences.append(f"scripts {found['scripts']} (written: {wanted['scripts']})")
    for key in ("Router ID", "VRRP Version", "Interface", "Using src_ip", "Virtual Router ID", "Priority",
                "advert ms", "Password", "Preempt delay", "vips", "peers", "tracked"):  # fmt: skip
        if found.get(key) != wanted[key]:
            differences.append(f"{key}: keepalived has {found.get(key)!r}, lbweb wrote {wanted[key]!r}")
    return differences


# -- the fields and the values tried in them (hypothesis strategies) --------------------------------------------

PRINTABLE = st.characters(min_codepoint=0x20, max_codepoint=0x7E)
TRICKY = [
    "ab#cdefg", "ab!cdefg", "ab cd", "a\n}\n}\nx", 'a"b', "a\\", "a\\b", "{x}", "}", "$X", "${X}", "@x", "~SEQ(a,1,2)",
    "include /x", "a\tb", " ab", "ab ", "\u00e9t\u00e9", "beef", "on", "Off", "TCP", "Interface", "a", "lo", ".", "..",
    "eth0\n", "-x", "_x", "0eth", "x" * 16,
]  # fmt: skip


def _words(max_size: int) -> st.SearchStrategy[str]:
    """Any unicode, printable ASCII, names of the usual shape, and the values of issue 39 and its neighbours."""
    return st.one_of(
        st.text(max_size=max_size),
        st.text(PRINTABLE, max_size=max_size),
        st.from_regex(r"[A-Za-z][A-Za-z0-9._-]{0,14}", fullmatch=True),
        st.sampled_from(TRICKY),
    )


def _addresses(version: int | None = None) -> st.SearchStrategy[str]:
    ips = st.ip_addresses(v=version).map(str) if version else st.ip_addresses().map(str)
    odd = st.one_of(
        st.sampled_from(["fe80::1%eth0", "::ffff:198.18.2.11", "0.0.0.0", "::", "224.0.0.18", "127.0.0.1", "::1"]),
        st.text(max_size=40),
        ips.map(lambda ip: f"{ip}%eth0"),
    )
    return st.one_of(ips, ips, odd) if version is None else ips


@st.composite
def _vrrp_family(draw) -> dict:
    """Both nodes' VRRP addresses and the management address, one family (each node different)."""
    version = draw(st.sampled_from([4, 6]))
    first, second = draw(st.lists(_addresses(version), min_size=2, max_size=2, unique=True))
    prefix = draw(st.integers(1, 32 if version == 4 else 128))
    management = ipaddress.ip_interface(f"{draw(_addresses(version))}/{prefix}")
    return {"nodes[0].address": first, "nodes[1].address": second, "management_address": str(management)}


@st.composite
def _sync_family(draw) -> dict:
    version = draw(st.sampled_from([4, 6]))
    first, second = draw(st.lists(_addresses(version), min_size=2, max_size=2, unique=True))
    return {"nodes[0].sync_address": first, "nodes[1].sync_address": second}


@st.composite
def _advert(draw) -> dict:
    """VRRPv3 (no password) with any interval, or VRRPv2 with any interval."""
    version = draw(st.sampled_from([2, 3]))
    interval = draw(st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.integers(-1, 300).map(float),
                              st.integers(1, 4095).map(lambda c: c / 100)))  # fmt: skip
    return {"vrrp_version": version, "advert_interval": interval, "auth_pass": "s3cret" if version == 2 else ""}


KEEPALIVED_FIELDS: dict[str, st.SearchStrategy] = {
    "auth_pass": _words(12),
    "nodes[0].name": _words(70),
    "nodes[1].name": _words(70),
    "nodes[0].address": _addresses(),
    "nodes[1].address": _addresses(),
    "vrrp addresses": _vrrp_family(),
    "management_address": st.one_of(_words(40), _addresses().map(lambda a: f"{a}/24")),
    "interface": _words(20),
    "track_interfaces": st.one_of(_words(40), st.lists(_words(16), max_size=3).map(" ".join)),
    "vrid": st.integers(-1, 300),
    "nodes[0].priority": st.integers(-1, 300),
    "preempt_delay": st.integers(-1, 1100),
    "advert": _advert(),
    "track_conntrackd": st.booleans(),
}
CONNTRACKD_FIELDS: dict[str, st.SearchStrategy] = {
    "sync_interface": _words(20),
    "nodes[0].sync_address": _addresses(),
    "nodes[1].sync_address": _addresses(),
    "sync addresses": _sync_family(),
    "vrrp addresses": _vrrp_family(),  # the nodes' VRRP addresses are in conntrackd's ignore list
}


def examples(fields: dict[str, st.SearchStrategy]) -> st.SearchStrategy[dict]:
    """One field (or group of fields) of the base body replaced by a value tried in it."""
    return st.sampled_from(sorted(fields)).flatmap(lambda name: fields[name].map(lambda value: {name: value}))


_shared: EngineLab | None = None


def shared_lab() -> EngineLab:
    """One lab for a whole run (bench/fuzz/), removed when the process ends."""
    global _shared
    if _shared is None:
        _shared = EngineLab("fuzz", enter=False).__enter__()
        atexit.register(_shared.__exit__, None, None, None)
    return _shared
