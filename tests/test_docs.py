"""Every file the docs, docstrings and comments name exists, and every link between the docs lands.

What is read: the Markdown pages of the repository (README.md, docs/, bench/, deploy/, and any other tracked
``*.md``), and the docstrings and comments of every ``*.py``. The history of benchmark passes under
``bench/runs/`` is left out: a diary names files where they were on its day.

What counts as a repository path: a word with a slash whose first part is a top-level entry of the checkout
(``farms/models.py``, ``dataplane/kernel/``, ``bench/RESULTS.md``), or that ends in a file extension
(``kernel/fake.py``, found beside the file that names it or above it), and a bare ``*.py`` or ``*.md`` name
(``DESIGN.md``), found anywhere in the tree. A ``tests/test_x.py::test_name`` must also define ``test_name``.
Not repository paths: URLs, absolute paths (``/etc/lbweb``, ``/run/...``, ``/proc/...``), paths under a
variable (``$LBWEB_VAR_DIR/acme``), and what the set-up or a run makes (``var/``, ``.venv/``,
``bench/results/``, ...: the ignored entries of ``.gitignore``). A ``*`` is a glob that must match; a
``<placeholder>`` part matches any one name.

A Markdown link ``[text](target)`` must land: its file relative to the page, and its ``#anchor`` a heading of
that file (GitHub's slug).
"""

from __future__ import annotations

import ast
import fnmatch
import io
import re
import subprocess
import tokenize
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HISTORY = "bench/runs/"
THIS = "tests/test_docs.py"  # its docstring and examples name paths that do not exist, on purpose
# A run of path characters; `<...>`, `{...}` and `*` are kept so that a placeholder or glob is seen whole.
CANDIDATE = re.compile(r"(?<![\w$/~.{}<>:@-])((?:[\w.*{}<>-]+/)+[\w.*{}<>-]*|[\w*-]+\.(?:py|md))(::[\w\[\]-]+)?")
LINK = re.compile(r"\]\(([^)\s]+)\)")


@cache
def tracked() -> tuple[str, ...]:
    """The checkout's files, as git lists them (untracked ones too, but not what .gitignore ignores)."""
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return tuple(path for path in out.splitlines() if (ROOT / path).exists())


@cache
def top_level() -> frozenset[str]:
    return frozenset(path.split("/", 1)[0] for path in tracked())


@cache
def generated() -> tuple[str, ...]:
    """What .gitignore keeps out of the repository: made by the set-up, a run or a test, never a source."""
    lines = (ROOT / ".gitignore").read_text().splitlines()
    return tuple(line.strip().strip("/") for line in lines if line.strip() and not line.startswith("#"))


@cache
def directories() -> frozenset[str]:
    found = set()
    for path in tracked():
        parts = path.split("/")
        found.update("/".join(parts[:i]) for i in range(1, len(parts)))
    return frozenset(found)


@cache
def basenames() -> frozenset[str]:
    return frozenset(path.rsplit("/", 1)[-1] for path in tracked())


def exists(relative: str) -> bool:
    """A file or folder of the checkout at this path (a glob or a <placeholder> must match one)."""
    relative = relative.rstrip("/")
    if not re.search(r"[*<{]", relative):
        return relative in directories() or (ROOT / relative).is_file()
    pattern = re.sub(r"<[^>/]*>|\{[^}/]*\}", "*", relative)
    return any(fnmatch.fnmatchcase(path, pattern) for path in (*tracked(), *directories()))


def is_generated(path: str) -> bool:
    return any(fnmatch.fnmatchcase(path.rstrip("/"), g) or path.startswith(g + "/") for g in generated())


def unresolved(word: str, test: str | None, source: str) -> str | None:
    """Why ``word`` (named in the file ``source``) is not a path of the checkout, or None when it is."""
    word = word.rstrip(".,;:")
    if not word or word.startswith(("..", "./")) and not source.endswith(".md"):
        return None
    first = word.split("/", 1)[0]
    if "/" not in word:  # a bare name: somewhere in the tree
        return None if word in basenames() or re.search(r"[*<{]", word) else "no such file anywhere"
    if is_generated(word):
        return None
    here = Path(source).parent
    if first in top_level():
        places = [word]
    elif re.fullmatch(r"[A-Z][A-Z_]*", first):
        return None  # a variable's value: STATE_DIR/plan.json
    elif word.endswith((".py", ".md")):
        places = [str(p / word) for p in (here, *here.parents)]  # relative to the file that names it
    else:
        return None  # not a path of this repository (a media type, a systemd folder, a GitHub name, ...)
    places = [str(Path(p)) if not p.startswith("..") else p for p in places]
    found = next((p for p in places if exists(p)), None)
    if found is None:
        return "no such file or folder"
    if test and found.endswith(".py"):
        name = test[2:].split("[", 1)[0]
        if not re.search(rf"^\s*(async )?def {re.escape(name)}\b|^class {re.escape(name)}\b", _text(found), re.M):
            return f"{found} defines no {name}"
    return None


@cache
def _text(relative: str) -> str:
    return (ROOT / relative).read_text(errors="replace")


def prose_of_python(relative: str) -> list[tuple[int, str]]:
    """(line, text) of every comment and docstring of a Python file."""
    source = _text(relative)
    found = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            found.append((token.start[0], token.string))
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                if isinstance(body[0].value.value, str):
                    found.append((body[0].lineno, body[0].value.value))
    return found


def lines_of(prose: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Each text of ``prose`` cut into its lines, numbered as in the file."""
    found = []
    for first, text in prose:
        found.extend((first + i, line) for i, line in enumerate(text.splitlines()))
    return found


def prose_of_markdown(relative: str) -> list[tuple[int, str]]:
    return list(enumerate(_text(relative).splitlines(), start=1))


def sources() -> list[str]:
    return [
        path
        for path in tracked()
        if path.endswith((".py", ".md"))
        and not path.startswith((HISTORY, "node_modules/"))
        and not is_generated(path)
        and path != THIS
    ]


def broken_in(relative: str, prose: list[tuple[int, str]]) -> list[str]:
    problems = []
    for line, text in lines_of(prose):
        text = re.sub(r"\w+://\S+", " ", text)  # URLs
        for match in CANDIDATE.finditer(text):
            why = unresolved(match.group(1), match.group(2), relative)
            if why:
                problems.append(f"{relative}:{line}: {match.group(0)!r}: {why}")
    return problems


def broken_paths(relative: str) -> list[str]:
    if relative.endswith(".md"):
        return broken_in(relative, prose_of_markdown(relative))
    # Most files name no missing path anywhere: only those that do (in code or in prose) are parsed, to keep
    # the comments and docstrings and leave the code's own strings (a test's made-up path) alone.
    if not broken_in(relative, [(1, _text(relative))]):
        return []
    return broken_in(relative, prose_of_python(relative))


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation gone, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.lstrip("#").strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(relative: str) -> set[str]:
    found, seen = set(), {}
    in_code = False
    for line in _text(relative).splitlines():
        if line.lstrip().startswith("```"):
            in_code = not in_code
        elif not in_code and re.match(r"#{1,6} ", line):
            base = slug(line.lstrip("#"))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def broken_links(relative: str) -> list[str]:
    problems = []
    for number, line in prose_of_markdown(relative):
        for target in LINK.findall(line):
            if re.match(r"\w+:", target):
                continue  # https:, mailto:, ...
            path, _, anchor = target.partition("#")
            page = str((Path(relative).parent / path).resolve().relative_to(ROOT)) if path else relative
            if not exists(page):
                problems.append(f"{relative}:{number}: link to {target}: no such file")
            elif anchor and page.endswith(".md") and anchor not in anchors(page):
                problems.append(f"{relative}:{number}: link to {target}: {page} has no heading #{anchor}")
    return problems


def test_every_path_the_docs_docstrings_and_comments_name_exists():
    problems = [problem for path in sources() for problem in broken_paths(path)]
    assert not problems, f"{len(problems)} references to files that do not exist:\n" + "\n".join(problems)


def test_every_link_between_the_docs_lands_on_a_file_and_a_heading():
    problems = [p for path in sources() if path.endswith(".md") for p in broken_links(path)]
    assert not problems, "links that land nowhere:\n" + "\n".join(problems)


def test_the_check_tells_a_path_from_what_is_not_one():
    """The rules above on examples: what must exist, what is not a repository path."""
    assert unresolved("farms/models.py", None, "README.md") is None
    assert unresolved("dataplane/kernel/", None, "README.md") is None
    assert unresolved("bench/RESULTS.md", None, "README.md") is None
    assert unresolved("tests/test_kernel_limits.py", None, "compiler/limits.py") == "no such file or folder"
    assert unresolved("DESIGN.md", None, "bench/README.md") == "no such file anywhere"
    assert unresolved("farms/nft/compiler.py", None, "README.md") == "no such file or folder"
    assert unresolved("fake.py", None, "dataplane/applier.py") is None  # bare: somewhere in the tree
    assert unresolved("kernel/fake.py", None, "dataplane/applier.py") is None  # beside the file that names it
    assert unresolved("kernel/nothing.py", None, "dataplane/applier.py") == "no such file or folder"
    assert unresolved("tests/test_docs.py", "::test_the_check_tells_a_path_from_what_is_not_one", "x.md") is None
    assert "defines no" in unresolved("tests/test_docs.py", "::test_nothing_of_the_kind", "x.md")
    for not_ours in ("var/tls/lbweb.crt", ".venv/bin/python", "bench/results/dataplane.json", "application/json",
                     "systemd/network/", "acassen/keepalived", "tests/test_*.py", "bench/results/run-<time>.json"):  # fmt: skip
        assert unresolved(not_ours, None, "README.md") is None, not_ours
    assert unresolved("tests/nothing_*.py", None, "README.md") == "no such file or folder"
    text = "see /etc/lbweb/lbweb.env, $LBWEB_VAR_DIR/acme/x.py, https://example.com/a/b.py and /run/x/y.md"
    assert [m.group(1) for m in CANDIDATE.finditer(re.sub(r"\w+://\S+", " ", text))] == []
    assert slug("## How a change reaches the kernel") == "how-a-change-reaches-the-kernel"
    assert slug("### `LBWEB_BIND` and the socket (systemd)") == "lbweb_bind-and-the-socket-systemd"
