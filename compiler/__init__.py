"""lbweb's nftables compiler: farm and policy specs in, nftables JSON out, pure (compiler/README.md).

What the web's preview and the worker call; the names of the table's objects are in ``compiler.names``,
the scheduler's in ``compiler.schedulers``, the skeleton's in ``compiler.hooks``.

Each export is loaded on first use: ``compiler.cluster`` and ``compiler.haproxy`` live in this package
too, and the cluster's transition handler (the failover's critical path) imports ``compiler.cluster``,
which must not cost it the whole nftables compiler (some 10 ms) at every transition.
"""

from __future__ import annotations

import importlib
from typing import Any

# What is exported, by the module that holds it.
_HOMES = {
    "build": ("compile_farm", "compile_policy", "compile_units"),
    "diff": ("changed_units", "incremental_context", "incremental_document", "removal_commands"),
    "documents": ("document", "full_document", "merge_elements", "ordered"),
    "hooks": ("base_commands", "base_digest", "compile_hooks", "farm_needs", "hooks_for"),
    "names": ("farm_key", "policy_key"),
    "units": ("COMPILER_VERSION", "UnitObjects", "UnitRuleset", "canonical", "digest_of"),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}

__all__ = sorted(_HOME_OF)


def __getattr__(name: str) -> Any:
    module = _HOME_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # found once: later lookups are plain attribute reads
    return value
