"""How a change of units goes to the kernel: in one transaction, or in several of whole units.

A small change is one transaction of lbweb's own netlink batch (``kernel/transcribe``), whose cost
follows the change, not the table. A bulk change (:func:`is_bulk`: many units, a quarter of the table
or more) goes to libnftables in one transaction while that is the quicker (up to
``LIBNFTABLES_BULK_COMMANDS``), else in transactions of lbweb's batch of at most
``BULK_TRANSACTION_COMMANDS`` commands (:func:`bulk_transactions`). A change the kernel refuses is
searched for the units it refuses (``isolation.py``), which are isolated, and the rest written.

The bounds can be set from the environment (``LBWEB_BULK_UNITS``, ...): for tests that drive the
real worker through the bulk paths with a handful of farms. They are read here at each change, so a
test may also set them on this module.
"""

from __future__ import annotations

import logging
import os
from typing import NamedTuple

import compiler
from compiler.types import Json

from . import isolation
from .fingerprints import ReadBack, store_fingerprints
from .kernel.interface import ApplyError, Interface
from .outcome import Outcome
from .unit_cache import UnitCache

log = logging.getLogger("lbweb.dataplane")

BULK_UNITS = int(os.environ.get("LBWEB_BULK_UNITS", "100"))


def is_bulk(changed: int, total: int) -> bool:
    """A change of more than BULK_UNITS farms and policies that is a quarter of the configuration or more:
    libnftables' cost follows the whole table, lbweb's batch the change, so for most of a small table
    libnftables is the quicker (up to ``LIBNFTABLES_BULK_COMMANDS``); a drift that big is repaired by a
    rebuild of the table, not unit by unit (the repair reads back and removes each unit by itself)."""
    return changed > BULK_UNITS and changed * 4 >= total


BULK_TRANSACTION_COMMANDS = int(os.environ.get("LBWEB_BULK_TRANSACTION_COMMANDS", "20000"))
# A bulk change (``is_bulk``) of at most this many commands goes to libnftables in one transaction:
# 1,000 farms of 10 backends are 99,000 commands (74,000 before the per-backend counter map and the named
# scheduler sets), which the worker applied in 3.1-3.2 s this way (~700 MB summed peak), where transactions of
# lbweb's own batch (``ChangeWriter._write_bulk``) took 3.5-3.7 s (bench/RESULTS.md, eighteenth pass; 2.5 s this way
# since the nineteenth, the table read back after the run is recorded). Beyond, libnftables' memory grows with
# the change (~3.2 GB at 10,000 farms), and the change goes in transactions.
LIBNFTABLES_BULK_COMMANDS = int(os.environ.get("LBWEB_LIBNFTABLES_BULK_COMMANDS", "120000"))


def command_count(unit: compiler.UnitRuleset | None, old: compiler.UnitObjects | None) -> int:
    """About how many commands a change of one unit takes: its removal (at most a flush and a delete of
    each chain, a delete of each object and element) and its creation."""
    removal = len(old.chains) * 2 + len(old.objects) + len(old.volatile) + len(old.elements) if old else 0
    return removal + (unit.size if unit else 0)


class Prepared(NamedTuple):
    """One transaction made ready: its document, the units it writes, and the context lbweb's batch needs."""

    document: Json
    written: list[str]
    context: list[Json]


def bulk_transactions(
    changed: list[str],
    compiled: dict[str, compiler.UnitRuleset],
    applied: dict[str, compiler.UnitObjects],
    limit: int | None = None,
) -> list[list[str]]:
    """``changed`` split into transactions of whole units, each of ``limit`` commands at most
    (``BULK_TRANSACTION_COMMANDS``; a unit larger than that goes alone).

    The limit comes from the scratch namespace, where libnftables loads each transaction: as an
    unprivileged user it cannot raise its socket's buffer, and refused a batch of 74,000 commands
    (1,000 farms of 10 backends) with "Message too long"; 37,000 went in.
    The order keeps what depends on what: the first transaction takes every unit that goes away and
    every policy and hook that comes or changes (farms match policies' sets, hooks hold the base
    chains), the farms follow, and the policies and hooks that go away come last, once no farm refers
    to them."""
    goes = [k for k in changed if k not in compiled]
    first = [k for k in goes if k.startswith("farm:")] + [
        k for k in changed if k in compiled and not k.startswith("farm:")
    ]
    farms = [k for k in changed if k in compiled and k.startswith("farm:")]
    last = [k for k in goes if not k.startswith("farm:")]

    def size(key: str) -> int:
        return command_count(compiled.get(key), applied.get(key))

    limit = limit or BULK_TRANSACTION_COMMANDS
    groups: list[list[str]] = []
    current: list[str] = list(first)
    budget = sum(size(k) for k in first)
    for key in farms:
        cost = size(key)
        if current and budget + cost > limit:
            groups.append(current)
            current, budget = [], 0
        current.append(key)
        budget += cost
    if last:
        current += last
    if current:
        groups.append(current)
    return groups


class ChangeWriter:
    """Writes one Applier's changes to ``kernel``, recording in ``cache`` what the kernel then holds and
    taking its fingerprints through ``read_back``."""

    def __init__(self, kernel: Interface, cache: UnitCache, read_back: ReadBack) -> None:
        self.kernel = kernel
        self.cache = cache
        self.read_back = read_back

    def write_isolating(
        self, compiled: dict[str, compiler.UnitRuleset], changed: list[str], outcome: Outcome, fingerprint: bool = True
    ) -> None:
        """:meth:`write`; when the kernel refuses it, the units it refuses are found by bisection and
        isolated, and the others written. An uncertain outcome is raised."""
        try:
            self.write(compiled, changed, outcome, fingerprint)
        except ApplyError as exc:
            if exc.uncertain:
                raise
            log.warning("the kernel refused a change of %d unit(s) (%s); finding which", len(changed), exc.message)
            order = sorted(changed, key=lambda k: (k in compiled, not k.startswith("policy"), k))  # removals first
            refused = isolation.bisect(order, lambda group: self.write(compiled, group, outcome, fingerprint), exc)
            refused = self._retry_alone(compiled, refused, outcome)
            outcome.changed = [k for k in changed if k not in refused]
            isolation.isolate(self.kernel, refused, outcome)

    def write(
        self, compiled: dict[str, compiler.UnitRuleset], keys: list[str], outcome: Outcome, fingerprint: bool = True
    ) -> None:
        """Send the change of ``keys`` as lbweb's own batch, one transaction (a bulk change: several,
        see :meth:`_write_bulk`), and remember what the kernel now holds (``fingerprint``: and what it
        looks like, unless the caller reads the whole table after). A small change is read back at once;
        what a bulk change did not record as it wrote is read once the run is recorded (``ReadBack.after_run``)."""
        applied = self.cache.applied()
        changed = compiler.changed_units(applied, compiled, keys)
        if not changed:
            return
        if len(changed) <= BULK_UNITS:
            document, written = self._commit(compiled, changed, outcome)
            if fingerprint:
                self.read_back.units(written, document)
            return
        commands = sum(command_count(compiled.get(k), applied.get(k)) for k in changed)
        recorded: set[str] = set()
        if is_bulk(len(changed), len(compiled)) and commands <= LIBNFTABLES_BULK_COMMANDS:
            self._commit(compiled, changed, outcome, libnftables=True)  # most of a small table: the quicker
        else:
            recorded = self._write_bulk(compiled, changed, outcome, fingerprint)
        if fingerprint:
            self.read_back.rest(changed, recorded, outcome)

    def _commit(
        self,
        compiled: dict[str, compiler.UnitRuleset],
        keys: list[str],
        outcome: Outcome,
        *,
        libnftables: bool = False,
        adding_in_context: bool = True,
    ) -> tuple[Json, list[str]]:
        """One transaction of the change of ``keys``, recorded as applied; (its document, the units it
        changed). ``libnftables``: written by libnftables, not lbweb's batch; ``adding_in_context``: the
        units the change adds are loaded in scratch before it (a bulk transaction leaves them out: their
        own commands define them)."""
        prepared = self._prepare(compiled, keys, adding_in_context=adding_in_context, context=not libnftables)
        self._commit_prepared(compiled, prepared, outcome, libnftables=libnftables)
        return prepared.document, prepared.written

    def _prepare(
        self,
        compiled: dict[str, compiler.UnitRuleset],
        keys: list[str],
        *,
        adding_in_context: bool,
        context: bool = True,
    ) -> Prepared:
        """The document of one transaction of the change of ``keys`` and, for lbweb's batch, its context."""
        applied = self.cache.applied()
        document, written = compiler.incremental_document(applied, compiled, only=set(keys))
        if not written or not context:
            return Prepared(document, written, [])
        in_context = written if adding_in_context else [k for k in written if k in applied]
        return Prepared(document, written, compiler.incremental_context(compiled, in_context))

    def _commit_prepared(
        self,
        compiled: dict[str, compiler.UnitRuleset],
        prepared: Prepared,
        outcome: Outcome,
        *,
        libnftables: bool = False,
    ) -> None:
        if not prepared.written:
            return
        if libnftables:
            self.kernel.apply(prepared.document)
            outcome.writer = "libnftables"
        else:
            said = self.kernel.apply_incremental(prepared.document, prepared.context)
            # a transaction of disabled farms alone writes nothing ("none"): the run keeps who wrote the others
            outcome.writer = outcome.writer if said == "none" and outcome.writer else said
        outcome.commands += len(prepared.document["nftables"])
        self.cache.store_applied(compiled, prepared.written)

    def _write_bulk(
        self, compiled: dict[str, compiler.UnitRuleset], changed: list[str], outcome: Outcome, fingerprint: bool = True
    ) -> set[str]:
        """A change of more than BULK_UNITS units (an import, the first apply of a restored database) that
        libnftables would not take more quickly (``LIBNFTABLES_BULK_COMMANDS``), in transactions of at
        most ``BULK_TRANSACTION_COMMANDS`` commands (``bulk_transactions``), each lbweb's own batch.

        Why not one libnftables transaction, as before: libnftables holds the whole change at once,
        parsed and evaluated, ~3.2 GB for 10,000 farms of 10 backends (``nft -j -f`` of that document
        alone); the worker's processes peaked at 5.2 GB together, 1.25 GB this way (842 MB once the
        writer is ended after it, the pool is Celery's solo one and the read-back keeps hashes). Several libnftables
        transactions cost more than one: before each, libnftables reads every chain, set and counter of
        the table (96 s for 10,000 farms in chunks of 1,000, against 66 s at once). lbweb's own batch
        does not read the table; each transaction is loaded in the scratch namespace alone (the units it
        adds carry their own definitions, so only the units it changes are loaded first as the kernel
        holds them). The price was time: the full apply of those 10,000 farms took 100 s, 80 s through
        libnftables on the same machine (``bench/control_plane.py``); now see bench/RESULTS.md.
        Each transaction holds whole units: a farm is never half written. A refused transaction raises,
        those before it stay written and recorded, and the caller's search for the refused unit finds
        them unchanged. Each transaction is announced to the kernel (``prefetch``) before the one before
        it is committed, so the scratch process loads it while the kernel writer commits the other.

        ``fingerprint``: the units a transaction writes from nothing are announced ``whole``, and the records
        the kernel makes of them as it commits (``Kernel.written_records``) are stored at once; returns
        those units, so the caller reads back only the others (``ReadBack.rest``)."""
        recorded: set[str] = set()

        def announce(prepared: Prepared) -> None:
            whole = {}
            if fingerprint:
                applied = self.cache.applied()
                whole = {k: compiled[k].objects for k in prepared.written if k in compiled and k not in applied}
            self.kernel.prefetch(prepared.document, prepared.context, whole)

        try:
            groups = bulk_transactions(changed, compiled, self.cache.applied())
            following = self._prepare(compiled, groups[0], adding_in_context=False) if groups else None
            if following is not None and following.written:
                announce(following)
            for group in [*groups[1:], None]:
                # The next transaction is announced before this one is committed: the kernel writer's
                # scratch process loads it meanwhile. Units of one transaction are in no other, so its
                # document does not depend on this one being recorded first.
                current = following
                following = None if group is None else self._prepare(compiled, group, adding_in_context=False)
                if following is not None and following.written:
                    announce(following)
                self._commit_prepared(compiled, current, outcome)
                if fingerprint and current.document["nftables"]:
                    records = self.kernel.written_records()
                    store_fingerprints(records)
                    recorded |= records.keys()
        finally:  # the processes that wrote it let go of their memory before the worker reads anything back
            self.kernel.release()
        return recorded

    def _retry_alone(self, compiled: dict, refused: dict[str, str], outcome: Outcome) -> dict[str, str]:
        """A unit refused before the rest of its change went in (a port another farm frees in the same
        change) gets one more try alone; a crash is not retried (it comes back with the same input)."""
        left = {}
        for key, message in refused.items():
            if message.startswith("crashed"):
                left[key] = message
                continue
            try:
                self.write(compiled, [key], outcome)
            except ApplyError as exc:
                if exc.uncertain:
                    raise
                left[key] = exc.message
        return left
