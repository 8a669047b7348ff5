"""What a full rebuild carries over from the table it replaces: learnt elements and counter values.

A full rebuild (boot, drift, a skeleton that changed) deletes ``table inet lbweb`` and creates it
again in one transaction. Without this, every client bound by persistence would be balanced afresh,
SNAT would forget which backend each reused client port went to, and every counter would start from
zero. So the applier reads the kernel's table first and this module writes what it learnt into the
rebuild's own document: every set with timeouts that the new document creates with the same
definition gets its elements back with the time they had left, every counter the new document
creates starts from the value it had. Both go in with the rebuild, in the same transaction.

Not carried: rate-limit meters' elements (each holds a limiter's state, which cannot be written back)
and the connection counts of ``ct count`` (kept by conntrack per rule). Pure: JSON in, JSON out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from compiler.types import Json

from .fragments import TABLE_FAMILY, TABLE_NAME

ELEMENT_KEYS = {"val", "timeout", "expires"}  # an element with more (a limiter, a counter) holds state


def _ours(body: Json) -> bool:
    return body.get("family") == TABLE_FAMILY and body.get("table") == TABLE_NAME


def _definition(body: Json) -> tuple:
    return (body.get("type"), body.get("map"), body.get("timeout"))


def learnt_elements(body: Json, elements: list[Any]) -> list[Json]:
    """The elements of a set with timeouts as the kernel listed them, in a form 'add element' takes."""
    carried = []
    for element in elements:
        if not isinstance(element, dict) or "elem" not in element:
            continue  # no timeout of its own: not learnt from traffic
        entry = element["elem"]
        if set(entry) - ELEMENT_KEYS or not entry.get("expires"):
            continue
        carried.append({"elem": {k: entry[k] for k in ELEMENT_KEYS if k in entry}})
    return carried


def carry_over(document: Json, listing: list[Json] | None, counters: Mapping[str, tuple[int, int]]) -> tuple[Json, int]:
    """``document`` with the learnt elements of ``listing`` (``list table inet lbweb``) and the
    ``counters`` (name -> packets, bytes) written into it; and how many elements were carried."""
    kernel_sets: dict[str, Json] = {}
    for item in listing or []:
        for kind in ("set", "map"):
            if kind in item and _ours(item[kind]) and "timeout" in item[kind].get("flags", []):
                kernel_sets[item[kind]["name"]] = item[kind]
    commands: list[Json] = []
    additions: list[Json] = []
    for command in document["nftables"]:
        body = command.get("add", {})
        if "counter" in body and _ours(body["counter"]) and body["counter"]["name"] in counters:
            packets, octets = counters[body["counter"]["name"]]
            command = {"add": {"counter": {**body["counter"], "packets": packets, "bytes": octets}}}
        for kind in ("set", "map"):
            new = body.get(kind)
            if new is None or not _ours(new) or new["name"] not in kernel_sets:
                continue
            old = kernel_sets[new["name"]]
            if "timeout" in new.get("flags", []) and _definition(old) == _definition(new):
                elements = learnt_elements(new, old.get("elem", []))
                if elements:
                    additions.append({"add": {"element": {**_reference(new), "elem": elements}}})
        commands.append(command)
    carried = sum(len(a["add"]["element"]["elem"]) for a in additions)
    return {"nftables": commands + additions}, carried


def _reference(body: Json) -> Json:
    return {"family": body["family"], "table": body["table"], "name": body["name"]}
