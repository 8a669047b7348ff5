"""axe-core (npm, pinned in package.json as a development package) run inside a Playwright page.

The script is evaluated through the DevTools protocol, as Playwright's page.evaluate does, so the page's
Content-Security-Policy (no inline script, no eval) stays as it is for the page's own scripts.
"""

from __future__ import annotations

from functools import cache

from tests.support.stack import ROOT

AXE = ROOT / "node_modules" / "axe-core" / "axe.min.js"


@cache
def _source() -> str:
    if not AXE.exists():
        raise AssertionError(f"{AXE} is missing: deploy/setup.sh installs package.json's packages (npm ci)")
    return AXE.read_text()


def violations(page, include: str | None = None) -> list[str]:
    """axe's violations on the page (or only inside the ``include`` selector), one line each: rule, impact,
    help, and the first offending elements. An empty list is the goal."""
    if not page.evaluate("() => typeof window.axe !== 'undefined'"):
        page.evaluate(_source())
    found = page.evaluate(
        """async (include) => {
            const context = include ? { include: [include] } : document;
            const result = await axe.run(context, { resultTypes: ["violations"] });
            return result.violations.map((v) => `${v.id} (${v.impact}): ${v.help} at `
                + v.nodes.slice(0, 3).map((n) => n.target.join(" ")).join(", "));
        }""",
        include,
    )
    return found


def assert_none(page, include: str | None = None) -> None:
    """Fail naming the page and every violation axe finds there."""
    found = violations(page, include)
    assert found == [], f"{page.url}: {found}"
