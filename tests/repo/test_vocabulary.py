"""One vocabulary: each name the processes share is spelled in one place, and a second spelling fails here.

The choice sets are farms/choices.py's (the compiler, which may not import Django, has the one mapping
it needs, helper -> protocol, in compiler/spec.py); Redis keys are lbweb/redis_keys.py's; the ``Json``
alias is compiler/types.py's; the polling helper is tests/support/stack.py's ``wait_until``.
"""

from __future__ import annotations

import ast
import importlib
import re
import tomllib
from pathlib import Path

from django.db import models

from compiler.spec import HELPER_PROTOCOL
from farms import choices
from tests.support.stack import ROOT

PACKAGES = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["root_packages"]
CHOICES = ("farms.choices", "l7.choices", "network.choices", "cluster.choices")
SOURCES = sorted(
    p for package in PACKAGES for p in (ROOT / package).rglob("*.py") if "migrations" not in p.parts
)  # fmt: skip
EVERYTHING = SOURCES + sorted((ROOT / "tests").rglob("*.py")) + sorted((ROOT / "bench").glob("*.py"))


def choice_sets() -> dict[str, frozenset[str]]:
    found = {}
    for module in map(importlib.import_module, CHOICES):
        for name in dir(module):
            value = getattr(module, name)
            if isinstance(value, type) and issubclass(value, models.TextChoices) and value is not models.TextChoices:
                found[f"{module.__name__}.{name}"] = frozenset(v for v in value.values if v)
    return found


def literal_strings(node: ast.AST) -> frozenset[str] | None:
    """The strings of a tuple, list, set or dict-keys literal made only of strings (else None)."""
    items = node.keys if isinstance(node, ast.Dict) else getattr(node, "elts", None)
    if not items or len(items) < 2:
        return None
    if not all(isinstance(i, ast.Constant) and isinstance(i.value, str) for i in items):
        return None
    return frozenset(i.value for i in items)


def shadows(path: Path, sets: dict[str, frozenset[str]]) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Tuple | ast.List | ast.Set | ast.Dict):
            continue
        strings = literal_strings(node)
        for name, values in sets.items():
            if strings and len(values) > 2 and strings == values:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} repeats {name}")
    return found


def test_the_helper_choices_are_the_helpers_the_compiler_knows():
    helpers = choice_sets()["farms.choices.HelperChoices"]
    assert helpers == set(HELPER_PROTOCOL)
    assert set(HELPER_PROTOCOL.values()) <= set(choices.FarmProtocolChoices.values)


# Mappings keyed by every value of a choice set, in modules that may not import Django or that say
# more than the choices' labels: each must keep covering exactly its choices (checked below), so a new
# choice cannot be forgotten there.
MAPPINGS = {
    "compiler/spec.py": "farms.choices.HelperChoices",  # helper -> protocol, the compiler's
    "compiler/fragments.py": "farms.choices.HashFieldChoices",  # hash field -> packet field
    "network/plan.py": "network.choices.InterfaceKindChoices",  # kind -> order of creation
    "dataplane/network/kernel.py": "network.choices.BondModeChoices",  # bond mode -> the kernel's number
}


def test_no_module_repeats_a_choice_set_of_choices_py():
    sets = choice_sets()
    homes = set(MAPPINGS) | {f"{module.replace('.', '/')}.py" for module in CHOICES}
    found = [s for p in SOURCES if str(p.relative_to(ROOT)) not in homes for s in shadows(p, sets)]
    assert found == []


def test_each_mapping_of_a_choice_set_covers_exactly_its_choices():
    sets = choice_sets()
    for path, name in MAPPINGS.items():
        assert any(s.endswith(f"repeats {name}") for s in shadows(ROOT / path, sets)), (path, name)


def test_the_shadow_check_sees_a_repeated_choice_set(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text(f"MODES = {tuple(choices.FarmModeChoices.values)!r}\n")
    sets = choice_sets()
    found = []
    for node in ast.walk(ast.parse(planted.read_text())):
        strings = literal_strings(node) if isinstance(node, ast.Tuple) else None
        found += [name for name, values in sets.items() if strings == values]
    assert found == ["farms.choices.FarmModeChoices"]


# "lbweb:" then a name: a Redis key (the digest prefix ends at the colon)
REDIS_KEY = re.compile(r"""["']lbweb:[a-z{]""")


def test_redis_keys_are_spelled_only_in_redis_keys_py():
    found = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in EVERYTHING
        if p not in (ROOT / "lbweb" / "redis_keys.py", Path(__file__))
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if REDIS_KEY.search(line)
    ]
    assert found == []
    assert REDIS_KEY.search('KEY = "lbweb:capabilities"') and not REDIS_KEY.search('DIGEST_PREFIX = "lbweb:"')


def test_json_and_wait_until_are_defined_once():
    definitions = {
        "Json": re.compile(r"^Json = ", re.M),
        "wait_until": re.compile(r"^def (wait_until|wait_for)\(", re.M),
    }
    for name, pattern in definitions.items():
        where = [str(p.relative_to(ROOT)) for p in EVERYTHING for _ in pattern.finditer(p.read_text())]
        assert len(where) == 1, (name, where)


NETLINK_NUMBERS = re.compile(r"^[A-Z0-9_, ]*\b(NFNL_SUBSYS_\w+|NFT_MSG_\w+|NFTA_\w+|CTA_\w+|IPCTNL_\w+)\s*[,=]", re.M)


def test_nf_tables_and_ctnetlink_numbers_are_defined_once():
    homes = {ROOT / "dataplane" / "kernel" / "nfmsg.py", ROOT / "dataplane" / "kernel" / "conntrack.py"}
    elsewhere = [
        f"{p.relative_to(ROOT)}: {m.group(1)}"
        for p in EVERYTHING
        if p not in homes
        for m in NETLINK_NUMBERS.finditer(p.read_text())
    ]
    assert elsewhere == []
    assert NETLINK_NUMBERS.search("NFTA_OBJ_TABLE, NFTA_OBJ_NAME = 1, 2\n")
    assert "NFNL_SUBSYS_NFTABLES" in (ROOT / "dataplane" / "kernel" / "nfmsg.py").read_text()
