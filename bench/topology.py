"""The benchmark's lab: the routed lab of tests/support/lab.py plus one Ethernet segment for direct server return.

One set of namespaces serves every case, so the client, the three backends' servers and lbweb in the
LB namespace are the same processes whichever path a case takes:

    routed (tests/support/lab.py)   client eth0 198.18.0.x -- cli0 [LB] br0 198.18.1.1 -- backends eth0 198.18.1.1x
    segment (DSR)           client eth1 198.18.2.x --+
                            LB     eth0 198.18.2.1 --+-- bridge br0 in the "switch" namespace
                            backends eth1 198.18.2.1x+   (lo: the DSR VIPs 198.18.102.x)

The segment is tests/support/lab_l2.py's (same addresses; the client's and backends' second interface is ``eth1``
because ``eth0`` is their routed one; the LB's is ``eth0``, the interface DSR farms name). Backends hold
the DSR VIPs on loopback with arp_ignore=1 / arp_announce=2, so only the LB answers ARP for them, and
answer the client straight over the segment. Only 198.18.0.0/15 is used, only in namespaces this lab
creates; :meth:`BenchLab.destroy` removes them all.
"""

from __future__ import annotations

from tests.support import lab_l2
from tests.support.lab import Lab, sh

SEGMENT_LB_INTERFACE = lab_l2.INTERFACE  # "eth0": DSR farms name it
SEGMENT_HOST_INTERFACE = "eth1"  # the client's and the backends' interface on the segment
SEGMENT_PREFIX = "198.18.2.0/24"
SEGMENT_LB = lab_l2.LB4  # 198.18.2.1
SEGMENT_CLIENT = lab_l2.CLIENT4  # 198.18.2.2
DSR_VIPS = f"{lab_l2.vip4(0)}/24"  # 198.18.102.0/24, routed by the client via the LB on the segment
DSR_VIP_COUNT = 3


def segment_backend4(name: str) -> str:
    return lab_l2.backend4(name)


def dsr_vip4(n: int = 1) -> str:
    return lab_l2.vip4(n)


class BenchLab(Lab):
    """tests/support/lab.py's lab, and the segment above once it is built."""

    def __init__(self, tag: str, backend_server):
        super().__init__(tag=tag, backend_server=backend_server)
        self.switch = f"{self.tag}-sw"

    @property
    def namespaces(self) -> list[str]:
        return [*super().namespaces, self.switch]

    def _build(self) -> None:
        super()._build()  # adds every namespace of :attr:`namespaces`, the switch's too
        self._build_segment()

    def _build_segment(self) -> None:
        self.ns(self.switch, "ip", "link", "add", "br0", "type", "bridge")
        self.ns(self.switch, "ip", "link", "set", "br0", "up")
        hosts = {"client": (self.client, SEGMENT_HOST_INTERFACE, SEGMENT_CLIENT)}
        hosts["lb"] = (self.lb, SEGMENT_LB_INTERFACE, SEGMENT_LB)
        hosts.update({n: (ns, SEGMENT_HOST_INTERFACE, segment_backend4(n)) for n, ns in self.backends.items()})
        for port, (ns, dev, address) in hosts.items():
            sh("ip", "link", "add", dev, "netns", ns, "type", "veth", "peer", "name", port, "netns", self.switch)
            self.ns(self.switch, "ip", "link", "set", port, "master", "br0")
            self.ns(self.switch, "ip", "link", "set", port, "up")
            self.ns(ns, "ip", "addr", "add", f"{address}/24", "dev", dev)
            self.ns(ns, "ip", "link", "set", dev, "up")
        self.ns(self.client, "ip", "route", "add", DSR_VIPS, "via", SEGMENT_LB, "dev", SEGMENT_HOST_INTERFACE)
        for ns in self.backends.values():
            for key in ("arp_ignore=1", "arp_announce=2"):
                self.ns(ns, "sysctl", "-qw", f"net.ipv4.conf.all.{key}")
            for n in range(1, DSR_VIP_COUNT + 1):
                self.ns(ns, "ip", "addr", "add", f"{dsr_vip4(n)}/32", "dev", "lo")
