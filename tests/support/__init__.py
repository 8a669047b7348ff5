"""What the tests share: the namespace labs, the servers they start, the process stack, and the data files
(``fixtures/``: input documents; ``golden/``: the generators' expected output)."""

from pathlib import Path

SUPPORT = Path(__file__).resolve().parent
FIXTURES = SUPPORT / "fixtures"
GOLDEN = SUPPORT / "golden"
