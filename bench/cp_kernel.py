"""What the kernel of the LB namespace holds, measured in that namespace (bench/control_plane.py).

Two tools: the long-lived kernel watcher that tells when a farm's new weights entered the
kernel, and the kernel-limit baseline that loads a compiled document with ``nft -j -f``.
"""

from __future__ import annotations

import json
import statistics
import subprocess

import compiler
import compiler.schedulers
from bench.cp_util import PYTHON, ROOT

# -- the kernel watcher ------------------------------------------------------------------
#
# "Visible in the kernel" is decided by the LB namespace's kernel itself, never by the
# database or apply_status (they say what the worker believes, not what the kernel holds).
#
# A long-lived watcher process in the LB namespace subscribes to the nf_tables netlink
# multicast group, where the kernel announces every object of every ruleset transaction
# it commits. Every change of a farm rewrites the rule of its digest chain
# (``digest-<farm>``), whose comment carries the farm's new digest: when the watcher is
# armed with the expected weights, it waits (blocked in select, costing no CPU) for the
# announcement of a rule in that chain with a digest other than the one the kernel held
# when it was armed; the time that announcement arrived is the time the change entered
# the kernel (one transaction: all of it, or nothing). It then reads back (off the clock),
# with libnftables, the farm's scheduler map and reports its interval widths, which the
# bench checks against the weights' shares.
#
# Why not poll with libnftables? A ``list chain`` builds libnftables' cache of the whole
# table: ~1 ms with one farm, ~150 ms with 1,000 farms, ~16 s with 10,000, so polling
# would both blur the figure and take a core of a 2-core VM from gunicorn and the worker.
# Should announcements be lost (socket overflow), a netlink dump of the digest chain
# alone every 0.5 s is the safety net; the figures count how many changes it had to
# catch ("read" detections). Times are CLOCK_MONOTONIC, which the watcher shares with
# this process.
WATCHER = r"""
import errno, json, select, socket, struct, sys, time

NETLINK_NETFILTER, SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, NFNLGRP_NFTABLES, SO_RCVBUFFORCE = 12, 270, 1, 7, 33
NEWRULE = (10 << 8) | 6  # NFNL_SUBSYS_NFTABLES << 8 | NFT_MSG_NEWRULE
GETRULE = (10 << 8) | 7
RULE_TABLE, RULE_CHAIN, RULE_USERDATA = 1, 2, 7  # NFTA_RULE_*
UDATA_COMMENT = 0  # NFTNL_UDATA_RULE_COMMENT
SAFETY_READ, TIMEOUT = 0.5, 60.0
FARM = sys.argv[1]
FARM_ID = int(sys.argv[2]) if len(sys.argv) > 2 else None  # its slot of the schedules maps, when known
SCHEDULES = sys.argv[3] if len(sys.argv) > 3 else ""  # and the one that holds it
CHAIN = "digest-" + FARM
sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 32 << 20)
sock.bind((0, 0))
sock.setsockopt(SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, NFNLGRP_NFTABLES)
sock.setblocking(False)


def attrs(data, start, end):
    while start + 4 <= end:
        length, kind = struct.unpack_from("=HH", data, start)
        if length < 4:
            return
        yield kind & 0x3FFF, start + 4, start + length
        start += (length + 3) & ~3


def text(data, span):
    return data[span[0] : span[1]].rstrip(b"\0").decode()


def announced_digests(data):
    # the comments of the new rules of the digest chain, in one buffer of announcements
    offset = 0
    while offset + 20 <= len(data):
        length, kind = struct.unpack_from("=IH", data, offset)
        if length < 20:
            return
        if kind == NEWRULE:
            rule = {k: (a, b) for k, a, b in attrs(data, offset + 20, offset + length)}
            if RULE_USERDATA in rule and text(data, rule.get(RULE_TABLE, (0, 0))) == "lbweb" \
                    and text(data, rule.get(RULE_CHAIN, (0, 0))) == CHAIN:
                a, b = rule[RULE_USERDATA]
                while a + 2 <= b:
                    if data[a] == UDATA_COMMENT:
                        yield data[a + 2 : a + 2 + data[a + 1]].rstrip(b"\0").decode()
                    a += 2 + data[a + 1]
        offset += (length + 3) & ~3


def drain():
    while True:
        try:
            sock.recv(1 << 20)
        except BlockingIOError:
            return
        except OSError as exc:
            if exc.errno != errno.ENOBUFS:
                raise


def deep_read():
    # [modulus, interval widths in the map's order] of the farm's scheduler, through libnftables
    import nftables

    nft = nftables.Nftables()
    nft.set_json_output(True)
    slot = None
    for name in (f"sched-{FARM}-id-w", f"sched-{FARM}-id", f"sched-{FARM}-w", f"sched-{FARM}"):
        rc, out, _err = nft.cmd(f"list map inet lbweb {name}")
        if rc == 0 and out:
            break
    else:  # a weight farm's slot of its shared map, by its id
        if not (FARM_ID and SCHEDULES):
            return None
        rc, out, _err = nft.cmd(f"list map inet lbweb {SCHEDULES}")
        if rc != 0:
            return None
        slot = FARM_ID
    elements = next(i["map"].get("elem", []) for i in json.loads(out)["nftables"] if "map" in i)
    if slot is not None:
        elements = [e for e in elements if _low(e[0]) >> 16 == slot]
    widths = []
    for key, _verdict in elements:
        if isinstance(key, dict) and "prefix" in key:  # libnftables prints an aligned range as a prefix
            widths.append(1 << (32 - key["prefix"]["len"]))  # a mark has 32 bits
        else:
            low, high = key["range"] if isinstance(key, dict) else (key, key)
            widths.append(high - low + 1)
    return [sum(widths), widths]


def _low(key):
    if isinstance(key, dict) and "prefix" in key:
        return key["prefix"]["addr"]
    return key["range"][0] if isinstance(key, dict) else key


def read():
    # the digest the kernel holds for the farm: one netlink dump of its digest chain
    payload = b"".join(struct.pack("=HH", 4 + len(v), k) + v + b"\0" * (-len(v) % 4)
                       for k, v in ((RULE_TABLE, b"lbweb\0"), (RULE_CHAIN, CHAIN.encode() + b"\0")))
    body = struct.pack("=BBH", 1, 0, 0) + payload  # NFPROTO_INET
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER) as dump:
        dump.bind((0, 0))
        dump.settimeout(10)
        dump.send(struct.pack("=IHHII", 16 + len(body), GETRULE, 0x301, 1, 0) + body)  # REQUEST | DUMP
        digests = []
        while True:
            data = dump.recv(1 << 20)
            digests += announced_digests(data)
            offset, done = 0, not data
            while offset + 16 <= len(data):
                length, kind = struct.unpack_from("=IH", data, offset)
                done = done or kind in (2, 3) or length < 16  # NLMSG_ERROR, NLMSG_DONE
                offset += max((length + 3) & ~3, 16)
            if done:
                return digests[-1] if digests else None


print(json.dumps({"ready": True, "seen": deep_read()}), flush=True)
for line in sys.stdin:
    want = json.loads(line)
    drain()  # what was announced before now is not the change to come
    before = read()
    print(json.dumps({"armed": True}), flush=True)
    found, deadline, last_read = None, time.monotonic() + TIMEOUT, time.monotonic()
    while found is None:
        ready = select.select([sock], [], [], SAFETY_READ)[0]
        now = time.monotonic()
        lost = False
        while ready:
            try:
                data = sock.recv(1 << 20)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno != errno.ENOBUFS:
                    raise
                lost = True
                continue
            if found is None and any(d != before for d in announced_digests(data)):
                found = ("event", now)
        if found is None and (lost or now - last_read >= SAFETY_READ):
            last_read = time.monotonic()
            if read() != before:
                found = ("read", last_read)
        if found is None and now > deadline:
            break
    seen = deep_read()
    if found is None:
        print(json.dumps({"timeout": True, "seen": seen, "want": want}), flush=True)
    else:
        print(json.dumps({"t": found[1], "via": found[0], "seen": seen}), flush=True)
"""


def shares_match(seen: list | None, weights: list[int]) -> bool:
    """Whether a scheduler map's widths (``[modulus, widths]``) give each backend its weight's share:
    the modulus is the total weight, or a fixed span split in proportion (to within one value)."""
    if not seen or len(seen[1]) != len(weights):
        return False
    modulus, widths = seen
    total = sum(weights)
    return all(abs(width * total - modulus * w) <= total for width, w in zip(widths, weights, strict=True))


class Watcher:
    """The long-lived kernel watcher in the LB namespace (see WATCHER), for one farm."""

    def __init__(self, netns: str, farm: str, farm_id: int | None = None):
        extra = [str(farm_id), compiler.schedulers.schedules_map_name(farm_id)] if farm_id else []
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", netns, str(PYTHON), "-c", WATCHER, farm, *extra],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        first = json.loads(self.proc.stdout.readline() or "{}")
        if not first.get("ready"):
            raise RuntimeError("the kernel watcher did not start")
        self.initial = first["seen"]  # [modulus, widths] of the farm's scheduler map as the kernel holds it
        self.weights: list[int] = []

    def arm(self, weights: list[int]) -> None:
        """Wait for these weights; returns once the watcher listens (the change may then be sent)."""
        self.weights = list(weights)
        self.proc.stdin.write(json.dumps(weights) + "\n")
        if not json.loads(self.proc.stdout.readline() or "{}").get("armed"):
            raise RuntimeError("the kernel watcher died")

    def seen_at(self) -> dict:
        answer = json.loads(self.proc.stdout.readline() or '{"timeout": true}')
        if answer.get("timeout"):
            raise RuntimeError(f"the change never reached the kernel: {answer}")
        if not shares_match(answer["seen"], self.weights):
            raise RuntimeError(f"the kernel committed a change but holds other weights: {answer}, {self.weights}")
        return answer

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


# -- the kernel limit ----------------------------------------------------------------------
#
# The baseline of a full apply: the same configuration, compiled by the same compiler into the
# worker's full document (what a resync sends), each set's elements in one command as lbweb hands
# libnftables a document (``compiler.merge_elements``: libnftables evaluates an interval set anew for
# every command that adds to it, and 10,000 weight farms put 100,000 ranges in the one schedules map),
# written to a file and loaded straight into the
# kernel of the LB namespace with ``nft -j -f``: libnftables parsing the JSON plus the kernel
# committing one transaction, with no database, no queue and no worker. lbweb's table is deleted
# first, so each load starts from an empty namespace; the document rebuilds the same table (the
# worker's digests included), so the worker carries on as before. Nothing else writes meanwhile.
KERNEL_LIMIT = r"""
import gc, json, subprocess, sys, time
import django

gc.disable()  # as the worker compiles (dataplane.applier.cyclic_gc_paused): only the load is the kernel's limit

django.setup()
from dataplane.localise import localise
from farms.specs import snapshot
import compiler
from dataplane.kernel.applier import Kernel

path, repetitions = sys.argv[1], int(sys.argv[2])
t0 = time.perf_counter()
snap = localise(snapshot())
t1 = time.perf_counter()
document = compiler.full_document(snap.specs, snap.policies, stale_tables=Kernel().dsr_tables())
document = compiler.merge_elements(document)
t2 = time.perf_counter()
with open(path, "w") as out:
    json.dump(document, out)
loads = []
for _ in range(repetitions):
    subprocess.run(["nft", "delete", "table", "inet", "lbweb"], check=True)
    started = time.perf_counter()
    result = subprocess.run(["nft", "-j", "-f", path], capture_output=True, text=True)
    loads.append(time.perf_counter() - started)
    if result.returncode != 0:
        sys.exit(f"nft -j -f failed: {result.stderr[-2000:]}")
print(json.dumps({
    "farms": len(snap.specs), "commands": len(document["nftables"]), "json_bytes": len(json.dumps(document)),
    "snapshot_s": t1 - t0, "compile_s": t2 - t1, "nft_load_s": loads,
}))
"""


def kernel_limit(netns: str, env: dict, path: str, repetitions: int) -> dict:
    """``nft -j -f`` of the full document in the LB namespace, ``repetitions`` times (see KERNEL_LIMIT)."""
    cmd = ["ip", "netns", "exec", netns, str(PYTHON), "-c", KERNEL_LIMIT, path, str(repetitions)]
    result = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=7200)
    if result.returncode != 0:
        raise RuntimeError(f"the kernel-limit load failed:\n{result.stderr[-3000:]}")
    answer = json.loads(result.stdout.strip().splitlines()[-1])
    loads = answer.pop("nft_load_s")
    answer.update(
        {
            "nft_load_s": round(statistics.median(loads), 3),
            "nft_load_runs_s": [round(x, 3) for x in loads],
            "snapshot_s": round(answer["snapshot_s"], 3),
            "compile_s": round(answer["compile_s"], 3),
            "repetitions": repetitions,
        }
    )
    return answer
