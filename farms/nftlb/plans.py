"""What an nftlb document asks for, as :func:`farms.nftlb.reader.import_document` reads it: an
:class:`ImportPlan` with the field values of every farm, backend, static session and policy, and its findings
(errors, unknown and ignored attributes, warnings, differences), each naming its place in the document."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MISSING = object()  # a value the reader refused: the plan it is in is not valid


@dataclass
class BackendPlan:
    """A backend of the document: its nftlb name (for sessions) and lbweb field values."""

    path: str
    name: str
    values: dict[str, Any]

    @property
    def valid(self) -> bool:
        return MISSING not in self.values.values()


@dataclass
class SessionPlan:
    """A static session: a client pinned to the backend the document names."""

    path: str
    client: str
    backend: str


@dataclass
class FarmPlan:
    """A farm of the document; ``valid`` is False when one of its own values was refused."""

    path: str
    name: str
    values: dict[str, Any]
    backends: list[BackendPlan] = field(default_factory=list)
    sessions: list[SessionPlan] = field(default_factory=list)
    policies: list[tuple[str, str]] = field(default_factory=list)  # (path, policy name)
    valid: bool = True


@dataclass
class PolicyPlan:
    """A deny or allow list of the document."""

    path: str
    name: str
    values: dict[str, Any]


@dataclass
class ImportPlan:
    """What a document asks for, and what was wrong, unknown or left out in it."""

    farms: list[FarmPlan] = field(default_factory=list)
    policies: list[PolicyPlan] = field(default_factory=list)
    errors: list[dict[str, str]] = field(default_factory=list)
    unknown: list[dict[str, str]] = field(default_factory=list)
    ignored: list[dict[str, str]] = field(default_factory=list)
    warnings: list[dict[str, str]] = field(default_factory=list)
    differences: list[dict[str, str]] = field(default_factory=list)

    def warn(self, path: str, attribute: str, message: str) -> None:
        self.warnings.append({"path": path, "attribute": attribute, "message": message})

    def differ(self, path: str, attribute: str, message: str) -> None:
        """Where lbweb, by design, does not do exactly what nftlb does."""
        self.differences.append({"path": path, "attribute": attribute, "message": message})

    def error(self, path: str, message: str) -> None:
        self.errors.append({"path": path, "message": message})

    def left_out(self, path: str, attribute: str, value: Any, reason: str) -> None:
        self.ignored.append({"path": path, "attribute": attribute, "value": _shown(value), "reason": reason})


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else str(value)
