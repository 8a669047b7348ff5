"""keepalived's plug-in: the cluster's fields that reach keepalived.conf (the VRRP password, both nodes' names,
addresses and priorities, the management address, the interfaces, the virtual router id, the advert interval and
version, the preemption delay, conntrackd tracking). Its verdict runs ``keepalived -t`` on lbweb's file, then
keepalived itself, and compares its dump (``-d``) with the values given (``tests/support/cluster_engines.py``).

Run by the engines' fuzz runner, ``bench/fuzz_engines.py``, through the interface of ``bench/fuzz/__init__.py``.
"""

from __future__ import annotations

from bench.fuzz import cluster_common
from tests.support.cluster_engines import KEEPALIVED_FIELDS as FIELDS

NAME = "keepalived"
available, values, check = cluster_common.functions(NAME, FIELDS)
__all__ = ["FIELDS", "NAME", "available", "check", "values"]
