"""The BGP lab: a router namespace running a second, real BIRD, linked to the lab's LB namespace, and lbweb's BIRD
started in the LB namespace as its supervisor starts it (``python -m dataplane.bgp.run``, with only CAP_NET_ADMIN
and CAP_NET_BIND_SERVICE). Only 198.18.40.0/24 and 2001:2:0:40::/64 on that link; everything is removed after.

    LB  bgp0 198.18.40.1 / 2001:2:0:40::1  ----  up0 198.18.40.2 / 2001:2:0:40::2  router (AS 65001)
        lbweb's BIRD (AS 65000)
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from tests.support.lab import sh
from tests.support.stack import ROOT, VENV_BIN

NODE4, NODE6, ROUTER4, ROUTER6 = "198.18.40.1", "2001:2:0:40::1", "198.18.40.2", "2001:2:0:40::2"
NODE_AS, ROUTER_AS = 65000, 65001
PASSWORD = "lab md5 # {k}; !x"  # comment marks, braces and a semicolon: they must reach both BIRDs whole
ROUTER_CONF = """router id 198.18.40.2;
log "{log}" all;
protocol device {{ }}
protocol bfd {{ interface "*" {{ min rx interval 100 ms; min tx interval 100 ms; multiplier 3; }}; }}
# RFC 8326: a route with GRACEFUL_SHUTDOWN is the least preferred while it lasts.
filter from_lb {{ if (65535, 0) ~ bgp_community then bgp_local_pref = 0; accept; }}
protocol bgp lb4 {{
    local {router4} as {router_as}; neighbor {node4} as {node_as}; password "{password}"; bfd on; hold time 9;
    ipv4 {{ import filter from_lb; export none; }};
}}
protocol bgp lb6 {{
    local {router6} as {router_as}; neighbor {node6} as {node_as}; bfd on; hold time 9;
    ipv6 {{ import filter from_lb; export none; }};
}}
"""


class BgpLab:
    def __init__(self, lab):
        self.lab = lab
        self.netns = f"{lab.tag}-rtr"
        self.dir = Path(tempfile.mkdtemp(prefix="lbweb-bgp-lab-"))
        self.node_dir = self.dir / "node"  # LBWEB_BGP_DIR of the worker and of lbweb's BIRD
        self.node_dir.mkdir(mode=0o700)
        self.router: subprocess.Popen | None = None
        self.node: subprocess.Popen | None = None

    def build(self) -> BgpLab:
        try:
            sh("ip", "netns", "add", self.netns)
            sh("ip", "-n", self.netns, "link", "set", "lo", "up")
            sh("ip", "link", "add", "bgp0", "netns", self.lab.lb, "type", "veth", "peer", "name", "up0",
               "netns", self.netns)  # fmt: skip
            for ns, dev, v4, v6 in ((self.lab.lb, "bgp0", NODE4, NODE6), (self.netns, "up0", ROUTER4, ROUTER6)):
                sh("ip", "-n", ns, "addr", "add", f"{v4}/24", "dev", dev)
                sh("ip", "-n", ns, "-6", "addr", "add", f"{v6}/64", "dev", dev, "nodad")
                sh("ip", "-n", ns, "link", "set", dev, "up")
            conf = self.dir / "router.conf"
            conf.write_text(ROUTER_CONF.format(
                log=self.dir / "router.log", router4=ROUTER4, router6=ROUTER6, node4=NODE4, node6=NODE6,
                router_as=ROUTER_AS, node_as=NODE_AS, password=PASSWORD,
            ))  # fmt: skip
            self.router = subprocess.Popen(
                ["ip", "netns", "exec", self.netns, "/usr/sbin/bird", "-f", "-c", str(conf), "-s",
                 str(self.dir / "router.ctl")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            deadline = time.monotonic() + 10
            while not (self.dir / "router.ctl").exists():
                assert time.monotonic() < deadline, "the router's BIRD did not start"
                time.sleep(0.05)
        except BaseException:
            self.destroy()
            raise
        return self

    def start_node(self) -> subprocess.Popen:
        """lbweb's BIRD wrapper in the LB namespace, holding only the capabilities of its unit."""
        with open(self.dir / "node.log", "ab") as log:
            self.node = subprocess.Popen(
                ["ip", "netns", "exec", self.lab.lb, str(ROOT / "deploy" / "privdrop"), "root",
                 "net_admin,net_bind_service", str(VENV_BIN / "python"), "-m", "dataplane.bgp.run", "--dir",
                 str(self.node_dir)], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        return self.node

    def node_bird_pid(self) -> int | None:
        try:
            return int((self.node_dir / "bird.pid").read_text())
        except (OSError, ValueError):
            return None

    def stop_node(self) -> None:
        if self.node is not None and self.node.poll() is None:
            pid = self.node_bird_pid()
            if pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)  # a test may have frozen it
            os.killpg(self.node.pid, signal.SIGTERM)
            try:
                self.node.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.node.pid, signal.SIGKILL)
                self.node.wait(timeout=5)
        self.node = None

    def birdc(self, *words: str) -> str:
        return subprocess.run(["birdc", "-s", str(self.dir / "router.ctl"), *words], capture_output=True, text=True,
                              timeout=10, check=True).stdout  # fmt: skip

    def routes(self) -> dict[str, str]:
        """What the router learnt: {prefix: its attribute lines}."""
        found: dict[str, str] = {}
        current = None
        for line in self.birdc("show", "route", "all").splitlines():
            match = re.match(r"^([0-9a-f:.]+/\d+)\s", line)
            if match:
                current = match.group(1)
                found[current] = ""
            elif current and line.startswith(("\t", " ")):
                found[current] += line.strip() + "\n"
        return found

    def session(self, name: str) -> tuple[str, str]:
        """(state, since) of the router's session ``name`` (lb4, lb6)."""
        for line in self.birdc("show", "protocols").splitlines():
            parts = line.split()
            if parts and parts[0] == name:
                return parts[5] if len(parts) > 5 else parts[3], parts[4]
        raise AssertionError(f"no protocol {name}")

    def destroy(self) -> None:
        self.stop_node()
        if self.router is not None and self.router.poll() is None:
            self.router.terminate()
            self.router.wait(timeout=10)
        sh("ip", "netns", "del", self.netns, check=False)  # its end of the link goes, and so does bgp0
        shutil.rmtree(self.dir, ignore_errors=True)
