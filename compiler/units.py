"""Compiled units (a farm or a policy) and the builder that collects their commands."""

from __future__ import annotations

import hashlib
import json
import zlib
from dataclasses import dataclass
from typing import Any

from compiler.types import Json

from . import fragments as f

# 6: a unit's digest is of its commands' JSON text as the compiler writes them (``text_of``), no longer sorted
COMPILER_VERSION = "6"
DIGEST_PREFIX = "lbweb:"


def canonical(document: Any) -> str:
    """The one serialisation used for digests and for byte-identical output."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"))


def digest_of(document: Any) -> str:
    return hashlib.sha256(canonical(document).encode()).hexdigest()[:16]


def text_of(commands: list[Json]) -> str:
    """A unit's commands as compact JSON text, keys in the order the compiler writes them: its digest is
    of this text, and the same text is what the unit keeps (packed). Sorted as :func:`canonical`
    sorts them, the text cost a second serialisation of every unit (0.15 s of 1,000 farms' compile).
    The compiler's order is its code's, the same in every process (``tests/compiler/test_compiler.py`` compiles
    the same farms under two hash seeds)."""
    return json.dumps(commands, separators=(",", ":"))


def unit_digest(text: str) -> str:
    """The digest of a unit whose commands are ``text`` (:func:`text_of`), under this compiler version."""
    return hashlib.sha256(f"{COMPILER_VERSION} {text}".encode()).hexdigest()[:16]


# -- units ------------------------------------------------------------------------------


@dataclass(frozen=True)
class UnitObjects:
    """The kernel objects one farm or policy owns: what must be emptied or removed to change it.

    ``chains`` are flushed on every change; ``volatile`` maps and sets hold
    configuration and are flushed too; ``objects`` (counters, durable sets
    such as persistence entries and rate-limit meters, helpers, flowtables)
    keep their content for as long as the new version still names them;
    ``elements`` are this unit's entries in the shared maps (and in its own
    maps changed element by element, a NAT farm's ``targets-<name>``) and
    ``element_values`` their verdicts, in the same order (empty when read from
    a record written before they were kept: then every element is replaced on
    a change); ``tables`` are whole tables the unit owns (DSR); ``chain_digests``
    are the digests of each chain's rules, in the order of ``chains`` (empty when
    read from a record written before they were kept: then every chain is
    rewritten on a change).

    A change rewrites only the chains whose rules changed: the kernel validates
    every jump of the whole table when a transaction adds a rule that can reach
    another chain or translate (NAT, a verdict map, ``ct mark set``), which cost
    ~115 ms a change at 10,000 farms; a weight change of a ``weight``,
    ``leastconn`` or ``maglev`` farm rewrites no such rule (its scheduler map's
    elements and its digest chain, see :meth:`Builder.finish`).
    """

    chains: tuple[str, ...] = ()
    objects: tuple[tuple[str, str], ...] = ()
    volatile: tuple[tuple[str, str], ...] = ()
    elements: tuple[tuple[str, Any], ...] = ()
    tables: tuple[tuple[str, str], ...] = ()
    digest: str = ""
    element_values: tuple[Any, ...] = ()
    chain_digests: tuple[str, ...] = ()

    def unchanged_chains(self, new: UnitObjects) -> set[str]:
        """The chains both versions hold with the same rules: a change leaves them as they are."""
        if len(self.chain_digests) != len(self.chains) or len(new.chain_digests) != len(new.chains):
            return set()
        before = dict(zip(self.chains, self.chain_digests, strict=True))
        return {c for c, d in zip(new.chains, new.chain_digests, strict=True) if before.get(c) == d}

    def element_entries(self) -> set[tuple[str, str, str]]:
        """(map, canonical key, canonical verdict) of every shared-map element whose verdict is known."""
        if len(self.element_values) != len(self.elements):
            return set()
        pairs = zip(self.elements, self.element_values, strict=True)
        return {(name, canonical(key), canonical(value)) for (name, key), value in pairs}

    def to_json(self) -> Json:
        return {
            "chains": list(self.chains),
            "objects": [list(o) for o in self.objects],
            "volatile": [list(o) for o in self.volatile],
            "elements": [[name, key] for name, key in self.elements],
            "tables": [list(t) for t in self.tables],
            "digest": self.digest,
            "element_values": list(self.element_values),
            "chain_digests": list(self.chain_digests),
        }

    @classmethod
    def from_json(cls, data: Json) -> UnitObjects:
        return cls(
            chains=tuple(data.get("chains", ())),
            objects=tuple(tuple(o) for o in data.get("objects", ())),
            volatile=tuple(tuple(o) for o in data.get("volatile", ())),
            elements=tuple((name, key) for name, key in data.get("elements", ())),
            tables=tuple(tuple(t) for t in data.get("tables", ())),
            digest=data.get("digest", ""),
            element_values=tuple(data.get("element_values", ())),
            chain_digests=tuple(data.get("chain_digests", ())),
        )


class UnitRuleset:
    """A compiled farm or policy: its objects and the commands that create them.

    The worker keeps every farm's unit between changes, so that a change compiles its own farm
    only. As Python dicts a 10,000-farm configuration's commands held ~850 MB of the worker; kept
    as their JSON text, compressed, ~11 MB. So the commands are kept packed, and :attr:`creates`
    unpacks a fresh copy (~0.1 ms a farm) for the few units a change writes."""

    __slots__ = ("key", "name", "objects", "size", "_packed")

    def __init__(
        self, key: str, name: str, objects: UnitObjects, creates: list[Json] = (), text: str | None = None
    ) -> None:
        """``text``: ``creates`` as :func:`text_of` writes them, when the caller has it already."""
        self.key = key  # "farm:<id>" or "policy:<id>"
        self.name = name
        self.objects = objects
        self.size = len(creates)  # commands
        if creates and text is None:
            text = text_of(creates)
        self._packed = zlib.compress(text.encode(), 1) if creates else b""

    @property
    def creates(self) -> list[Json]:
        """The unit's commands, a new list of new dicts on every call (the caller may change them)."""
        return json.loads(zlib.decompress(self._packed)) if self._packed else []

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, UnitRuleset):
            return NotImplemented
        return (self.key, self.name, self.objects, self._packed) == (
            other.key,
            other.name,
            other.objects,
            other._packed,
        )

    __hash__ = None  # type: ignore[assignment]  # compared by value; the dataclass's hash failed on its list too

    def __repr__(self) -> str:
        return f"UnitRuleset({self.key!r}, {self.name!r}, digest={self.objects.digest!r})"

    @property
    def digest(self) -> str:
        return self.objects.digest

    @property
    def farm_id(self) -> int:
        return int(self.key.split(":", 1)[1])


class Builder:
    """Collects one unit's creates and objects in order."""

    def __init__(self) -> None:
        self.creates: list[Json] = []
        self.chains: list[str] = []
        self.objects: list[tuple[str, str]] = []
        self.volatile: list[tuple[str, str]] = []
        self.elements: list[tuple[str, Any]] = []
        self.element_values: list[Any] = []
        self.tables: list[tuple[str, str]] = []

    def obj(self, kind: str, body: Json, *, volatile: bool = False) -> None:
        self.creates.append(f.add(kind, body))
        (self.volatile if volatile else self.objects).append((kind, body["name"]))

    def chain(self, name: str) -> None:
        self.creates.append(f.add("chain", f.chain(name)))
        self.chains.append(name)

    def rule(self, chain: str, expr: list[Json]) -> Json:
        body = f.rule(chain, expr)
        self.creates.append(f.add("rule", body))
        return body

    def element(self, set_name: str, key: Any, value: Any = None) -> None:
        elem = key if value is None else [key, value]
        self.creates.append(f.add("element", f.element(set_name, [elem])))
        self.elements.append((set_name, key))
        self.element_values.append(value)

    def finish(self, key: str, name: str, digest_chain: str | None) -> UnitRuleset:
        """The unit, its digest carried by the kernel in ``digest_chain`` when given.

        That chain holds one rule, a counter no packet reaches (no rule jumps to the chain), whose
        comment is ``lbweb:<digest>``: the digest changes with every change of the unit, and a
        rule of its own lets every other chain stay as it is when its rules did not change; a
        counter costs the kernel no validation of the table's jumps (see :class:`UnitObjects`)."""
        text = text_of(self.creates)
        digest = unit_digest(text)
        if digest_chain is not None:
            written = len(self.creates)
            self.chain(digest_chain)
            self.creates.append(f.add("rule", f.rule(digest_chain, [{"counter": None}], DIGEST_PREFIX + digest)))
            tail = text_of(self.creates[written:])  # the digest chain's commands, appended to the same text
            text = f"{text[:-1]},{tail[1:]}" if written else tail
        rules: dict[str, list[Json]] = {c: [] for c in self.chains}
        for command in self.creates:
            body = command.get("add", {}).get("rule")
            if body is not None and body["chain"] in rules:
                rules[body["chain"]].append(body)
        objects = UnitObjects(
            chains=tuple(self.chains),
            objects=tuple(self.objects),
            volatile=tuple(self.volatile),
            elements=tuple(self.elements),
            tables=tuple(self.tables),
            digest=digest,
            element_values=tuple(self.element_values),
            chain_digests=tuple(digest_of(rules[c]) for c in self.chains),
        )
        return UnitRuleset(key, name, objects, self.creates, text=text)


_DIGEST_SPACE = 1 << 128


def _digest_term(key: str, unit: Any) -> int:
    return int.from_bytes(hashlib.blake2b(f"{key} {unit.digest}".encode(), digest_size=16).digest(), "big")


class UnitMap(dict):
    """Units by key that keep one digest of all of them up to date as they change (:attr:`combined`), and
    the keys that changed (:attr:`touched`).

    Why: the worker records that digest with every apply; made anew from 10,000 units it cost ~6 ms of each
    single change (py-spy). It is the sum of one hash per (key, digest), so a unit written costs one hash,
    and any dict of the same units has the same digest (:func:`combined_digest`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        self._sum = 0
        self.touched: set[str] = set()  # keys set or removed since the owner last emptied it
        self.update(*args, **kwargs)

    def __setitem__(self, key: str, unit: Any) -> None:
        if key in self:
            self._sum -= _digest_term(key, self[key])
        super().__setitem__(key, unit)
        self._sum += _digest_term(key, unit)
        self.touched.add(key)

    def __delitem__(self, key: str) -> None:
        self._sum -= _digest_term(key, self[key])
        super().__delitem__(key)
        self.touched.add(key)

    def pop(self, key: str, *default: Any) -> Any:
        if key in self:
            unit = self[key]
            del self[key]
            return unit
        if default:
            return default[0]
        raise KeyError(key)

    def popitem(self) -> tuple[str, Any]:
        key = next(reversed(self))
        return key, self.pop(key)

    def setdefault(self, key: str, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]

    def update(self, *args: Any, **kwargs: Any) -> None:
        for key, unit in dict(*args, **kwargs).items():
            self[key] = unit

    def clear(self) -> None:
        self.touched.update(self)
        super().clear()
        self._sum = 0

    def __reduce__(self) -> tuple:
        return UnitMap, (dict(self),)

    @property
    def combined(self) -> str:
        return format(self._sum % _DIGEST_SPACE, "032x")[:16]


def combined_digest(units: dict[str, Any]) -> str:
    """One digest of a configuration's units (:class:`UnitMap`'s, kept up to date there, made here otherwise)."""
    if isinstance(units, UnitMap):
        return units.combined
    return UnitMap(units).combined
