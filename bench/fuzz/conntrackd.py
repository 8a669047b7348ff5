"""conntrackd's plug-in: the cluster's fields that reach conntrackd.conf (the sync interface, both nodes' sync
addresses, and their VRRP addresses in its ignore list). Its verdict runs conntrackd's own parser on lbweb's file
(``conntrackd -C FILE -s``, see ``cluster.engine_check``) and checks each value is one word on its own line.

Two interfaces: the one of issue 39's brief (``FIELDS`` name -> strategy, ``clean``, ``engine_check``; run by
``bench/fuzz/run.py``), and that of the engines' fuzz runner, ``fuzz_engines`` (``NAME``, ``available``,
``values``, ``check``).
"""

from __future__ import annotations

from bench.fuzz import cluster_common
from tests.cluster_engines import CONNTRACKD_FIELDS as FIELDS

NAME = "conntrackd"
clean, engine_check, available, values, check = cluster_common.functions(NAME, FIELDS)
__all__ = ["FIELDS", "NAME", "available", "check", "clean", "engine_check", "values"]
