"""The command prober's cost: what asking lbweb-prober adds to a ``command`` check, and how it scales.

Run as root (it creates the users lbweb and lbweb-probe when missing and starts the prober as
lbweb-probe, as the supervisor does); it touches no network. It prints:

* the round trip of ``true`` through the prober beside spawning it in this process (what healthd did before);
* N ``sleep 0.5`` commands at once (N = 100, 500, 1,000): how long until every answer is in;
* a command (and a child of it) past a 0.5 s timeout: how long after the deadline the answer comes.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from healthd import prober  # noqa: E402
from tests.support.privileges import ensure_system_user, prober_socket_dir, setpriv  # noqa: E402
from tests.support.stack import VENV_BIN  # noqa: E402


async def _spawn_here() -> None:
    proc = await asyncio.create_subprocess_exec("/usr/bin/true")
    await proc.wait()


async def measure(path: str, rounds: int, crowds: list[int]) -> None:
    for name, once in [("prober", lambda: prober.ask(["true"], 2, path)), ("spawned in-process", _spawn_here)]:
        times = []
        for _ in range(rounds):
            started = time.perf_counter()
            await once()
            times.append(time.perf_counter() - started)
        times.sort()
        p95 = times[int(len(times) * 0.95) - 1]
        print(f"`true`, {name}: median {statistics.median(times) * 1000:.2f} ms, p95 {p95 * 1000:.2f} ms")
    for n in crowds:
        started = time.perf_counter()
        answers = await asyncio.gather(*(prober.ask(["sleep", "0.5"], 10, path) for _ in range(n)))
        exits = sorted({a.exit for a in answers}, key=str)
        print(f"{n} x `sleep 0.5` at once: every answer in {time.perf_counter() - started:.2f} s (exit {exits})")
    late = []
    for _ in range(10):
        started = time.perf_counter()
        answer = await prober.ask(["sh", "-c", "sleep 9 & sleep 9"], 0.5, path)
        assert answer.timed_out, answer
        late.append(time.perf_counter() - started - 0.5)
    median, worst = statistics.median(late) * 1000, max(late) * 1000
    print(f"past a 0.5 s timeout: answered {median:.1f} ms after it (max {worst:.1f} ms)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=300, help="round trips of `true` per way")
    parser.add_argument("--crowds", default="100,500,1000", help="numbers of commands at once")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root: the prober is started as the user lbweb-probe")
    ensure_system_user("lbweb")
    ensure_system_user("lbweb-probe")
    resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)  # as healthd
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    with prober_socket_dir(f"bench{os.getpid()}") as directory:
        path = directory / "prober.sock"
        cmd = [*setpriv("lbweb-probe"), str(VENV_BIN / "python"), "-m", "healthd.prober", "--socket"]
        proc = subprocess.Popen([*cmd, str(path)], cwd=ROOT, env={}, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 10
            while not path.exists():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("the prober did not start")
                time.sleep(0.02)
            asyncio.run(measure(str(path), args.rounds, [int(n) for n in args.crowds.split(",")]))
        finally:
            proc.terminate()
            proc.wait(timeout=10)


if __name__ == "__main__":
    main()
