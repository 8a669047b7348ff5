"""conntrackd's plug-in: the cluster's fields that reach conntrackd.conf (the sync interface, both nodes' sync
addresses, and their VRRP addresses in its ignore list). Its verdict runs conntrackd's own parser on lbweb's file
(``conntrackd -C FILE -s``, see ``cluster.engine_check``) and checks each value is one word on its own line.

Run by the engines' fuzz runner, ``bench/fuzz_engines.py``, through the interface of ``bench/fuzz/__init__.py``.
"""

from __future__ import annotations

from bench.fuzz import cluster_common
from tests.support.cluster_engines import CONNTRACKD_FIELDS as FIELDS

NAME = "conntrackd"
available, values, check = cluster_common.functions(NAME, FIELDS)
__all__ = ["FIELDS", "NAME", "available", "check", "values"]
