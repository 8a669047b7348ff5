"""The Test of each directory: the steps a login takes, one by one, each saying what it found, so a failing login
says exactly where it fails (cannot reach, TLS, bad bind, user not found, bad password, in no mapped group).

A Test uses the settings as saved (or as the form holds them, unsaved), never logs a password or a secret, and
changes nothing: no account is made, no role given.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Step:
    name: str
    ok: bool
    detail: str


@dataclass
class CheckResult:
    steps: list[Step] = field(default_factory=list)
    role: str | None = None

    @property
    def ok(self) -> bool:
        return bool(self.steps) and all(step.ok for step in self.steps)

    @property
    def reason(self) -> str:
        """The first failing step's words, or what the test proved."""
        failed = next((step for step in self.steps if not step.ok), None)
        if failed is not None:
            return failed.detail
        return self.steps[-1].detail if self.steps else ""

    def passed(self, name: str, detail: str) -> None:
        self.steps.append(Step(name, True, detail))

    def failed(self, name: str, detail: str) -> CheckResult:
        self.steps.append(Step(name, False, detail))
        return self

    def as_dict(self) -> dict:
        return {
            "ok": self.ok,
            "reason": self.reason,
            "role": self.role,
            "steps": [{"step": s.name, "ok": s.ok, "detail": s.detail} for s in self.steps],
        }
