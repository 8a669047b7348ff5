"""Every file the docs, docstrings and comments name exists, and every link between the docs lands.

What is read: the Markdown pages of the repository (README.md, docs/, bench/, deploy/, and any other tracked
``*.md``), and the docstrings and comments of every ``*.py``. The history of benchmark passes under
``bench/runs/`` is left out: a diary names files where they were on its day.

What counts as a repository path:

- a word with a slash whose first part is a top-level entry of the checkout (``farms/models.py``,
  ``dataplane/kernel/``, ``bench/RESULTS.md``). A template or static file may go by the name its app gives it
  (``farms/object_edit.html`` is ``templates/farms/object_edit.html``).
- a word with a slash that ends in ``.py`` or ``.md`` (``kernel/interface.py``): found beside the file that
  names it, or above it;
- a bare ``*.py`` or ``*.md`` name (``DESIGN.md``): found anywhere in the tree.

A ``tests/farms/test_x.py::test_name`` must also define ``test_name``; a page cited with a section's title in quotes
(``bench/runs/PASSES.md, "Three full runs"``) must have a heading that begins so. Not repository paths: URLs,
absolute paths (``/etc/lbweb``, ``/run/...``, ``/proc/...``), paths under a variable (``$LBWEB_VAR_DIR/acme``,
``STATE_DIR/plan.json``), and what the set-up or a run makes (``var/``, ``.venv/``, ``bench/results/``, ...: the
ignored entries of ``.gitignore``). A ``*`` is a glob that must match; a ``<placeholder>`` part matches any one
name.

A Markdown link ``[text](target)`` must land: its file relative to the page, and its ``#anchor`` a heading of
that file (GitHub's slug).

And the pages stay readable: README.md a page a newcomer reads in ten minutes (at most 200 lines), and no
sentence of it or of docs/ over 50 words (a table cell counts as a sentence of its own; code does not).
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

ROOT = Path(__file__).resolve().parents[2]
HISTORY = "bench/runs/"
THIS = "tests/repo/test_docs.py"  # its docstring and examples name paths that do not exist, on purpose
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


def locate(word: str, source: str) -> tuple[str | None, str | None]:
    """(why ``word``, named in the file ``source``, is not a path of the checkout, or None when it is; the file
    or folder it names, when it names one that can be read)."""
    word = word.rstrip(".,;:")
    if not word or word.startswith(("..", "./")) and not source.endswith(".md"):
        return None, None
    first = word.split("/", 1)[0]
    here = Path(source).parent
    if "/" not in word:  # a bare name: beside the file that names it, or somewhere in the tree
        if re.search(r"[*<{]", word):
            return None, None
        beside = str(here / word) if str(here) != "." else word
        return (None, beside if exists(beside) else None) if word in basenames() else ("no such file anywhere", None)
    if is_generated(word):
        return None, None
    if first in top_level():
        places = [word, f"templates/{word}", f"static/{word}"]  # a template or static file goes by its app's name
    elif re.fullmatch(r"[A-Z][A-Z_]*", first):
        return None, None  # a variable's value: STATE_DIR/plan.json
    elif word.endswith((".py", ".md")):
        places = [str(p / word) for p in (here, *here.parents)]  # relative to the file that names it
    else:
        return None, None  # not a path of this repository (a media type, a systemd folder, a GitHub name, ...)
    found = next((p for p in places if exists(p)), None)
    return (None, found) if found else ("no such file or folder", None)


def unresolved(word: str, test: str | None, source: str) -> str | None:
    """Why ``word`` (named in the file ``source``) is not a path of the checkout, or None when it is."""
    why, found = locate(word, source)
    if why or not found or not test or not found.endswith(".py"):
        return why
    name = test[2:].split("[", 1)[0]
    if not re.search(rf"^\s*(async )?def {re.escape(name)}\b|^class {re.escape(name)}\b", _text(found), re.M):
        return f"{found} defines no {name}"
    return None


def missing_section(word: str, quoted: str, source: str) -> str | None:
    """A page cited with a section's title in quotes (``bench/runs/PASSES.md, "Three full runs"``) must have a
    heading that begins with those words."""
    _why, found = locate(word, source)
    if not found or not found.endswith(".md"):
        return None
    said = " ".join(quoted.replace("`", "").split()).lower()
    titles = [" ".join(h.replace("`", "").split()).lower() for h in headings(found)]
    return None if any(t.startswith(said) for t in titles) else f"{found} has no section {quoted!r}"


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
            first = node.body[0] if node.body else None
            value = first.value.value if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) else None
            if isinstance(value, str):
                found.append((first.lineno, value))
    return found


def prose_of_markdown(relative: str) -> list[tuple[int, str]]:
    return [(1, _text(relative))]


def sources() -> list[str]:
    return [
        path
        for path in tracked()
        if path.endswith((".py", ".md"))
        and not path.startswith((HISTORY, "node_modules/"))
        and not is_generated(path)
        and path != THIS
    ]


SECTION = re.compile(r',?\s*"([^"\n]+(?:\n[^"\n]*){0,2}?)"')


def broken_in(relative: str, prose: list[tuple[int, str]]) -> list[str]:
    problems = []
    for first, text in prose:
        text = re.sub(r"\w+://\S+", " ", text)  # URLs
        for match in CANDIDATE.finditer(text):
            line = first + text.count("\n", 0, match.start())
            why = unresolved(match.group(1), match.group(2), relative)
            quoted = SECTION.match(text, match.end()) if match.group(1).endswith(".md") else None
            if not why and quoted:
                why = missing_section(match.group(1), re.sub(r"\s*#\s*|\s+", " ", quoted.group(1)), relative)
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


@cache
def headings(relative: str) -> tuple[str, ...]:
    """The titles of a Markdown page's headings, outside code blocks."""
    found, in_code = [], False
    for line in _text(relative).splitlines():
        if line.lstrip().startswith("```"):
            in_code = not in_code
        elif not in_code and re.match(r"#{1,6} ", line):
            found.append(line.lstrip("#").strip())
    return tuple(found)


def anchors(relative: str) -> set[str]:
    found, seen = set(), {}
    for title in headings(relative):
        base = slug(title)
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def broken_links(relative: str) -> list[str]:
    problems = []
    for number, line in enumerate(_text(relative).splitlines(), start=1):
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
    assert unresolved("farms/services.py", None, "README.md") is None
    assert unresolved("farms/models/", None, "README.md") is None
    assert unresolved("dataplane/kernel/", None, "README.md") is None
    assert unresolved("bench/RESULTS.md", None, "README.md") is None
    assert unresolved("tests/test_kernel_limits.py", None, "compiler/limits.py") == "no such file or folder"
    assert unresolved("DESIGN.md", None, "bench/README.md") == "no such file anywhere"
    assert unresolved("farms/nft/compiler.py", None, "README.md") == "no such file or folder"
    assert unresolved("topology.py", None, "tests/support/lab.py") is None  # bare: somewhere in the tree
    assert unresolved("runs/PASSES.md", None, "bench/README.md") is None  # beside the file that names it
    assert unresolved("kernel/nothing.py", None, "dataplane/applier.py") == "no such file or folder"
    assert unresolved("farms/object_edit.html", None, "farms/views/farm_views.py") is None  # a template, by its name
    assert unresolved("farms/object_view.html", None, "farms/views/farm_views.py") == "no such file or folder"
    assert unresolved("tests/repo/test_docs.py", "::test_the_check_tells_a_path_from_what_is_not_one", "x.md") is None
    assert "defines no" in unresolved("tests/repo/test_docs.py", "::test_nothing_of_the_kind", "x.md")
    not_ours = ["var/tls/lbweb.crt", ".venv/bin/python", "bench/results/dataplane.json", "application/json"]
    not_ours += ["systemd/network/", "acassen/keepalived", "tests/*/test_*.py", "bench/results/run-<time>.json"]
    for word in not_ours:
        assert unresolved(word, None, "README.md") is None, word
    assert unresolved("tests/nothing_*.py", None, "README.md") == "no such file or folder"
    text = "see /etc/lbweb/lbweb.env, $LBWEB_VAR_DIR/acme/x.py, https://example.com/a/b.py and /run/x/y.md"
    assert [m.group(1) for m in CANDIDATE.finditer(re.sub(r"\w+://\S+", " ", text))] == []
    assert missing_section("bench/runs/PASSES.md", "Three full runs", "x.py") is None
    assert "has no section" in missing_section("bench/runs/PASSES.md", "Four full runs", "x.py")
    assert broken_in("x.py", [(1, 'see bench/runs/PASSES.md, "Three\n    full runs"')]) == []  # across lines
    assert "has no section" in broken_in("x.py", [(1, 'bench/runs/PASSES.md, "Four full runs"')])[0]
    assert slug("## How a change reaches the kernel") == "how-a-change-reaches-the-kernel"
    assert slug("### `LBWEB_BIND` and the socket (systemd)") == "lbweb_bind-and-the-socket-systemd"


README_LINES = 200
SENTENCE_WORDS = 50


def sentences(markdown: str) -> list[str]:
    """The sentences of a page's prose: outside code blocks, cut at paragraphs, list items and table cells, then
    at a full stop (or ! ?) before a capital, a backtick, a parenthesis or a quote."""
    lines, in_code = [], False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            in_code = not in_code
        elif not in_code and not line.startswith("#"):
            lines.append(line)
    pieces = re.split(r"\n\s*\n|\n(?=\s*(?:[-*]|\d+\.) )|\|", "\n".join(lines))
    found = []
    for piece in pieces:
        found += re.split(r"(?<=[.!?])\s+(?=[A-Z`*(\"])", " ".join(piece.split()))
    return [sentence for sentence in found if sentence]


def test_the_readme_is_short_and_no_sentence_of_the_docs_runs_on():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    assert len(pages[0].read_text().splitlines()) <= README_LINES, "README.md: move the detail to a page of docs/"
    long = [
        f"{page.relative_to(ROOT)}: {len(s.split())} words: {s[:100]}..."
        for page in pages
        for s in sentences(page.read_text())
        if len(s.split()) > SENTENCE_WORDS
    ]
    assert not long, "sentences to cut in two:\n" + "\n".join(long)
    assert sentences("One. Two `x` here.\n\n- three words here\n\n```\nnot. Code.\n```\n| a b | c |") == [
        "One.",
        "Two `x` here.",
        "- three words here",
        "a b",
        "c",
    ]
