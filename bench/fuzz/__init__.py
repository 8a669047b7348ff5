"""Values an operator types, written into each engine's configuration: what validation accepts, the engine takes,
with its meaning intact and no new directive. ``bench/fuzz_engines.py`` runs every engine long;
``tests/l7/test_l7_fields.py`` (and the cluster's test) run one briefly in the suite.

An engine is a module of this package, named in ``ENGINES``, that exposes:

``NAME: str``
    The engine's name in the report ("haproxy").
``FIELDS``
    The fields it fuzzes, by the names the report gives them ("cookie_name", "auth_pass"): a tuple of names, or a
    mapping keyed by them.
``available() -> str | None``
    None when the engine can be checked on this machine, else why not (its binary is missing, say).
``values() -> SearchStrategy[dict[str, object]]``
    One example: a value for every field in ``FIELDS`` (``text.hostile`` draws the usual hostile text).
``check(values: dict[str, object]) -> Outcome``
    Puts each value in its field and lets the model's ``clean()`` decide (through the services, or ``full_clean()``
    on the rows as the services would save them), renders the configuration with the pure generator, runs the
    engine's own check on it and reads back what the engine made of every accepted value. Returns the verdicts;
    raises only on a crash (an exception anywhere is a bug, counted as a crash).

The runner imports a plug-in after Django is set up on a throwaway, migrated SQLite database, and calls ``check``
inside a transaction it rolls back after each example, so every example starts from an empty configuration.
An example may fill every field at once (HAProxy's: they are independent) or one field of a valid base (the
cluster's: they only make sense together).
"""

from __future__ import annotations

from dataclasses import dataclass, field

ENGINES = ("haproxy", "keepalived", "conntrackd")  # modules of this package


@dataclass
class Outcome:
    """What one example came to: per field, accepted or refused by validation (with its message); for the whole
    configuration, the engine's refusal; per accepted field, what the engine read instead of the value."""

    accepted: dict[str, object] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    engine_refusal: str = ""
    meaning_lost: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.engine_refusal and not self.meaning_lost

    def describe(self) -> str:
        lines = [f"accepted: {self.accepted!r}"]
        if self.engine_refusal:
            lines.append(f"the engine refused it: {self.engine_refusal}")
        lines += [f"{name}: {what}" for name, what in self.meaning_lost.items()]
        return "\n".join(lines)


@dataclass
class Counts:
    """The figures of one engine's run: examples, values (one per field and example), the verdicts."""

    examples: int = 0
    values: int = 0
    accepted: int = 0
    refused_by_validation: int = 0
    refused_by_engine: int = 0  # examples whose configuration the engine refused (goal 0)
    meaning_lost: int = 0  # accepted values the engine read as something else (goal 0)
    crashes: int = 0  # examples that raised (goal 0)
    failures: list[str] = field(default_factory=list)
    by_field: dict[str, dict[str, int]] = field(default_factory=dict)  # field -> accepted, refused

    def add(self, outcome: Outcome) -> None:
        self.examples += 1
        self.values += len(outcome.accepted) + len(outcome.refused)
        self.accepted += len(outcome.accepted)
        self.refused_by_validation += len(outcome.refused)
        for verdict, names in (("accepted", outcome.accepted), ("refused", outcome.refused)):
            for name in names:
                bucket = self.by_field.setdefault(name, {"accepted": 0, "refused": 0})
                bucket[verdict] += 1
        self.refused_by_engine += bool(outcome.engine_refusal)
        self.meaning_lost += len(outcome.meaning_lost)
        if not outcome.ok and len(self.failures) < 20:
            self.failures.append(outcome.describe())

    def crash(self, values: dict, error: str) -> None:
        self.examples += 1
        self.crashes += 1
        if len(self.failures) < 20:
            self.failures.append(f"crash on {values!r}:\n{error}")

    def as_dict(self) -> dict[str, int]:
        return {name: value for name, value in vars(self).items() if name not in ("failures", "by_field")}
