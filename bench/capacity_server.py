"""A service with a capacity, for bench/http_farms.py's capacity experiment (asyncio, HTTP/1.1 keep-alive).

    capacity_server.py PORT CAPACITY WORK_MS

Each request takes WORK_MS while the service holds at most CAPACITY requests; beyond that, every request it holds
slows all of them down by (held / CAPACITY) squared: the non-linear degradation of an overloaded service the seed
(l7-proxy-deterministic-sessions.txt) describes (contention for its CPU, memory, locks), as a model. ``GET /stats``
answers how many connections it accepted and how many requests it served, how many it holds now and the most it held
at once; ``GET /reset`` starts that high-water mark again from what it holds now, so one service serves every run.
"""

from __future__ import annotations

import asyncio
import json
import sys

PORT, CAPACITY, WORK_MS = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
state = {"connections": 0, "requests": 0, "held": 0, "max_held": 0}


async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    state["connections"] += 1
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            path = head.split(b" ", 2)[1]
            if path in (b"/stats", b"/reset"):
                if path == b"/reset":
                    state["max_held"] = state["held"]
                body = json.dumps(state).encode()
            else:
                state["held"] += 1
                state["max_held"] = max(state["max_held"], state["held"])
                try:
                    overload = max(1.0, state["held"] / CAPACITY) ** 2
                    await asyncio.sleep(WORK_MS / 1000 * overload)
                finally:
                    state["held"] -= 1
                state["requests"] += 1
                body = b"done\n"
            close = b"connection: close" in head.lower()
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n"
                % (len(body), b"Connection: close\r\n" if close else b"")
            )
            writer.write(body)
            await writer.drain()
            if close:
                break
    except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
        pass
    finally:
        writer.close()


async def main() -> None:
    server = await asyncio.start_server(serve, "0.0.0.0", PORT, backlog=4096)
    async with server:
        await server.serve_forever()


asyncio.run(main())
