"""Whole documents: every unit from nothing in one transaction (boot, drift repair), the order units are
sent in, and the merge of single-element commands that keeps a large document cheap for libnftables."""

from __future__ import annotations

from compiler.types import Json

from . import dsr
from . import fragments as f
from .build import compile_units
from .hooks import base_commands
from .spec import FarmSpec, PolicySpec
from .units import UnitRuleset


def document(commands: list[Json]) -> Json:
    return {"nftables": commands}


def _element_target(command: Json) -> tuple[str, tuple] | None:
    """(verb, (family, table, set)) of a command on a set, a map or its elements; None for the others."""
    ((verb, body),) = command.items()
    ((kind, obj),) = body.items()
    if kind in ("element", "set", "map") and "table" in obj:
        return (verb if kind != "element" else f"{verb} element"), (obj["family"], obj["table"], obj["name"])
    return None


def merge_elements(doc: Json) -> Json:
    """The same document with each set's 'add element' commands as one, at the place of its last.

    A farm adds its entries to the shared maps one command at a time (its unit is self-contained); a
    10,000-farm document so carries 130,000 single-element commands, and libnftables pays for each
    command (its parse, evaluation and memory: a 10,000-farm load took 63 s and 2.9 GB one way, 49 s
    and 2.6 GB merged, in one run on a loaded machine). Same transaction, same result: every chain an
    element jumps to is created before the last command that adds to its map; a set whose elements are
    also deleted or flushed in the document is left as it is."""
    commands = doc.get("nftables", [])
    last: dict[tuple, int] = {}
    other: set[tuple] = set()
    for i, command in enumerate(commands):
        target = _element_target(command)
        if target is None:
            continue
        verb, where = target
        if verb == "add element":
            last[where] = i
        elif verb != "add" and where in last:  # removed or emptied after an addition: keep the order as it is
            other.add(where)
    merged: list[Json] = []
    pending: dict[tuple, list] = {}
    for i, command in enumerate(commands):
        target = _element_target(command)
        if target is None or target[0] != "add element" or target[1] in other:
            merged.append(command)
            continue
        body = command["add"]["element"]
        pending.setdefault(target[1], []).extend(body["elem"])
        if last[target[1]] == i:
            merged.append({"add": {"element": {**body, "elem": pending.pop(target[1])}}})
    return document(merged)


_KIND_ORDER = {"hook": 0, "policy": 1, "farm": 2}


def _order_key(key: str) -> tuple[int, int, str]:
    kind, _, ident = key.partition(":")
    return (_KIND_ORDER.get(kind, 3), int(ident) if ident.isdigit() else 0, ident)


def ordered(units: dict[str, UnitRuleset]) -> list[UnitRuleset]:
    """The units in the order their creates must be sent: hooks, then policies before the farms that
    reference their sets; then by id."""
    return sorted(units.values(), key=lambda u: _order_key(u.key))


def full_document(
    farms: list[FarmSpec], policies: list[PolicySpec] | None = None, stale_tables: list[tuple[str, str]] = ()
) -> Json:
    """Everything from nothing, in one transaction: boot and drift repair.

    ``stale_tables`` are lbweb's DSR tables the kernel has and no farm wants any more.
    """
    units = compile_units(farms, policies or [])
    cmds = [f.add("table", f.table()), f.delete("table", f.table()), f.add("table", f.table())]
    wanted = {t for u in units.values() for t in dsr.tables_of(u)}
    for family, name in sorted(set(stale_tables) - wanted):
        cmds += [f.add("table", {"family": family, "name": name}), f.delete("table", {"family": family, "name": name})]
    cmds += base_commands()
    for unit in ordered(units):
        cmds += unit.creates
    return document(cmds)
