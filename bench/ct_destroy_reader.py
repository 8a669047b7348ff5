"""What reading conntrack accounting would cost the collector: a reader of conntrack's destroy events.

Why this exists: per-backend bytes could come from conntrack accounting (``nf_conntrack_acct=1``)
instead of a keyed counter map in the forward hook (issue 13). The kernel then counts each flow's bytes
at no extra lookup, but a connection that ends between two censuses is only seen in its destroy event,
so the collector would have to read every one: the kernel builds and sends a message per connection, and
a Python process parses it. ``bench/dataplane.py``'s ``lbweb-c1-dnat-ctevents`` case runs this beside the
farm so that both costs are inside the figure, as they would be on an appliance.

Run in the LB's namespace (``ip netns exec LB python3 bench/ct_destroy_reader.py``); on SIGTERM it prints
how many events it read, lost and summed, as one JSON line on stdout. ``--count-only``: receive every event
but parse none (the kernel's share of the cost, and Python's least: one receive per event). The ctnetlink
numbers and the attribute walk are lbweb's own (``dataplane.kernel``), which imports nothing beyond the standard
library.
"""

from __future__ import annotations

import json
import signal
import socket
import struct
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dataplane.kernel import conntrack as ct  # noqa: E402
from dataplane.kernel.netlink import MESSAGE_HEADER as HEADER  # noqa: E402
from dataplane.kernel.netlink import NETLINK_NETFILTER, SO_RCVBUFFORCE, attrs  # noqa: E402

NFNLGRP_CONNTRACK_DESTROY = 3
SOL_NETLINK = 270
NETLINK_ADD_MEMBERSHIP, NETLINK_BROADCAST_ERROR = 1, 4
BE32, BE64 = struct.Struct(">I"), struct.Struct(">Q")


def counters(data: bytes, start: int, end: int) -> tuple[int, int]:
    packets = octets = 0
    for kind, a, _b in attrs(data, start, end):
        if kind == ct.CTA_COUNTERS_PACKETS:
            packets = BE64.unpack_from(data, a)[0]
        elif kind == ct.CTA_COUNTERS_BYTES:
            octets = BE64.unpack_from(data, a)[0]
    return packets, octets


def main() -> int:
    count_only = "--count-only" in sys.argv[1:]
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 64 << 20)
    sock.bind((0, 0))
    sock.setsockopt(SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, NFNLGRP_CONNTRACK_DESTROY)
    # The kernel keeps an event it could not deliver and sends it again, rather than dropping it.
    sock.setsockopt(SOL_NETLINK, NETLINK_BROADCAST_ERROR, 1)
    sock.settimeout(0.2)  # a blocked receive is restarted after a signal: wake up to see the stop
    totals: dict[tuple[int, bytes], list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    events = lost = 0
    stop = False

    def finish(_signum, _frame):
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, finish)
    buffer = bytearray(1 << 16)
    view = memoryview(buffer)
    while not stop:
        try:
            size = sock.recv_into(buffer)
        except TimeoutError:
            continue
        except OSError:  # ENOBUFS: the buffer overflowed and events were lost
            lost += 1
            continue
        if count_only:
            events += 1
            continue
        data = bytes(view[:size])
        offset = 0
        while offset + HEADER.size <= size:
            length = HEADER.unpack_from(data, offset)[0]
            if length < HEADER.size:
                break
            events += 1
            mark, source, orig, reply = 0, b"", (0, 0), (0, 0)
            for kind, a, b in attrs(data, offset + HEADER.size + 4, offset + length):
                if kind == ct.CTA_MARK:
                    mark = BE32.unpack_from(data, a)[0]
                elif kind == ct.CTA_COUNTERS_ORIG:
                    orig = counters(data, a, b)
                elif kind == ct.CTA_COUNTERS_REPLY:
                    reply = counters(data, a, b)
                elif kind == ct.CTA_TUPLE_REPLY:
                    for inner, c, d in attrs(data, a, b):
                        if inner == ct.CTA_TUPLE_IP:
                            for ip_kind, e, f in attrs(data, c, d):
                                if ip_kind in (ct.CTA_IP_V4_SRC, ct.CTA_IP_V6_SRC):
                                    source = data[e:f]
            if mark:
                row = totals[(mark, source)]
                row[0] += orig[0]
                row[1] += orig[1]
                row[2] += reply[0]
                row[3] += reply[1]
            offset += (length + 3) & ~3
    summed = sum(row[1] + row[3] for row in totals.values())
    print(json.dumps({"events": events, "lost": lost, "keys": len(totals), "bytes": summed}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
