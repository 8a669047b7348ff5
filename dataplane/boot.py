"""What the worker does as it starts, before its first apply: forwarding on, the kernel's capabilities published."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from django.conf import settings

from farms.capabilities import REDIS_KEY
from lbweb.redis_client import get_redis

from .kernel import capabilities
from .kernel.sandbox import IsolatedKernel, writer

log = logging.getLogger("lbweb.dataplane")


def ensure_forwarding() -> None:
    """An LB that does not route balances nothing: turn forwarding on in this namespace."""
    if not settings.LBWEB_MANAGE_SYSCTL:
        return
    for path in ("/proc/sys/net/ipv4/ip_forward", "/proc/sys/net/ipv6/conf/all/forwarding"):
        try:
            Path(path).write_text("1\n")
        except OSError as exc:
            log.warning("cannot enable forwarding (%s): %s", path, exc)


def publish_capabilities() -> dict[str, bool]:
    """Probe the kernel (dry runs) and publish what it can do, for the API and the UI."""
    probed = capabilities.probe(IsolatedKernel())
    writer().close()  # a fresh writer for the first task (and for any process that probes without applying)
    try:
        get_redis().set(REDIS_KEY, json.dumps(probed))
    except Exception as exc:  # Redis down: the capabilities are only shown, never needed to apply
        log.warning("capabilities not published: %s", exc)
    return probed
