"""The only code in lbweb that talks to the kernel's nftables.

It loads Debian's libnftables through python-nftables, checks a document
with a dry run, commits it as one transaction, and reads lbweb's own table
back so the control plane can compare the kernel with the database.
"""

from __future__ import annotations

import ctypes
import json
from dataclasses import dataclass, field
from typing import Any

import nftables

from .compiler import BASE_DIGEST_PREFIX, DIGEST_PREFIX, canonical, shared_maps
from .fragments import TABLE_FAMILY, TABLE_NAME


class ApplyError(Exception):
    """libnftables refused a document; ``message`` is the kernel's/parser's own text."""

    def __init__(self, message: str, document: dict | None = None):
        super().__init__(message)
        self.message = message
        self.document = document


@dataclass
class KernelState:
    """What lbweb's table holds right now, as read back from the kernel."""

    table_present: bool = False
    base_digest: str | None = None
    farm_digests: dict[str, str] = field(default_factory=dict)  # farm chain or "netdev <table>" -> digest
    chains: set[str] = field(default_factory=set)
    sets: set[str] = field(default_factory=set)
    shared_elements: set[tuple[str, str]] = field(default_factory=set)  # (map, canonical key)

    def dispatch_size(self) -> int:
        return len(self.shared_elements)


class Kernel:
    """A libnftables context bound to the current network namespace."""

    def __init__(self) -> None:
        self._nft = nftables.Nftables()
        self._nft.set_json_output(True)
        self._nft.set_handle_output(False)
        # python-nftables from PyPI predates set_dry_run(); libnftables has it.
        self._lib = ctypes.CDLL("libnftables.so.1")
        self._lib.nft_ctx_set_dry_run.argtypes = [ctypes.c_void_p, ctypes.c_bool]

    def _set_dry_run(self, on: bool) -> None:
        self._lib.nft_ctx_set_dry_run(self._nft._Nftables__ctx, on)

    def _run(self, document: dict) -> None:
        rc, _out, err = self._nft.cmd(json.dumps(document))
        if rc != 0:
            raise ApplyError((err or f"libnftables returned {rc}").strip(), document)

    def check(self, document: dict) -> None:
        """Dry run: parse and validate against the kernel without committing."""
        self._set_dry_run(True)
        try:
            self._run(document)
        finally:
            self._set_dry_run(False)

    def apply(self, document: dict) -> None:
        """Commit the whole document as one atomic transaction, or nothing."""
        if document.get("nftables"):
            self._run(document)

    def list_table(self, family: str = TABLE_FAMILY, name: str = TABLE_NAME) -> list[dict[str, Any]] | None:
        rc, out, _err = self._nft.cmd(f"list table {family} {name}")
        if rc != 0:
            return None
        return json.loads(out)["nftables"] if out else []

    def list_set(self, name: str) -> list[Any] | None:
        """The elements of one of lbweb's sets (with their remaining timeout), or None if it is absent."""
        rc, out, _err = self._nft.cmd(f"list set {TABLE_FAMILY} {TABLE_NAME} {name}")
        if rc != 0:
            return None
        for item in json.loads(out)["nftables"]:
            if "set" in item:
                return item["set"].get("elem", [])
        return []

    def dsr_tables(self) -> list[tuple[str, str]]:
        """lbweb's netdev tables (one per DSR farm) present in the kernel."""
        rc, out, _err = self._nft.cmd("list tables")
        if rc != 0 or not out:
            return []
        tables = [i["table"] for i in json.loads(out)["nftables"] if "table" in i]
        return [(t["family"], t["name"]) for t in tables if t["family"] == "netdev" and t["name"].startswith("lbweb-")]

    def capabilities(self) -> dict[str, bool]:
        """What this kernel can do, probed with dry runs on a scratch table (nothing is committed)."""
        probes = {
            "flowtable": [{"add": {"flowtable": {"family": "inet", "table": "lbweb-probe", "name": "ft",
                                                  "hook": "ingress", "prio": 0, "dev": []}}}],
        }  # fmt: skip
        for helper, proto in (("ftp", "tcp"), ("tftp", "udp"), ("sip", "udp"), ("pptp", "tcp"), ("snmp", "udp")):
            body = {"family": "inet", "table": "lbweb-probe", "name": "h", "type": helper, "protocol": proto}
            probes[f"helper-{helper}"] = [{"add": {"ct helper": body}}]
        result = {}
        for name, commands in probes.items():
            doc = {"nftables": [{"add": {"table": {"family": "inet", "name": "lbweb-probe"}}}, *commands]}
            try:
                self.check(doc)
                result[name] = True
            except ApplyError:
                result[name] = False
        return result

    def base_digest(self) -> str | None:
        """The digest lbweb's skeleton carries, read from the kernel (None: table or chain missing)."""
        rc, out, _err = self._nft.cmd(f"list chain {TABLE_FAMILY} {TABLE_NAME} prerouting")
        if rc != 0 or not out:
            return None
        for item in json.loads(out)["nftables"]:
            comment = item.get("rule", {}).get("comment", "")
            if comment.startswith(BASE_DIGEST_PREFIX):
                return comment.removeprefix(BASE_DIGEST_PREFIX)
        return None

    def observe(self) -> KernelState:
        items = self.list_table()
        state = KernelState()
        if items is None:
            return state
        state.table_present = True
        shared = shared_maps()
        for item in items:
            if "chain" in item:
                state.chains.add(item["chain"]["name"])
            elif "set" in item:
                state.sets.add(item["set"]["name"])
            elif "map" in item and item["map"]["name"] in shared:
                for key, _verdict in item["map"].get("elem", []):
                    state.shared_elements.add((item["map"]["name"], canonical(key)))
            elif "rule" in item:
                self._read_digest(item["rule"], item["rule"]["chain"], state)
        for family, name in self.dsr_tables():
            for item in self.list_table(family, name) or []:
                if "rule" in item:
                    self._read_digest(item["rule"], f"{family} {name}", state)
        return state

    @staticmethod
    def _read_digest(rule: dict, where: str, state: KernelState) -> None:
        comment = rule.get("comment", "")
        if comment.startswith(BASE_DIGEST_PREFIX):
            state.base_digest = comment.removeprefix(BASE_DIGEST_PREFIX)
        elif comment.startswith(DIGEST_PREFIX):
            state.farm_digests[where] = comment.removeprefix(DIGEST_PREFIX)
