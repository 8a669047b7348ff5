"""Is it the backend, or healthd's own network? Asked before a backend is taken down.

When the appliance itself loses its way to the backends (its interface goes
down, loses its carrier, or its route disappears), every probe fails at once.
That says nothing about the backends: marking them all down would reject
traffic that comes back the moment the link does, and bring each back only
after ``rise`` probes. The kernel knows which interface a backend is reached
through; if that interface is down or has no carrier, or there is no route at
all, the failure is healthd's own.
"""

from __future__ import annotations

import errno
import logging
import time

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

log = logging.getLogger("lbweb.healthd")
IFF_UP = 0x1
IFF_LOWER_UP = 0x10000
# The kernel's answer is kept this long per backend address: a thousand failing probes ask once each.
CACHE_SECONDS = 0.5


class OwnNetwork:
    """Asks the kernel (netlink) about the route and the link to a backend; blocking, so run it off the loop."""

    def __init__(self) -> None:
        self._ipr: IPRoute | None = None
        self._answers: dict[str, tuple[float, str | None]] = {}

    def trouble(self, address: str) -> str | None:
        """Why this appliance cannot reach ``address`` at all, or None when its own path looks fine."""
        now = time.monotonic()
        cached = self._answers.get(address)
        if cached and now - cached[0] < CACHE_SECONDS:
            return cached[1]
        try:
            answer = self._ask(address)
        except (NetlinkError, OSError) as exc:  # cannot tell: the probe's verdict stands
            log.warning("cannot ask the kernel about the path to %s: %s", address, exc)
            self.close()
            answer = None
        self._answers[address] = (now, answer)
        return answer

    def _ask(self, address: str) -> str | None:
        if self._ipr is None:
            self._ipr = IPRoute()
        try:
            route = self._ipr.route("get", dst=address)[0]
        except NetlinkError as exc:
            if exc.code in (errno.ENETUNREACH, errno.EHOSTUNREACH):
                return f"this appliance has no route to {address}"
            raise
        index = route.get_attr("RTA_OIF")
        if index is None:
            return None  # a blackhole or unreachable route answers with an error above; nothing else to judge
        link = self._ipr.link("get", index=index)[0]
        name = link.get_attr("IFLA_IFNAME")
        if not link["flags"] & IFF_UP:
            return f"this appliance's interface {name} towards {address} is down"
        if not link["flags"] & IFF_LOWER_UP:
            return f"this appliance's interface {name} towards {address} has no carrier"
        return None

    def close(self) -> None:
        if self._ipr is not None:
            self._ipr.close()
            self._ipr = None
