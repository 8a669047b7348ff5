"""Import contracts: the compiler is pure, the web process never loads kernel code, models import nothing above
them, and the apps import of monitoring only its metric store.

Two views of the same rule. ``lint-imports`` (contracts in pyproject.toml, also run by deploy/test.sh)
reads every import statement, those inside functions included, so an import that only runs on some
request is caught before it runs. A static graph cannot follow what Django loads by name (the URLconf's
``include("farms.urls")``, INSTALLED_APPS), so the probe below loads the web process as gunicorn does,
resolves every URL (which imports every view) and looks at what really got imported. Each check is shown
to fail on a planted import.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.support.stack import ROOT, VENV_BIN

# What the web process must never load: the code of the other processes (the worker's, the collector's,
# healthd's) and kernel I/O. Django imports each of those packages itself (INSTALLED_APPS, for their management
# commands), so the bare package is allowed; a module of it is not.
OTHER_PROCESSES = ("dataplane", "collector", "healthd")
FORBIDDEN_IN_WEB = tuple(f"{package}." for package in OTHER_PROCESSES)
FORBIDDEN_EXTERNAL = ("nftables", "pyroute2")

WEB_PROBE = """
import json, os, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "lbweb.settings")
from lbweb.wsgi import application  # django.setup(): every app, its models and admin
from django.urls import URLResolver, get_resolver

def walk(patterns):
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            walk(pattern.url_patterns)  # imports the included URLconf and its views

walk(get_resolver().url_patterns)
for extra in sys.argv[1:]:  # a planted import, to show the probe notices it
    __import__(extra)
print(json.dumps(sorted(sys.modules)))
"""

COMPILER_PROBE = """
import json, pkgutil, sys
import compiler
for module in pkgutil.iter_modules(compiler.__path__):
    __import__(f"compiler.{module.name}")
for extra in sys.argv[1:]:
    __import__(extra)
print(json.dumps(sorted(sys.modules)))
"""

FAILOVER_PROBE = """
import json, sys
import dataplane.cluster.transition, dataplane.l7.engine
for extra in sys.argv[1:]:
    __import__(extra)
print(json.dumps(sorted(sys.modules)))
"""
NFTABLES_COMPILER = ("compiler.build", "compiler.spec", "compiler.units")


def loaded(probe: str, *extra: str) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-c", probe, *extra], cwd=ROOT, capture_output=True, text=True, check=True, timeout=120
    )
    return json.loads(result.stdout)


def offending(modules: list[str], forbidden: tuple[str, ...]) -> list[str]:
    """The modules that are, or sit below, one of ``forbidden`` (a name ending in "." means only below it)."""
    return [
        m
        for m in modules
        if any(m.startswith(f) if f.endswith(".") else m == f or m.startswith(f + ".") for f in forbidden)
    ]


def test_the_web_process_loads_no_kernel_code():
    modules = loaded(WEB_PROBE)
    assert "farms.views" in modules and "farms.preview" in modules and "farms.api.views" in modules
    assert "farms.specs" in modules  # the preview's row -> spec translation, free of kernel I/O
    assert offending(modules, FORBIDDEN_IN_WEB + FORBIDDEN_EXTERNAL) == []


def test_the_web_probe_notices_a_kernel_import():
    modules = loaded(WEB_PROBE, "dataplane.applier")
    assert "dataplane.kernel.applier" in offending(modules, FORBIDDEN_IN_WEB)
    assert "nftables" in offending(modules, FORBIDDEN_EXTERNAL)


def test_the_compiler_loads_no_django_and_no_kernel_code():
    modules = loaded(COMPILER_PROBE)
    assert "compiler.diff" in modules and "compiler.carry" in modules
    assert offending(modules, ("django", "farms.models", "dataplane.kernel", *FORBIDDEN_EXTERNAL)) == []
    assert offending(loaded(COMPILER_PROBE, "dataplane.kernel.applier"), ("dataplane.kernel",)) != []


def test_the_failover_path_loads_no_nftables_compiler():
    """The transition handler imports ``compiler.cluster``, the HAProxy engine ``compiler.haproxy``: the
    package's exports load on first use (compiler/__init__.py), so neither pays for the nftables compiler."""
    modules = loaded(FAILOVER_PROBE)
    assert "compiler.cluster.spec" in modules and "compiler.haproxy.config" in modules
    assert offending(modules, NFTABLES_COMPILER) == []
    assert offending(loaded(FAILOVER_PROBE, "compiler.documents"), NFTABLES_COMPILER) != []


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    command = [str(VENV_BIN / "lint-imports"), "--no-cache"]
    return subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=120)


def test_the_import_contracts_hold():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    kept = len(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"])
    assert f"{kept} kept, 0 broken" in result.stdout


def plant(tmp_path: Path, module: str, line: str) -> Path:
    """A copy of the project's packages with one more import in ``module``."""
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["root_packages"]
    for package in packages:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    path = tmp_path / (module.replace(".", "/") + ".py")
    path.write_text(path.read_text() + f"\n{line}  # noqa\n")
    return tmp_path


PLANTED = {
    # inside a function: it would only run on some request, and lint-imports still sees it
    "a kernel import in a lazy web function": (
        "farms.forms", "def later():\n    from dataplane.kernel import conntrack",
        "farms.forms -> dataplane.kernel.conntrack",
    ),
    "Django in the HAProxy generator": (
        "compiler.haproxy.config", "from django.conf import settings", "compiler.haproxy.config -> django"
    ),
    "worker code in the HTTP farm API": (
        "l7.api", "def later():\n    from dataplane.l7 import applier", "l7.api -> dataplane.l7.applier"
    ),
    "Django in the compiler": ("compiler.limits", "from django.conf import settings", "compiler.limits -> django"),
    # inside a method, as Farm.traffic and ConfigVersion.document did: the circle "models-below" forbids
    "a model that imports its services": (
        "farms.models.configuration", "def later():\n    from farms import services",
        "farms.models.configuration -> farms.services",
    ),
    "a model that imports another app's views": (
        "l7.models", "def later():\n    from farms import views", "l7.models -> farms.views"
    ),
    "a farms page that imports monitoring's pages": (
        "farms.views.page_parts", "from monitoring import selectors", "farms.views.page_parts -> monitoring.selectors"
    ),
    "Django in the failover path": (
        "dataplane.cluster.transition", "from django.conf import settings", "dataplane.cluster.transition -> django"
    ),
}  # fmt: skip


@pytest.mark.parametrize(("module", "line", "chain"), PLANTED.values(), ids=PLANTED.keys())
def test_the_contracts_fail_on_a_planted_import(tmp_path, module, line, chain):
    result = lint_imports(plant(tmp_path, module, line))
    assert result.returncode != 0
    assert chain in result.stdout
