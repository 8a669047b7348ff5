"""The Kernel interface: everything the worker's Applier asks of the kernel, and nothing else.

Two implementations: the real one (``applier.Kernel`` in this process, ``sandbox.IsolatedKernel`` in the
worker, whose libnftables calls and netlink batches run in the kernel writer) and ``fake.FakeKernel``, an
in-memory nf_tables table that the Applier's own logic (coalescing, incremental or bulk, isolating a
refused unit, the ApplyRun bookkeeping, drift repair) is tested against without root and without a
kernel (``tests/test_applier_fake.py``), beside the real-kernel tests that stay.

Documents are libnftables JSON (``{"nftables": [...]}``) made by the pure compiler. Drift is read and
repaired through the same interface: :meth:`Interface.read_units` reads lbweb's tables whole and makes
a record (a fingerprint) of every unit, :meth:`Interface.probe_records` reads a few units back by name,
:meth:`Interface.removals` says how to remove what the kernel holds of some units, for :meth:`repair`,
and :meth:`Interface.written_records` gives the records made as units announced whole were committed.
What a removal is (netlink messages for the real kernel) is the implementation's own business.

No libnftables and no socket here: importing this module costs nothing and needs no privilege.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol, runtime_checkable

from compiler.types import Json


class ApplyError(Exception):
    """libnftables refused a document; ``message`` is the kernel's/parser's own text.

    ``uncertain``: the transaction may have been committed all the same (no answer came back), so
    only a read of the kernel tells what it holds."""

    def __init__(self, message: str, document: dict | None = None, *, uncertain: bool = False):
        super().__init__(message)
        self.message = message
        self.document = document
        self.uncertain = uncertain


@dataclass
class KernelState:
    """What lbweb's table holds right now, as read back from the kernel."""

    table_present: bool = False
    base_digest: str | None = None
    farm_digests: dict[str, str] = field(default_factory=dict)  # farm chain or "netdev <table>" -> digest
    chains: set[str] = field(default_factory=set)
    sets: set[str] = field(default_factory=set)
    shared_elements: set[tuple[str, str]] = field(default_factory=set)  # (map, canonical key)

    def dispatch_size(self) -> int:
        return len(self.shared_elements)


class CounterValue(NamedTuple):
    """What one named nftables counter has counted since it was created."""

    packets: int
    bytes: int


@runtime_checkable
class Interface(Protocol):
    """What the Applier needs of a kernel. Writes are one transaction each: all of it or nothing."""

    def check(self, document: Json) -> None:
        """Dry run: raise :class:`ApplyError` when the kernel would refuse ``document``; change nothing."""

    def apply(self, document: Json) -> None:
        """Commit ``document`` through libnftables (full rebuilds of a table the kernel holds, the skeleton)."""

    def prefetch(self, document: Json, context: list[Json], whole: Mapping[str, Any] | None = None) -> int:
        """Announce a change that :meth:`apply_incremental` of the same document object will commit: the
        kernel may start preparing it (the real one transcribes it in the scratch process meanwhile).
        Changes nothing in the kernel; a change never committed after it is forgotten. ``whole``: the
        units (key -> ``UnitObjects``) the change writes from nothing, whose records the kernel may make
        as it commits them, for :meth:`written_records`."""

    def apply_incremental(self, document: Json, context: list[Json]) -> str:
        """Commit a change of a few units; returns who wrote it: "netlink", "libnftables" or "none"."""

    def written_records(self) -> dict[str, Any]:
        """The records (fingerprints) of units announced ``whole`` and committed since the last call; a
        unit announced but missing here is not recorded, and must be read back (:meth:`read_units`)."""

    def repair(self, removals: list[Any], document: Json, context: list[Json]) -> str:
        """Remove (``removals``, from :meth:`removals`) and write again (``document``) in one transaction."""

    def release(self) -> None:
        """Let go of what writing a big change left behind (the memory of the processes that wrote it); the
        next call starts afresh. Changes nothing in the kernel."""

    def generation_id(self) -> int:
        """The ruleset generation: moves with every committed nf_tables transaction, whoever sends it."""

    def base_digest(self) -> str | None:
        """The digest lbweb's skeleton carries in the kernel (None: table or chain missing)."""

    def list_table(self, family: str = ..., name: str = ...) -> list[Json] | None:
        """The table as libnftables lists it (None: absent), for a rebuild to carry its learnt state."""

    def read_counters(self, names: Collection[str] | None = None) -> dict[str, CounterValue]:
        """Every named counter of lbweb's table, or those of ``names`` that it holds."""

    def dsr_tables(self) -> list[tuple[str, str]]:
        """lbweb's netdev tables (one per DSR farm) present in the kernel."""

    def capabilities(self) -> dict[str, bool]:
        """What this kernel can do (flowtables, each conntrack helper, reject in nat prerouting)."""

    def observe(self) -> KernelState:
        """Digests, names and dispatch entries of lbweb's tables (the comparison before fingerprints)."""

    def read_units(self, units: Mapping[str, Any]) -> Any:
        """lbweb's tables read whole: a ``drift.Reading`` (``present``, ``owners``, ``records``)."""

    def probe_records(
        self, owners: Any, units: Mapping[str, Any], maps: Iterable[str], previous: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The records of a few units just written, read back by name."""

    def removals(
        self, reading: Any, rewrite: set[str], wanted: Mapping[str, Any], expected: Mapping[str, Any]
    ) -> tuple[list[Any], set[tuple[str, str]]]:
        """What removes the kernel's version of the units in ``rewrite``, and the objects kept as they are
        (raises ``drift.CannotRepair`` when only a full rebuild can do)."""
