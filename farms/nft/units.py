"""Compiled units (a farm or a policy) and the builder that collects their commands."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from farms.types import Json

from . import fragments as f

COMPILER_VERSION = "2"
DIGEST_PREFIX = "lbweb:"


def canonical(document: Any) -> str:
    """The one serialisation used for digests and for byte-identical output."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"))


def digest_of(document: Any) -> str:
    return hashlib.sha256(canonical(document).encode()).hexdigest()[:16]


# -- units ------------------------------------------------------------------------------


@dataclass(frozen=True)
class UnitObjects:
    """The kernel objects one farm or policy owns: what must be emptied or removed to change it.

    ``chains`` are flushed on every change; ``volatile`` maps and sets hold
    configuration and are flushed too; ``objects`` (counters, durable sets
    such as persistence entries and rate-limit meters, helpers, flowtables)
    keep their content for as long as the new version still names them;
    ``elements`` are this unit's entries in the shared maps and
    ``element_values`` their verdicts, in the same order (empty when read from
    a record written before they were kept: then every element is replaced on
    a change); ``tables`` are whole tables the unit owns (DSR).
    """

    chains: tuple[str, ...] = ()
    objects: tuple[tuple[str, str], ...] = ()
    volatile: tuple[tuple[str, str], ...] = ()
    elements: tuple[tuple[str, Any], ...] = ()
    tables: tuple[tuple[str, str], ...] = ()
    digest: str = ""
    element_values: tuple[Any, ...] = ()

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
        )


@dataclass(frozen=True)
class UnitRuleset:
    """A compiled farm or policy: its objects and the commands that create them."""

    key: str  # "farm:<id>" or "policy:<id>"
    name: str
    objects: UnitObjects
    creates: list[Json] = field(default_factory=list)

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

    def finish(self, key: str, name: str, digest_rule: Json | None) -> UnitRuleset:
        digest = digest_of([COMPILER_VERSION, self.creates])
        if digest_rule is not None:
            digest_rule["comment"] = DIGEST_PREFIX + digest
        objects = UnitObjects(
            chains=tuple(self.chains),
            objects=tuple(self.objects),
            volatile=tuple(self.volatile),
            elements=tuple(self.elements),
            tables=tuple(self.tables),
            digest=digest,
            element_values=tuple(self.element_values),
        )
        return UnitRuleset(key, name, objects, self.creates)
