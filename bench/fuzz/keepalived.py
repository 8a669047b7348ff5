"""keepalived's plug-in: the cluster's fields that reach keepalived.conf (the VRRP password, both nodes' names,
addresses and priorities, the management address, the interfaces, the virtual router id, the advert interval and
version, the preemption delay, conntrackd tracking). Its verdict runs ``keepalived -t`` on lbweb's file, then
keepalived itself, and compares its dump (``-d``) with the values given (``tests/cluster_engines.py``).

Two interfaces: the one of issue 39's brief (``FIELDS`` name -> strategy, ``clean``, ``engine_check``; run by
``bench/fuzz/run.py``), and that of the engines' fuzz runner, ``fuzz_engines`` (``NAME``, ``available``,
``values``, ``check``).
"""

from __future__ import annotations

from bench.fuzz import cluster_common
from tests.cluster_engines import KEEPALIVED_FIELDS as FIELDS

NAME = "keepalived"
clean, engine_check, available, values, check = cluster_common.functions(NAME, FIELDS)
__all__ = ["FIELDS", "NAME", "available", "check", "clean", "engine_check", "values"]
