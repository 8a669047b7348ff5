"""The Kernel interface: what the worker's Applier needs of the kernel, and nothing it can derive.

Two implementations: the real one (``applier.Kernel`` in this process, ``sandbox.IsolatedKernel`` in the
worker, whose libnftables calls and netlink batches run in the kernel writer) and ``fake.FakeKernel``, an
in-memory nf_tables table that the Applier's own logic (coalescing, incremental or bulk, isolating a
refused unit, the ApplyRun bookkeeping, drift repair) is tested against without root and without a
kernel (``tests/dataplane/test_applier_fake.py``), beside the real-kernel tests that stay.

In the spirit of knftables' ``Run``/``Check``/``List``/``Present``, three kinds of operation:

- run a transaction: :meth:`Interface.check` (a dry run), :meth:`Interface.apply` (libnftables),
  :meth:`Interface.apply_incremental` (lbweb's own batch) and :meth:`Interface.repair` (removals and
  writes in one batch), with :meth:`Interface.prefetch`, :meth:`Interface.written_records` and
  :meth:`Interface.release` around the transactions of a bulk change;
- say what is present: :meth:`Interface.generation_id`, :meth:`Interface.base_digest`;
- list what the table holds: :meth:`Interface.list_table`, :meth:`Interface.dsr_tables`,
  :meth:`Interface.read_counters`, and as drift records (fingerprints) :meth:`Interface.read_units` (the
  tables whole) and :meth:`Interface.probe_records` (a few units by name).

Derived above it, from these: what the kernel can do (``capabilities.probe``, dry runs of probes), the
digests and names of a table written before fingerprints (``dataplane.fingerprints.observe``, from the
listing), and what removes a drifted unit (``Reading.removals``: a question about what was read, not
the kernel's). Each method that stays costs the fake an implementation; why each cannot go:
``base_digest`` is asked before every change and must not cost what a listing costs (16 s at 10,000
farms); ``read_counters`` carries the counters of a rebuild even when libnftables cannot list the
table; ``read_units``/``probe_records`` read netlink, whose records the real kernel must make from its
own messages, by name for a small change (its cost, not the table's).

Documents are libnftables JSON (``{"nftables": [...]}``) made by the pure compiler.

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
    """What lbweb's table holds right now, as read back from the kernel (``fingerprints.observe``)."""

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
        """Remove (``removals``, from ``Reading.removals`` of :meth:`read_units`' reading) and write again
        (``document``) in one transaction."""

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

    def read_units(self, units: Mapping[str, Any]) -> Any:
        """lbweb's tables read whole: a ``drift.Reading`` (``present``, ``owners``, ``records``; its
        ``removals`` says how to remove what was read of some units)."""

    def probe_records(
        self, owners: Any, units: Mapping[str, Any], maps: Iterable[str], previous: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The records of a few units just written, read back by name."""
