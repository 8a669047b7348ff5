"""lbweb's nftables compiler: farm and policy specs in, nftables JSON out, pure (compiler/README.md).

What the web's preview and the worker call; the names of the table's objects are in ``compiler.names``,
the scheduler's in ``compiler.schedulers``, the skeleton's in ``compiler.hooks``.
"""

from .build import compile_farm, compile_policy, compile_units
from .diff import changed_units, incremental_context, incremental_document, removal_commands
from .documents import document, full_document, merge_elements, ordered
from .hooks import base_commands, base_digest, compile_hooks, farm_needs, hooks_for
from .names import farm_key, policy_key
from .units import COMPILER_VERSION, UnitObjects, UnitRuleset, canonical, digest_of

__all__ = [
    "COMPILER_VERSION",
    "UnitObjects",
    "UnitRuleset",
    "base_commands",
    "base_digest",
    "canonical",
    "changed_units",
    "compile_farm",
    "compile_hooks",
    "compile_policy",
    "compile_units",
    "digest_of",
    "document",
    "farm_key",
    "farm_needs",
    "full_document",
    "hooks_for",
    "incremental_context",
    "incremental_document",
    "merge_elements",
    "ordered",
    "policy_key",
    "removal_commands",
]
