"""The fake kernel's nf_tables: a table in dicts, and the commands of a libnftables document run on it.

Each command is checked as the kernel checks it in the ways the Applier meets (a rule in a missing chain
or naming a missing set, chain or counter, a delete of something absent, a chain deleted while it still
has rules or something jumps to it, a set or chain redefined) and refused with the kernel's words.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from compiler import canonical

from ..interface import Json

OBJECT_KINDS = ("counter", "quota", "ct helper", "limit", "flowtable")
SET_KINDS = ("set", "map")
STATE = {"packets", "bytes", "elem", "handle"}  # what is not a definition
WHERE = {"family", "table", "handle"}  # what is not a rule's body
NOENT = "Error: Could not process rule: No such file or directory"
BUSY = "Error: Could not process rule: Device or resource busy"
EXISTS = "Error: Could not process rule: File exists"
NOT_SUPPORTED = "Error: Could not process rule: Operation not supported"


def definition_of(body: Json) -> Json:
    return {k: v for k, v in body.items() if k not in STATE | WHERE}


def element_key(element: Any) -> str:
    """The key of one element as a document gives it: a value, a [key, data] pair, or {"elem": {"val"...}}."""
    if isinstance(element, dict) and "elem" in element:
        element = element["elem"].get("val")
    if isinstance(element, list) and len(element) == 2:
        element = element[0]
    return canonical(element)


def collect_references(value: Any, found: dict[str, set[str]]) -> dict[str, set[str]]:
    """The chains (jump, goto), sets ("@name") and counters ({"counter": "name"}) a rule or element names."""
    if isinstance(value, str) and value.startswith("@"):
        found["set"].add(value[1:])
    elif isinstance(value, list):
        for item in value:
            collect_references(item, found)
    elif isinstance(value, dict):
        for key, item in value.items():
            if key in ("jump", "goto") and isinstance(item, dict) and "target" in item:
                found["chain"].add(item["target"])
            elif key == "counter" and isinstance(item, str):
                found["counter"].add(item)
            else:
                collect_references(item, found)
    return found


def references(value: Any) -> dict[str, set[str]]:
    return collect_references(value, {"chain": set(), "set": set(), "counter": set()})


@dataclass
class Table:
    chains: dict[str, Json] = field(default_factory=dict)  # name -> definition
    rules: dict[str, list[Json]] = field(default_factory=dict)  # chain -> rule bodies, in order
    sets: dict[str, Json] = field(default_factory=dict)  # name -> definition (with "kind": set or map)
    elements: dict[str, dict[str, Any]] = field(default_factory=dict)  # set -> key -> element as written
    objects: dict[tuple[str, str], Json] = field(default_factory=dict)  # (kind, name) -> body

    def uses(self) -> dict[str, set[str]]:
        """What every rule and map element of this table names."""
        found = {"chain": set(), "set": set(), "counter": set()}
        for rules in self.rules.values():
            for rule in rules:
                collect_references(rule.get("expr"), found)
        for elements in self.elements.values():
            for element in elements.values():
                if isinstance(element, list):
                    collect_references(element[1], found)
        return found


class Refused(Exception):
    def __init__(self, message: str):
        self.message = message


def words(command: Json) -> str:
    ((verb, body),) = command.items()
    ((kind, obj),) = body.items()
    return f"{verb} {kind} {obj.get('family', '')} {obj.get('table', '')} {obj.get('name', obj.get('chain', ''))}"


def execute(tables: dict[tuple[str, str], Table], verb: str, kind: str, obj: Json) -> None:
    if kind == "table":
        where = (obj["family"], obj["name"])
        if verb in ("add", "create"):
            if verb == "create" and where in tables:
                raise Refused(EXISTS)
            tables.setdefault(where, Table())
        elif verb in ("delete", "destroy"):
            if where not in tables and verb == "delete":
                raise Refused(NOENT)
            tables.pop(where, None)
        elif verb == "flush" and where in tables:
            table = tables[where]
            table.rules = {c: [] for c in table.rules}
            table.elements = {s: {} for s in table.elements}
        return
    table = tables.get((obj["family"], obj["table"]))
    if table is None:
        raise Refused(NOENT)
    if kind == "chain":
        _chain(table, verb, obj)
    elif kind == "rule":
        _rule(table, verb, obj)
    elif kind in SET_KINDS:
        _set(table, verb, kind, obj)
    elif kind == "element":
        _element(table, verb, obj)
    elif kind in OBJECT_KINDS:
        _object(table, verb, kind, obj)
    else:
        raise Refused(f"Error: the fake kernel does not know '{verb} {kind}'")


def _chain(table: Table, verb: str, obj: Json) -> None:
    name, definition = obj["name"], definition_of({k: v for k, v in obj.items() if k != "name"})
    if verb in ("add", "create"):
        if name in table.chains and (verb == "create" or table.chains[name] != definition):
            raise Refused(EXISTS)
        table.chains.setdefault(name, definition)
        table.rules.setdefault(name, [])
    elif verb == "flush":
        if name not in table.chains:
            raise Refused(NOENT)
        table.rules[name] = []
    elif verb in ("delete", "destroy"):
        if name not in table.chains:
            if verb == "delete":
                raise Refused(NOENT)
            return
        if table.rules[name] or name in table.uses()["chain"]:
            raise Refused(BUSY)
        del table.chains[name], table.rules[name]


def _rule(table: Table, verb: str, obj: Json) -> None:
    chain = obj["chain"]
    if chain not in table.chains:
        raise Refused(NOENT)
    if verb not in ("add", "insert"):
        raise Refused(f"Error: the fake kernel does not know '{verb} rule'")
    named = references(obj.get("expr"))
    if not named["chain"] <= table.chains.keys() or not named["set"] <= table.sets.keys():
        raise Refused(NOENT)
    if not named["counter"] <= {n for k, n in table.objects if k == "counter"}:
        raise Refused(NOENT)
    body = {k: v for k, v in obj.items() if k not in WHERE | {"chain"}}
    if verb == "insert":
        table.rules[chain].insert(0, body)
    else:
        table.rules[chain].append(body)


def _set(table: Table, verb: str, kind: str, obj: Json) -> None:
    name = obj["name"]
    if verb in ("add", "create"):
        definition = {"kind": kind, **definition_of({k: v for k, v in obj.items() if k != "name"})}
        if name in table.sets and (verb == "create" or table.sets[name] != definition):
            raise Refused(EXISTS)
        table.sets.setdefault(name, definition)
        elements = table.elements.setdefault(name, {})
        for element in obj.get("elem", []):
            elements[element_key(element)] = element
    elif verb == "flush":
        if name not in table.sets:
            raise Refused(NOENT)
        table.elements[name] = {}
    elif verb in ("delete", "destroy"):
        if name not in table.sets:
            if verb == "delete":
                raise Refused(NOENT)
            return
        if name in table.uses()["set"]:
            raise Refused(BUSY)
        del table.sets[name], table.elements[name]


def _element(table: Table, verb: str, obj: Json) -> None:
    name = obj["name"]
    if name not in table.sets:
        raise Refused(NOENT)
    elements = table.elements[name]
    for element in obj.get("elem", []):
        key = element_key(element)
        if verb in ("add", "create"):
            if verb == "create" and key in elements:
                raise Refused(EXISTS)
            named = references(element[1] if isinstance(element, list) else None)
            if not named["chain"] <= table.chains.keys():
                raise Refused(NOENT)
            elements[key] = element
        elif verb in ("delete", "destroy"):
            if key not in elements and verb == "delete":
                raise Refused(NOENT)
            elements.pop(key, None)


def _object(table: Table, verb: str, kind: str, obj: Json) -> None:
    where = (kind, obj["name"])
    if verb in ("add", "create"):
        if where in table.objects and verb == "create":
            raise Refused(EXISTS)
        body = {k: v for k, v in obj.items() if k not in WHERE | {"name"}}
        table.objects.setdefault(where, body)
    elif verb in ("delete", "destroy"):
        if where not in table.objects:
            if verb == "delete":
                raise Refused(NOENT)
            return
        if kind == "counter" and obj["name"] in table.uses()["counter"]:
            raise Refused(BUSY)
        del table.objects[where]
    elif verb == "reset" and where in table.objects:
        table.objects[where].update(packets=0, bytes=0)
