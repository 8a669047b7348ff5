"""Every command the README and the pages of docs/ document is exercised by a test.

Two parts. A guard: each command line of the ``sh`` blocks of README.md and docs/*.md (indented ones too) is
either in a block that ``tests/deploy/test_readme_first_command.py`` runs word for word, or names a script
(``deploy/...``, ``bench/...``) that some other test runs; a command added to a page without a test fails here,
naming it. And the runs for the benchmarks the pages list that no other test ran: each as written, with its
smallest sizes (their figures are the benchmark's business, not the suite's: here they must run to the end and
print their table).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
# Found by name, wherever tests/ keeps it (the suite's folders may follow the code's).
WORD_FOR_WORD = next((ROOT / "tests").rglob("test_readme_first_command.py"))
SCRIPT = re.compile(r"(deploy/[\w./-]+|bench/[\w./-]+\.py|-m (bench\.\w+))")


def doc_blocks() -> list[tuple[str, str, str]]:
    """(the page, the heading a ``sh`` block stands under, the block) for every such block of every page.

    A block may be indented (under a list item): it is read without its indent."""
    found = []
    for page in PAGES:
        heading, lines = "", page.read_text().splitlines()
        i = 0
        while i < len(lines):
            if lines[i].startswith("#"):
                heading = lines[i]
            elif lines[i].lstrip().startswith("```sh"):
                indent = len(lines[i]) - len(lines[i].lstrip())
                end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
                found.append((str(page.relative_to(ROOT)), heading, "\n".join(x[indent:] for x in lines[i + 1 : end])))
                i = end
            i += 1
    return found


def word_for_word_call(page: str, heading: str) -> str:
    """How tests/deploy/test_readme_first_command.py names a block it runs as written."""
    return f'readme_block("{heading}")' if page == "README.md" else f'readme_block("{heading}", "{page}")'


def commands(block: str) -> list[str]:
    """The block's command lines: not comments, not the continuation of the line before."""
    out, continued = [], False
    for line in block.splitlines():
        if line.strip() and not line.lstrip().startswith("#") and not continued:
            out.append(line.split("  #")[0].strip())
        continued = line.rstrip().endswith("\\")
    return out


def text_of_the_tests() -> str:
    here = Path(__file__).resolve()
    sources = [ROOT / ".ci" / "run", *sorted((ROOT / "tests").rglob("*.py"))]
    return "\n".join(p.read_text() for p in sources if p.resolve() != here)


def test_every_readme_command_is_exercised_by_a_test():
    run_as_written = WORD_FOR_WORD.read_text()
    others = text_of_the_tests()
    missing = []
    for page, heading, block in doc_blocks():
        title = f'{page} "{heading.lstrip("#").strip()}"'
        if word_for_word_call(page, heading) in run_as_written:
            continue
        for command in commands(block):
            match = SCRIPT.search(command)
            if not match:
                missing.append(f"{title}: {command!r} (a block no test runs word for word)")
                continue
            script = match.group(1) if match.group(1) in SMALL_RUNS else match.group(2) or match.group(1)
            needles = {script, script.replace(".", "/") + ".py"} if match.group(2) else {script}
            if not any(n in others for n in needles) and script not in SMALL_RUNS:
                missing.append(f"{title}: {command!r} (no test runs {script})")
    assert not missing, "documented commands no test exercises:\n" + "\n".join(missing)


def test_the_guard_sees_every_block():
    blocks = doc_blocks()
    setup = [b for p, h, b in blocks if (p, h) == ("README.md", "## Set-up: two commands")]
    assert len(setup) == 1 and commands(setup[0]) == ["deploy/run.sh", "deploy/test.sh"]
    assert "exec deploy/test.sh" in (ROOT / ".ci" / "run").read_text()  # the second command is CI's own
    pages = {p for p, _h, _b in blocks}
    assert {"README.md", "docs/benchmarks.md", "docs/operations.md"} <= pages, pages
    # every sh block of every page, indented or not, is one the guard reads
    written = sum(page.read_text().count("```sh") for page in PAGES)
    assert len(blocks) == written


# Each documented benchmark no other test runs, as the page writes it, at its smallest sizes.
SMALL_RUNS = {
    "bench/compile.py": ["--farms", "20", "--rounds", "1"],
    "bench/change_writer.py": ["--farms", "20", "--changes", "2"],
    "-m bench.drift": ["--farms", "20"],
    "bench/healthd.py": ["--backends", "20", "--seconds", "1", "--trials", "1"],
    "bench/collector.py": ["--farms", "20", "--entries", "1000", "--samples", "2", "--seconds", "3"],
}
PRINTS = {
    "bench/compile.py": "on / paused",
    "bench/change_writer.py": "One farm's weight change",
    "-m bench.drift": "one drifted farm",
    "bench/healthd.py": "health at the end",
    "bench/collector.py": "# dashboard with 20 farms",
}


@pytest.mark.dataplane
@pytest.mark.parametrize("script", sorted(SMALL_RUNS))
def test_a_readme_benchmark_runs_to_its_table(script):
    if os.geteuid() != 0 and script != "bench/compile.py":
        pytest.fail("the benchmarks build network namespaces: run the suite as root")
    listed = [c for _p, _h, b in doc_blocks() for c in commands(b)]
    assert any(script in c for c in listed), f"no page lists {script} any more: drop it here"
    cmd = [sys.executable, *script.split(), *SMALL_RUNS[script]]
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert PRINTS[script] in result.stdout, result.stdout[-2000:]
