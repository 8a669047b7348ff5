"""Turn an incremental nftables JSON document into lbweb's own nf_tables netlink batch.

Why: libnftables 1.0 answers ``add rule`` and ``add element`` by first reading every chain,
set and counter of the ruleset, so with 10,000 farms one backend's weight took 11 s to reach
the kernel although the transaction itself is a few dozen commands. The batch built here
costs the same whatever the number of farms:

1. In the scratch namespace (``scratch.py``) libnftables loads what the document needs: the
   skeleton, the changed units as they are compiled now (definitions and rules), the policy
   sets they match, then the document's own rules and elements. lbweb reads both states back.
2. Each command of the document becomes the netlink messages that add what appeared
   between the two reads (a rule is the next new rule of its chain; an element is one the
   map did not hold), or that remove an object by name. Keys of elements to delete are
   found by adding them to an empty copy of their map first.
3. ``nfmsg.commit`` sends it all as one transaction: all of it is committed, or nothing.

Anything it does not know (a command kind, a scratch load libnftables refuses, a count
that does not add up) raises :class:`Untranscribable`, and the caller falls back to
libnftables on the real table: slower, never wrong.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from compiler import document, merge_elements
from compiler.types import Json

from . import nfmsg
from .nfmsg import Message
from .scratch import Pending, Scratch, ScratchError, ScratchKernel

OBJECTS = {"counter", "quota", "limit", "ct helper"}
SUPPORTED = {
    "add": {"table", "chain", "rule", "set", "map", "element", *OBJECTS},
    "flush": {"chain", "set", "map"},
    "delete": {"table", "chain", "set", "map", "element", *OBJECTS},
}
# What the scratch kernel is given from the context; a flowtable would need the real interfaces.
DEFINITIONS = {"table", "chain", "set", "map", "ct timeout", "ct expectation", *OBJECTS}


class Untranscribable(Exception):
    """This document cannot be turned into a batch here; the reason says why."""


@dataclass
class Command:
    verb: str
    kind: str
    body: Json

    @property
    def where(self) -> tuple[str, str]:
        if self.kind == "table":
            return self.body["family"], self.body["name"]
        return self.body["family"], self.body["table"]

    @property
    def name(self) -> str:
        return self.body["chain"] if self.kind == "rule" else self.body["name"]

    def describe(self) -> str:
        text = json.dumps({self.verb: {self.kind: self.body}}, sort_keys=True)
        return text if len(text) <= 300 else text[:297] + "..."


def _command(raw: Json) -> Command:
    ((verb, body),) = raw.items()
    ((kind, obj),) = body.items()
    if kind not in SUPPORTED.get(verb, ()):
        raise Untranscribable(f"'{verb} {kind}' is not transcribed")
    if kind == "rule" and ({"handle", "index", "position"} & set(obj)):
        raise Untranscribable("rules placed by handle or index are not transcribed")
    if kind == "rule" and _counts_connections_per_key(obj):
        raise Untranscribable(
            "a per-client connection count (est-connlimit) needs its set made 'dynamic' in the batch of its "
            "first rule, which libnftables 1.0's JSON cannot say: libnftables writes it"
        )
    return Command(verb, kind, obj)


def _counts_connections_per_key(rule: Json) -> bool:
    """A rule that adds to a set with a ``ct count`` statement (nftlb's est-connlimit meter): the kernel
    takes it only into a set created with the 'dynamic' (EVAL) flag."""
    return any(
        isinstance(e, dict) and "set" in e and any("ct count" in stmt for stmt in e["set"].get("stmt", []))
        for e in rule.get("expr", [])
    )


def _attr(kind: int, text: str) -> bytes:
    return nfmsg.netlink.attr(kind, nfmsg.string(text))


@dataclass
class _Reads:
    before: dict[tuple[str, str], nfmsg.TableDump]
    after: dict[tuple[str, str], nfmsg.TableDump]
    deleted_keys: dict[tuple[str, str, str], list[nfmsg.Element]] = field(default_factory=dict)


def transcribe(document: Json, context: list[Json], scratch: Scratch) -> list[Message]:
    """The batch that does what ``document`` does; ``context`` defines what it refers to.

    ``context`` is a list of nftables JSON commands: the skeleton and the complete creates of
    every unit the document touches (and the definitions of those it refers to). Their
    definitions and rules are loaded in scratch, never their elements.
    """
    return Transcription(document, context, scratch).messages()


class Transcription:
    """:func:`transcribe` in two halves: made, it starts the scratch loads (in the scratch process);
    :meth:`messages` waits for them and builds the batch. A bulk apply makes the next transaction's
    while it commits the current one, so the scratch process and the kernel writer work side by side."""

    def __init__(self, document: Json, context: list[Json], scratch: Scratch) -> None:
        self._reads: Pending[_Reads] | None = None
        self._failed: Untranscribable | None = None  # raised by messages(), where the caller expects it
        try:
            self._commands = [_command(c) for c in document.get("nftables", [])]
            if self._commands:
                self._reads = scratch.submit(_read_scratch, _plan(self._commands, context))
        except Untranscribable as exc:
            self._failed = exc
        except OSError as exc:
            self._failed = _no_scratch(exc)

    def messages(self) -> list[Message]:
        if self._failed is not None:
            raise self._failed
        if self._reads is None:
            return []
        try:
            reads = self._reads.result()
        except OSError as exc:
            raise _no_scratch(exc) from exc
        return _Writer(reads).messages(self._commands)

    def made(self, where: tuple[str, str]) -> nfmsg.TableDump | None:
        """What the scratch namespace held of table ``where`` once the document was loaded (after
        :meth:`messages`): the objects the batch copied. None when nothing was loaded there."""
        if self._failed is not None or self._reads is None:
            return None
        return self._reads.result().after.get(where)


def _no_scratch(exc: OSError) -> Untranscribable:
    """No scratch process (no user namespaces?): libnftables writes the change instead."""
    return Untranscribable(f"no scratch namespace: {exc}")


def _definitions(context: list[Json], tables: set[tuple[str, str]]) -> list[Json]:
    """The context's 'add' commands of definitions, tables first, in their own order."""
    defined = [{"add": {"table": {"family": f, "name": n}}} for f, n in sorted(tables)]
    for raw in context:
        ((verb, body),) = raw.items()
        ((kind, _obj),) = body.items()
        if verb == "add" and kind in DEFINITIONS and kind != "table":
            defined.append(raw)
    return defined


@dataclass
class _Plan:
    """What the scratch process loads and reads for one document, made in the kernel writer.

    The loads go as the JSON text libnftables reads: the scratch process neither unpickles the
    document's commands nor serialises them again (during a bulk apply that was half of its time,
    and the scratch process is the slower of the two that work side by side)."""

    tables: set[tuple[str, str]]
    loaded: str  # the context's definitions and rules
    additions: str  # then the document's rules and elements, and what it defines that the context does not
    filled: set[tuple[str, str, str]]  # the sets and maps whose elements the writer needs
    deletions: str = ""  # the maps of deleted elements, filled with them, to learn their keys
    deleted_from: set[tuple[str, str, str]] = field(default_factory=set)


def _plan(commands: list[Command], context: list[Json]) -> _Plan:
    """Runs in the kernel writer: the loads and reads :func:`_read_scratch` does.

    The context goes in first with its rules, as the real table got it (libnftables marks a set
    'dynamic' when a rule that feeds it comes in the same batch, and the kernel refuses a second
    'add' that says otherwise); then the document's rules and elements, and what it defines that
    the context does not. Only the elements the writer needs are read back."""
    tables = {c.where for c in commands}
    definitions = _definitions(context, tables)
    loaded = _rules_and_definitions(context, tables)
    present = {_identity(d) for d in loaded if "table" not in d["add"] and "rule" not in d["add"]}
    additions = [
        {"add": {c.kind: c.body}}
        for c in commands
        if c.verb == "add" and (c.kind in ("rule", "element") or (c.kind, *c.where, c.name) not in present)
    ]
    # each set's elements in one command, as libnftables gets a full load (see merge_elements): it evaluates
    # an interval set anew for every command that adds to it, so a command per range (a farm adds its ranges
    # to a shared schedules-<n> map one by one) took time in the square of a transaction's ranges
    additions = merge_elements(document(additions))["nftables"]
    filled = {(*c.where, c.name) for c in commands if c.verb == "add" and c.kind in ("set", "map", "element")}
    deletions, deleted_from = _deletions(commands, definitions)
    return _Plan(tables, _text(loaded), _text(additions), filled, _text(deletions), deleted_from)


def _text(commands: list[Json]) -> str:
    return json.dumps({"nftables": commands}) if commands else ""


def _read_scratch(scratch: ScratchKernel, plan: _Plan) -> _Reads:
    """Runs in the scratch process: the loads of ``plan`` (see :func:`_plan`), and the reads."""

    def named(where: tuple[str, str]) -> Callable[[nfmsg.TableDump], set[str]]:
        return lambda dump: {name for family, table, name in plan.filled if (family, table) == where}

    def named_and_anonymous(where: tuple[str, str]) -> Callable[[nfmsg.TableDump], set[str]]:
        def sets(dump: nfmsg.TableDump) -> set[str]:
            earlier = before[where].rules
            new_rules = [r for chain, rules in dump.rules.items() for r in rules[len(earlier.get(chain, [])) :]]
            referenced = {n for r in new_rules for n in nfmsg.rule_set_references(r)}
            anonymous = {n for n in referenced if nfmsg.is_anonymous(dump.sets.get(n))}
            return named(where)(dump) | anonymous

        return sets

    try:
        deleted_keys = _deleted_keys(scratch, plan)
        scratch.reset(plan.tables)
        scratch.load_text(plan.loaded)
        before = {t: scratch.read(*t, named(t)) for t in plan.tables}
        scratch.load_text(plan.additions)
        after = {t: scratch.read(*t, named_and_anonymous(t)) for t in plan.tables}
    except ScratchError as exc:
        raise Untranscribable(f"the scratch namespace refused the document: {exc}") from exc
    return _Reads(before, after, deleted_keys)


def _rules_and_definitions(context: list[Json], tables: set[tuple[str, str]]) -> list[Json]:
    """The context's tables, definitions and rules (not its elements: the document adds its own)."""
    loaded = _definitions(context, tables)
    return loaded + [raw for raw in context if "rule" in raw.get("add", {})]


KEY_PROBE_COUNTER = "lbweb-key-probe"  # only ever in the scratch namespace


def _deletions(commands: list[Command], definitions: list[Json]) -> tuple[list[Json], set[tuple[str, str, str]]]:
    """What learns the kernel's form of every element the document deletes: the maps they are deleted
    from, defined alone and filled with them; and those maps, by (family, table, map)."""
    deletions = [c for c in commands if c.verb == "delete" and c.kind == "element"]
    if not deletions:
        return [], set()
    kinds = {}
    for raw in definitions:
        ((_verb, body),) = raw.items()
        ((kind, obj),) = body.items()
        if kind in ("set", "map"):
            kinds[(obj["family"], obj["table"], obj["name"])] = obj.get("map") if kind == "map" else "set"
    adds, probes = [], []
    for c in deletions:
        family, table = c.where
        kind = kinds.get((family, table, c.name))
        if kind == "set":
            elements = list(c.body["elem"])
        elif kind == "verdict":  # any verdict will do: only the keys are kept
            elements = [[key, {"accept": None}] for key in c.body["elem"]]
        elif kind == "mark":  # any value will do (a schedules-<n> map: a backend's id)
            elements = [[key, 0] for key in c.body["elem"]]
        elif kind == "counter":  # any counter will do: a placeholder of the scratch namespace alone
            probe = {"family": family, "table": table, "name": KEY_PROBE_COUNTER}
            if probe not in probes:
                probes.append(probe)
            elements = [[key, KEY_PROBE_COUNTER] for key in c.body["elem"]]
        else:
            raise Untranscribable(f"cannot find the keys of elements deleted from '{c.name}'")
        adds.append({"add": {"element": {**c.body, "elem": elements}}})
    maps = {(*c.where, c.name) for c in deletions}
    definitions_only = [d for d in definitions if "table" in d["add"] or (*_where_of(d), _name_of(d)) in maps]
    return definitions_only + [{"add": {"counter": p}} for p in probes] + adds, maps


def _deleted_keys(scratch: ScratchKernel, plan: _Plan) -> dict[tuple[str, str, str], list[nfmsg.Element]]:
    """The kernel's form of every element the document deletes, by (family, table, map)."""
    if not plan.deleted_from:
        return {}
    maps = plan.deleted_from
    scratch.reset(plan.tables)
    scratch.load_text(plan.deletions)
    reads = {t: scratch.read(*t, lambda dump, t=t: {m for f, tb, m in maps if (f, tb) == t}) for t in plan.tables}
    return {(f, t, m): reads[(f, t)].elements.get(m, []) for f, t, m in maps}


def _identity(raw: Json) -> tuple[str, str, str, str]:
    ((_verb, body),) = raw.items()
    ((kind, _obj),) = body.items()
    return (kind, *_where_of(raw), _name_of(raw))


def _where_of(raw: Json) -> tuple[str, str]:
    ((_verb, body),) = raw.items()
    ((kind, obj),) = body.items()
    return (obj["family"], obj["name"]) if kind == "table" else (obj["family"], obj["table"])


def _name_of(raw: Json) -> str:
    ((_verb, body),) = raw.items()
    ((_kind, obj),) = body.items()
    return obj.get("name", "")


class _Writer:
    """Builds the messages command by command, in the document's order."""

    def __init__(self, reads: _Reads):
        self.reads = reads
        self.out: list[Message] = []
        self.rules_taken: dict[tuple[str, str, str], int] = defaultdict(int)
        self.elements_done: set[tuple[str, str, str]] = set()  # maps whose new elements are sent
        self.deletions_done: set[tuple[str, str, str]] = set()  # maps whose deleted elements are sent
        self.created_sets: set[tuple[str, str, str]] = set()
        self.set_ids = 0

    def messages(self, commands: list[Command]) -> list[Message]:
        # A map's new elements go out together at its last 'add element', when every chain they
        # jump to has been added (removals all come first, so none is postponed past its deletion).
        self.last_addition = {
            (*c.where, c.name): i for i, c in enumerate(commands) if (c.verb, c.kind) == ("add", "element")
        }
        for index, c in enumerate(commands):
            self.index = index
            getattr(self, f"_{c.verb}")(c)
        for (family, table, chain), taken in self.rules_taken.items():
            before = len(self.reads.before[(family, table)].rules.get(chain, []))
            after = len(self.reads.after[(family, table)].rules.get(chain, []))
            if before + taken != after:
                raise Untranscribable(f"chain '{chain}' got {after - before} rules in scratch, {taken} in the document")
        return self.out

    def _emit(self, kind: int, c: Command, payload: bytes, flags: int = 0) -> None:
        self.out.append(Message(kind, c.where[0], flags, payload, c.describe))

    # -- removals: by name --------------------------------------------------------------

    def _flush(self, c: Command) -> None:
        table = c.where[1]
        if c.kind == "chain":
            self._emit(nfmsg.DELRULE, c, _attr(nfmsg.RULE_TABLE, table) + _attr(nfmsg.RULE_CHAIN, c.name))
        else:
            self._emit(nfmsg.DELSETELEM, c, _attr(nfmsg.ELEM_LIST_TABLE, table) + _attr(nfmsg.ELEM_LIST_SET, c.name))

    def _delete(self, c: Command) -> None:
        family, table = c.where
        if c.kind == "table":
            self._emit(nfmsg.DELTABLE, c, _attr(nfmsg.TABLE_NAME, table))
        elif c.kind == "chain":
            self._emit(nfmsg.DELCHAIN, c, _attr(nfmsg.CHAIN_TABLE, table) + _attr(nfmsg.CHAIN_NAME, c.name))
        elif c.kind in ("set", "map"):
            self._emit(nfmsg.DELSET, c, _attr(nfmsg.SET_TABLE, table) + _attr(nfmsg.SET_NAME, c.name))
        elif c.kind == "element":
            key = (family, table, c.name)
            if key in self.deletions_done:
                return
            self.deletions_done.add(key)
            elements = self.reads.deleted_keys.get(key, [])
            if not elements:
                raise Untranscribable(f"no keys found for the elements deleted from '{c.name}'")
            if self._is_interval(c):  # in libnftables' order, and never the map's floor (see is_interval_floor)
                elements = [e for e in nfmsg.ascending(elements) if not nfmsg.is_interval_floor(e)]
            payload = _attr(nfmsg.ELEM_LIST_TABLE, table) + _attr(nfmsg.ELEM_LIST_SET, c.name)
            for chunk in nfmsg.elements_payloads(elements, adding=False):
                self._emit(nfmsg.DELSETELEM, c, payload + chunk)
        else:
            type_ = nfmsg.U32.pack(nfmsg.OBJECT_TYPES[c.kind])
            payload = _attr(nfmsg.OBJ_TABLE, table) + _attr(nfmsg.OBJ_NAME, c.name)
            self._emit(nfmsg.DELOBJ, c, payload + nfmsg.netlink.attr(nfmsg.OBJ_TYPE, type_))

    # -- additions: what the scratch kernel made of them ----------------------------------

    def _add(self, c: Command) -> None:
        family, table = c.where
        after = self.reads.after[c.where]
        create = nfmsg.NLM_F_CREATE
        if c.kind == "table":
            if after.table is None:
                raise Untranscribable(f"table {family} {table} missing in scratch")
            self._emit(nfmsg.NEWTABLE, c, after.table.request(nfmsg.GETTABLE), create)
        elif c.kind == "chain":
            self._emit(nfmsg.NEWCHAIN, c, self._found(after.chains, c).request(nfmsg.GETCHAIN), create)
        elif c.kind in ("set", "map"):
            self.set_ids += 1  # the kernel wants every new set to carry an id of this batch
            set_id = nfmsg.netlink.attr(nfmsg.SET_ID, nfmsg.U32.pack(self.set_ids))
            self._emit(nfmsg.NEWSET, c, self._found(after.sets, c).request(nfmsg.GETSET) + set_id, create)
            self.created_sets.add((family, table, c.name))
            elements = after.elements.get(c.name, [])
            if elements:
                self._elements(c, c.name, elements)
            self.elements_done.add((family, table, c.name))
        elif c.kind == "element":
            self._add_elements(c)
        elif c.kind == "rule":
            self._add_rule(c)
        else:
            self._emit(nfmsg.NEWOBJ, c, self._found(after.objects, c).request(nfmsg.GETOBJ), create)

    @staticmethod
    def _found(objects: dict[str, nfmsg.Obj], c: Command) -> nfmsg.Obj:
        if c.name not in objects:
            raise Untranscribable(f"{c.kind} '{c.name}' missing in scratch")
        return objects[c.name]

    def _elements(self, c: Command, set_name: str, elements: list[nfmsg.Element], set_id: int | None = None) -> None:
        payload = _attr(nfmsg.ELEM_LIST_TABLE, c.where[1]) + _attr(nfmsg.ELEM_LIST_SET, set_name)
        if set_id is not None:
            payload += nfmsg.netlink.attr(nfmsg.ELEM_LIST_SET_ID, nfmsg.U32.pack(set_id))
        for chunk in nfmsg.elements_payloads(elements, adding=True):
            self._emit(nfmsg.NEWSETELEM, c, payload + chunk, nfmsg.NLM_F_CREATE)

    def _add_elements(self, c: Command) -> None:
        key = (*c.where, c.name)
        if key in self.elements_done or self.last_addition[key] != self.index:
            return
        self.elements_done.add(key)
        known = {e.identity() for e in self.reads.before[c.where].elements.get(c.name, [])}
        new = [e for e in self.reads.after[c.where].elements.get(c.name, []) if e.identity() not in known]
        if not new:
            raise Untranscribable(f"the elements added to '{c.name}' did not appear in scratch")
        if self._is_interval(c):
            new = nfmsg.ascending(new)
        self._elements(c, c.name, new)

    def _is_interval(self, c: Command) -> bool:
        return nfmsg.is_interval(self.reads.after[c.where].sets.get(c.name))

    def _add_rule(self, c: Command) -> None:
        family, table = c.where
        chain = c.name
        index = len(self.reads.before[c.where].rules.get(chain, [])) + self.rules_taken[(family, table, chain)]
        self.rules_taken[(family, table, chain)] += 1
        rules = self.reads.after[c.where].rules.get(chain, [])
        if index >= len(rules):
            raise Untranscribable(f"chain '{chain}' has fewer rules in scratch than the document adds")
        rule = rules[index]
        after = self.reads.after[c.where]
        renames = {}
        for name in nfmsg.rule_set_references(rule):
            set_ = after.sets.get(name)
            if not nfmsg.is_anonymous(set_) or name in renames:
                continue
            self.set_ids += 1
            template = re.sub(r"\d+$", "%d", name)
            renames[name] = (template, self.set_ids)
            payload = set_.request(nfmsg.GETSET, dropped={nfmsg.SET_NAME})
            payload += _attr(nfmsg.SET_NAME, template) + nfmsg.netlink.attr(nfmsg.SET_ID, nfmsg.U32.pack(self.set_ids))
            self._emit(nfmsg.NEWSET, c, payload, nfmsg.NLM_F_CREATE)
            if after.elements.get(name):
                self._elements(c, template, after.elements[name], set_id=self.set_ids)
        payload = nfmsg.rename_set_references(rule.request(nfmsg.GETRULE), renames)
        self._emit(nfmsg.NEWRULE, c, payload, nfmsg.NLM_F_CREATE | nfmsg.NLM_F_APPEND)
