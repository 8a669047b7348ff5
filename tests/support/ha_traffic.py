"""Traffic for the HA lab, run in the client's namespace until SIGTERM; then a JSON report on stdout.

    ha_traffic.py --vips dnat=198.18.2.101,snat=... --sources 198.18.0.2,... [--keepalive 50]

``--keepalive`` HTTP/1.1 connections stay open, spread over the farms and the source addresses, each asking
for a page every 0.2 s; one that errs or waits more than 20 s for an answer is *lost* (and not reopened). Beside
them, one loop per farm opens new connections one after the other (3 s to connect and answer, so a SYN lost
once is retried); each attempt is recorded with its start time, outcome and the backend that answered.
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import signal
import socket
import sys
import threading
import time

STOP = threading.Event()


def _get(sock: socket.socket, close: bool) -> str:
    conn = http.client.HTTPConnection("lab")
    conn.sock = sock
    conn.request("GET", "/", headers={"Connection": "close" if close else "keep-alive"})
    return json.loads(conn.getresponse().read())["backend"]


def keepalive(farm: str, vip: str, source: str, out: list) -> None:
    record = {"farm": farm, "source": source, "requests": 0, "backends": [], "lost_at": None, "error": None}
    out.append(record)
    try:
        sock = socket.create_connection((vip, 80), timeout=5, source_address=(source, 0))
        sock.settimeout(20)
        record["opened"] = time.time()
        while not STOP.is_set():
            backend = _get(sock, close=False)
            if not record["backends"] or record["backends"][-1] != backend:
                record["backends"].append(backend)
            record["requests"] += 1
            STOP.wait(0.2)
        sock.close()
    except Exception as exc:  # reset, timeout, a wrong answer: lost
        record["lost_at"], record["error"] = time.time(), f"{type(exc).__name__}: {exc}"


def new_connections(farm: str, vip: str, sources: list[str], out: list) -> None:
    while not STOP.is_set():
        source = random.choice(sources)
        started = time.time()
        try:
            sock = socket.create_connection((vip, 80), timeout=3, source_address=(source, 0))
            sock.settimeout(3)
            backend = _get(sock, close=True)
            out.append({"farm": farm, "source": source, "at": started, "ok": True, "backend": backend})
        except Exception as exc:
            out.append({"farm": farm, "source": source, "at": started, "ok": False, "error": f"{type(exc).__name__}"})
        STOP.wait(0.05)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--vips", required=True)
    parser.add_argument("--sources", required=True)
    parser.add_argument("--keepalive", type=int, default=50)
    args = parser.parse_args()
    vips = dict(item.split("=") for item in args.vips.split(","))
    sources = args.sources.split(",")
    signal.signal(signal.SIGTERM, lambda *_: STOP.set())
    kept: list[dict] = []
    new: list[dict] = []
    farms = list(vips.items())
    threads = [
        threading.Thread(target=keepalive, args=(*farms[i % len(farms)], sources[i % len(sources)], kept))
        for i in range(args.keepalive)
    ]
    threads += [threading.Thread(target=new_connections, args=(f, v, sources, new)) for f, v in farms]
    for t in threads:
        t.start()
        time.sleep(0.01)
    print(json.dumps({"ready": time.time()}), flush=True)
    while not STOP.is_set():
        STOP.wait(0.5)
    for t in threads:
        t.join(timeout=25)
    json.dump({"keepalive": kept, "new": new}, sys.stdout)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
