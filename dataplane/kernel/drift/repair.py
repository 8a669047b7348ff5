"""Drift repair: what differs between a unit's record and the kernel, and the messages that remove it.

The repair of drifted units (:func:`removal_messages`) removes what the kernel holds of them, read
from the same dump as their records (``read.py``), and keeps their counters and dynamic sets when
their definitions did not change, so their state survives; the applier then adds them again as
compiled (less what is kept: :func:`without_kept`).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import TYPE_CHECKING

from compiler.fragments import TABLE_FAMILY, TABLE_NAME
from compiler.units import UnitObjects

from .. import netlink, nfmsg
from .record import OBJECT_KINDS, SKELETON, Owners, Record, element_owner

if TYPE_CHECKING:
    from .read import Reading


class CannotRepair(Exception):
    """The drift touches what only a full rebuild can restore (the skeleton's base chains or maps)."""


# -- what differs -----------------------------------------------------------------------------


def differences(expected: Record, actual: Record) -> list[str]:
    """What differs between what lbweb wrote and what the kernel holds, in words."""
    found = []
    for key in sorted(expected.keys() | actual.keys()):
        want, have = expected.get(key), actual.get(key)
        if want == have or (key.startswith("elements ") and not want and not have):
            continue
        kind, _, name = key.partition(" ")
        if kind == "rules" and want is not None and have is not None:
            found += _rule_changes(name, want, have)
        elif kind == "elements":
            want_n, have_n = list(want or ()), list(have or ())
            missing = sum(max(0, want_n.count(h) - have_n.count(h)) for h in set(want_n))
            added = sum(max(0, have_n.count(h) - want_n.count(h)) for h in set(have_n))
            parts = [f"{missing} missing"] * bool(missing) + [f"{added} added"] * bool(added)
            found.append(f"elements of {name}: {', '.join(parts)}")
        elif kind == "rules":
            continue  # the chain itself is missing or added: said once, below
        elif want is None:
            found.append(f"{kind} {name} added")
        elif have is None:
            found.append(f"{kind} {name} missing")
        else:
            found.append(f"{kind} {name} changed")
    return found


def _rule_changes(chain: str, want: list[str], have: list[str]) -> list[str]:
    found = []
    matcher = difflib.SequenceMatcher(a=want, b=have, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "delete":
            found.append(f"chain {chain}: rule {_span(i1, i2)} of {len(want)} deleted")
        elif tag == "insert":
            found.append(f"chain {chain}: {j2 - j1} rule(s) added at position {j1 + 1}")
        elif tag == "replace":
            found.append(f"chain {chain}: rule {_span(i1, i2)} of {len(want)} changed")
    return found


def _span(start: int, end: int) -> str:
    return str(start + 1) if end - start == 1 else f"{start + 1}-{end}"


# -- repair -------------------------------------------------------------------------------------


def _attr(kind: int, text: str) -> bytes:
    return netlink.attr(kind, nfmsg.string(text))


def _message(kind: int, what: str, payload: bytes, family: str = TABLE_FAMILY) -> nfmsg.Message:
    return nfmsg.Message(kind, family, 0, payload, what)


def removal_messages(
    reading: Reading,
    owners: Owners,
    rewrite: set[str],
    wanted: Mapping[str, UnitObjects],
    expected: Mapping[str, Record],
) -> tuple[list[nfmsg.Message], set[tuple[str, str]]]:
    """Messages that remove what the kernel holds of the units in ``rewrite`` (as the dump shows it,
    so a missing object is no error), and the objects kept because they are as lbweb wrote them:
    counters and dynamic sets keep their state, and a static set is emptied rather than removed.
    ``wanted`` are the units' new versions (absent: the unit goes)."""
    dump = reading.table
    table = TABLE_NAME
    out: list[nfmsg.Message] = []
    kept: set[tuple[str, str]] = set()
    repair_skeleton = SKELETON in rewrite
    actual = reading.records

    def owner(name: str, names: Mapping[str, str]) -> str | None:
        return names.get(name)

    def unchanged(key: str, entry: str) -> bool:
        want = expected.get(key, {}).get(entry)
        return want is None or want == actual.get(key, {}).get(entry)

    new_chains = {c: k for k, o in wanted.items() for c in o.chains}
    new_sets = {
        n: (k, kind) for k, o in wanted.items() for kind, n in (*o.volatile, *o.objects) if kind in ("set", "map")
    }
    new_objects = {n: (k, kind) for k, o in wanted.items() for kind, n in o.objects if kind in OBJECT_KINDS}

    # 1. elements of the shared maps that jump to a rewritten unit's chains (or that nobody owns)
    for name in sorted(owners.shared):
        gone = [
            e
            for e in dump.elements(name)
            if not nfmsg.is_interval_floor(e)
            and element_owner(e, owners) in rewrite
            and (repair_skeleton or element_owner(e, owners) != SKELETON)
        ]
        if nfmsg.is_interval(dump.sets.get(name)):  # see nfmsg.ascending
            gone = nfmsg.ascending(gone)
        payload = _attr(nfmsg.ELEM_LIST_TABLE, table) + _attr(nfmsg.ELEM_LIST_SET, name)
        for chunk in nfmsg.elements_payloads(gone, adding=False):
            out.append(_message(nfmsg.DELSETELEM, f"delete elements of map {name}", payload + chunk))

    # 2. chains: emptied; removed when no longer wanted or not as lbweb wrote them
    flushed, deleted = [], []
    for name in dump.chains:
        key = owner(name, owners.chains)
        mine = key in rewrite or name in new_chains or (key is None and repair_skeleton)
        if not mine:
            continue
        flushed.append(name)
        unit = key or SKELETON
        if unit == SKELETON and key is not None:  # a base chain
            if not unchanged(SKELETON, f"chain {name}"):
                raise CannotRepair(f"base chain {name} changed")
            continue
        if name not in new_chains or not unchanged(unit, f"chain {name}"):
            deleted.append(name)
    for name in flushed:
        payload = _attr(nfmsg.RULE_TABLE, table) + _attr(nfmsg.RULE_CHAIN, name)
        out.append(_message(nfmsg.DELRULE, f"flush chain {name}", payload))

    # 3. sets: dynamic ones and static ones kept when unchanged (static ones emptied), else removed
    for name, set_ in dump.sets.items():
        if nfmsg.is_anonymous(set_):
            continue
        key = owner(name, owners.sets)
        if key == SKELETON:
            if repair_skeleton and not unchanged(SKELETON, f"set {name}"):
                raise CannotRepair(f"map {name} changed")
            if name in owners.shared:
                kept.add(("map", name))
            continue
        if not (key in rewrite or name in new_sets or (key is None and repair_skeleton)):
            continue
        payload = _attr(nfmsg.SET_TABLE, table) + _attr(nfmsg.SET_NAME, name)
        if name in new_sets and unchanged(key or new_sets[name][0], f"set {name}"):
            kept.add((new_sets[name][1], name))
            if name not in owners.dynamic:
                out.append(_message(nfmsg.DELSETELEM, f"flush set {name}", payload))
        else:
            out.append(_message(nfmsg.DELSET, f"delete set {name}", payload))

    for name in deleted:
        payload = _attr(nfmsg.CHAIN_TABLE, table) + _attr(nfmsg.CHAIN_NAME, name)
        out.insert(len(out), _message(nfmsg.DELCHAIN, f"delete chain {name}", payload))

    # 4. counters and other named objects
    for name, (object_type, _found) in dump.objects.items():
        key = owner(name, owners.objects)
        if not (key in rewrite or name in new_objects or (key is None and repair_skeleton)):
            continue
        if name in new_objects and unchanged(key or new_objects[name][0], f"{new_objects[name][1]} {name}"):
            kept.add((new_objects[name][1], name))
            continue
        payload = _attr(nfmsg.OBJ_TABLE, table) + _attr(nfmsg.OBJ_NAME, name)
        payload += netlink.attr(nfmsg.OBJ_TYPE, object_type or nfmsg.U32.pack(nfmsg.OBJECT_TYPES["counter"]))
        out.append(_message(nfmsg.DELOBJ, f"delete object {name}", payload))

    # 5. DSR tables of units that go, and lbweb tables nobody owns (the others are re-made whole)
    for (family, name), _dump in reading.dsr_tables.items():
        key = owners.tables.get((family, name))
        if (key in rewrite and key not in wanted) or (key is None and repair_skeleton):
            out.append(_message(nfmsg.DELTABLE, f"delete table {family} {name}", _attr(nfmsg.TABLE_NAME, name), family))
    return out, kept


def without_kept(creates: list[dict], kept: set[tuple[str, str]]) -> list[dict]:
    """A unit's creates less the objects that stay in the kernel as they are."""
    out = []
    for command in creates:
        ((verb, body),) = command.items()
        ((kind, obj),) = body.items()
        if verb == "add" and kind not in ("rule", "element", "chain", "table") and (kind, obj.get("name")) in kept:
            continue
        out.append(command)
    return out
