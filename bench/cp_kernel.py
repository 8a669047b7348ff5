"""What the kernel of the LB namespace holds, measured in that namespace (bench/control_plane.py).

Two tools: the long-lived kernel watcher that tells when a farm's new weights entered the
kernel, and the kernel-limit baseline that loads a compiled document with ``nft -j -f``.
"""

from __future__ import annotations

import json
import statistics
import subprocess

from bench.cp_util import PYTHON, ROOT

# -- the kernel watcher ------------------------------------------------------------------
#
# "Visible in the kernel" is decided by the LB namespace's kernel itself, never by the
# database or apply_status (they say what the worker believes, not what the kernel holds).
#
# A long-lived watcher process in the LB namespace subscribes to the nf_tables netlink
# multicast group, where the kernel announces every object of every ruleset transaction
# it commits. When the watcher is armed with the expected weights, it waits (blocked in
# select, costing no CPU) for the announcement of a new rule in the farm's chain whose
# ``numgen random mod N`` is the new total weight; the time that announcement arrived is
# the time the rule entered the kernel. (Every change moves the total, so the modulus
# alone tells the new rule from the old.) It then reads the chain back (off the clock)
# with one netlink dump of that chain alone and checks the modulus the kernel holds.
# Started with ``deep``, it also reads the chain once with libnftables (python-nftables,
# as the worker's applier does) and reports the verdict map's interval widths.
#
# Why not poll with libnftables? A ``list chain`` builds libnftables' cache of the whole
# table: ~1 ms with one farm, ~150 ms with 1,000 farms, ~16 s with 10,000, so polling
# would both blur the figure and take a core of a 2-core VM from gunicorn and the worker.
# Should announcements be lost (socket overflow), a dump of the chain every 0.5 s is the
# safety net; the figures count how many changes it had to catch ("read" detections).
# Times are CLOCK_MONOTONIC, which the watcher shares with this process.
WATCHER = r"""
import errno, json, select, socket, struct, sys, time

NETLINK_NETFILTER, SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, NFNLGRP_NFTABLES, SO_RCVBUFFORCE = 12, 270, 1, 7, 33
NEWRULE = (10 << 8) | 6  # NFNL_SUBSYS_NFTABLES << 8 | NFT_MSG_NEWRULE
GETRULE = (10 << 8) | 7
RULE_TABLE, RULE_CHAIN, RULE_EXPRESSIONS = 1, 2, 4  # NFTA_RULE_*
EXPR_NAME, EXPR_DATA, NG_MODULUS = 1, 2, 2  # NFTA_EXPR_NAME, NFTA_EXPR_DATA, NFTA_NG_MODULUS
SAFETY_READ, TIMEOUT = 0.5, 60.0
CHAIN = sys.argv[1]
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


def announced_moduli(data):
    # numgen moduli in the new rules of our chain, in one buffer of announcements
    offset = 0
    while offset + 20 <= len(data):
        length, kind = struct.unpack_from("=IH", data, offset)
        if length < 20:
            return
        if kind == NEWRULE:
            rule = {k: (a, b) for k, a, b in attrs(data, offset + 20, offset + length)}
            if RULE_EXPRESSIONS in rule and text(data, rule.get(RULE_TABLE, (0, 0))) == "lbweb" \
                    and text(data, rule.get(RULE_CHAIN, (0, 0))) == CHAIN:
                for _k, a, b in attrs(data, *rule[RULE_EXPRESSIONS]):
                    expr = {k: (c, d) for k, c, d in attrs(data, a, b)}
                    if text(data, expr.get(EXPR_NAME, (0, 0))) == "numgen" and EXPR_DATA in expr:
                        for k, c, _d in attrs(data, *expr[EXPR_DATA]):
                            if k == NG_MODULUS:
                                yield struct.unpack_from(">I", data, c)[0]
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
    # [total weight, sorted interval widths] of the chain's numgen pick, through libnftables: the numgen
    # the ct mark is set to, and the elements of the named scheduler map the next statement looks up
    import nftables

    nft = nftables.Nftables()
    nft.set_json_output(True)
    rc, out, _err = nft.cmd(f"list chain inet lbweb {CHAIN}")
    if rc != 0 or not out:
        return None
    modulus = None
    for item in json.loads(out)["nftables"]:
        for expr in item.get("rule", {}).get("expr", []):
            value = expr.get("mangle", {}).get("value")
            if isinstance(value, dict) and "numgen" in value:
                modulus = value["numgen"]["mod"]
            vmap = expr.get("vmap")
            if modulus and vmap and isinstance(vmap.get("data"), str):
                rc, out, _err = nft.cmd(f"list map inet lbweb {vmap['data'].lstrip('@')}")
                if rc != 0:
                    return None
                elements = next(i["map"].get("elem", []) for i in json.loads(out)["nftables"] if "map" in i)
                widths = []
                for key, _verdict in elements:
                    low, high = key["range"] if isinstance(key, dict) else (key, key)
                    widths.append(high - low + 1)
                return [modulus, sorted(widths)]
    return None


def read():
    # the numgen modulus of the chain's rules as the kernel holds them: one netlink dump of that chain
    payload = b"".join(struct.pack("=HH", 4 + len(v), k) + v + b"\0" * (-len(v) % 4)
                       for k, v in ((RULE_TABLE, b"lbweb\0"), (RULE_CHAIN, CHAIN.encode() + b"\0")))
    body = struct.pack("=BBH", 1, 0, 0) + payload  # NFPROTO_INET
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER) as dump:
        dump.bind((0, 0))
        dump.settimeout(10)
        dump.send(struct.pack("=IHHII", 16 + len(body), GETRULE, 0x301, 1, 0) + body)  # REQUEST | DUMP
        moduli = []
        while True:
            data = dump.recv(1 << 20)
            moduli += announced_moduli(data)
            offset, done = 0, not data
            while offset + 16 <= len(data):
                length, kind = struct.unpack_from("=IH", data, offset)
                done = done or kind in (2, 3) or length < 16  # NLMSG_ERROR, NLMSG_DONE
                offset += max((length + 3) & ~3, 16)
            if done:
                return moduli[-1] if moduli else None


print(json.dumps({"ready": True, "seen": read(), "deep": deep_read() if "deep" in sys.argv else None}), flush=True)
for line in sys.stdin:
    want = json.loads(line)
    drain()  # what was announced before now is not the change to come
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
            if found is None and want[0] in announced_moduli(data):
                found = ("event", now)
        if found is None and (lost or now - last_read >= SAFETY_READ):
            last_read = time.monotonic()
            if read() == want[0]:
                found = ("read", last_read)
        if found is None and now > deadline:
            break
    seen = read()
    if found is None:
        print(json.dumps({"timeout": True, "seen": seen, "want": want}), flush=True)
    else:
        print(json.dumps({"t": found[1], "via": found[0], "seen": seen, "confirmed": seen == want[0]}), flush=True)
"""


class Watcher:
    """The long-lived kernel watcher in the LB namespace (see WATCHER)."""

    def __init__(self, netns: str, chain: str, deep: bool = False):
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", netns, str(PYTHON), "-c", WATCHER, chain, *(["deep"] if deep else [])],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        first = json.loads(self.proc.stdout.readline() or "{}")
        if not first.get("ready"):
            raise RuntimeError("the kernel watcher did not start")
        self.initial = first["seen"]  # the modulus (total weight) the kernel holds
        self.deep = first["deep"]  # [total weight, sorted widths] read by libnftables, when started with deep

    def arm(self, weights: list[int]) -> None:
        """Wait for these weights; returns once the watcher listens (the change may then be sent)."""
        self.proc.stdin.write(json.dumps([sum(weights), sorted(weights)]) + "\n")
        if not json.loads(self.proc.stdout.readline() or "{}").get("armed"):
            raise RuntimeError("the kernel watcher died")

    def seen_at(self) -> dict:
        answer = json.loads(self.proc.stdout.readline() or '{"timeout": true}')
        if answer.get("timeout"):
            raise RuntimeError(f"the new weights never reached the kernel: {answer}")
        if not answer["confirmed"]:
            raise RuntimeError(f"the kernel announced the new total weight but holds another: {answer}")
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
# worker's full document (what a resync sends), written to a file and loaded straight into the
# kernel of the LB namespace with ``nft -j -f``: libnftables parsing the JSON plus the kernel
# committing one transaction, with no database, no queue and no worker. lbweb's table is deleted
# first, so each load starts from an empty namespace; the document rebuilds the same table (the
# worker's digests included), so the worker carries on as before. Nothing else writes meanwhile.
KERNEL_LIMIT = r"""
import gc, json, subprocess, sys, time
import django

gc.disable()  # as the worker compiles (farms.dataplane.cyclic_gc_paused): only the load is the kernel's limit

django.setup()
from farms.dataplane import localise, snapshot
from farms.nft import compiler
from farms.kernel.applier import Kernel

path, repetitions = sys.argv[1], int(sys.argv[2])
t0 = time.perf_counter()
snap = localise(snapshot())
t1 = time.perf_counter()
document = compiler.full_document(snap.specs, snap.policies, stale_tables=Kernel().dsr_tables())
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
