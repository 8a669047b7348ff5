"""Rise and fall: how probe results turn into a backend's health (pure, no I/O)."""

from __future__ import annotations

from dataclasses import dataclass

from farms.choices import BackendHealthChoices

UP, DOWN, UNKNOWN = BackendHealthChoices.UP, BackendHealthChoices.DOWN, BackendHealthChoices.UNKNOWN


@dataclass
class BackendHealth:
    """The consecutive successes and failures of one backend and the health they add up to."""

    health: str
    rise: int
    fall: int
    successes: int = 0
    failures: int = 0

    def observe(self, ok: bool) -> str | None:
        """Count one probe result; returns the new health when it changes, else None.

        A backend not checked yet ('unknown') is up after its first success;
        a down one needs ``rise`` successes in a row; an up (or unknown) one goes
        down after ``fall`` failures in a row.
        """
        if ok:
            self.failures = 0
            self.successes += 1
            if self.health == UNKNOWN or (self.health == DOWN and self.successes >= self.rise):
                return self._become(UP)
        else:
            self.successes = 0
            self.failures += 1
            if self.health != DOWN and self.failures >= self.fall:
                return self._become(DOWN)
        return None

    def fail_now(self) -> str | None:
        """Down at once (another observer's verdict, HAProxy's passive health): DOWN when it changes, else None.
        It comes back as from any fall: after ``rise`` successes in a row."""
        self.successes, self.failures = 0, max(self.failures, self.fall)
        return None if self.health == DOWN else self._become(DOWN)

    def _become(self, health: str) -> str:
        self.health = health
        return health
