"""The real Kernel (``interface.Interface``): libnftables and lbweb's own netlink, in this process.

It loads Debian's libnftables through python-nftables, checks a document with a dry run, commits it
as one transaction or as lbweb's own netlink batch (``transcribe``, ``nfmsg``), and reads lbweb's
table back (``drift``) so the control plane can compare the kernel with the database. The worker
runs its libnftables calls and batches in the kernel writer instead (``sandbox``).
"""

from __future__ import annotations

import ctypes
import errno
import gc
import json
import logging
import re
import struct
from collections.abc import Collection, Iterable, Iterator, Mapping
from typing import Any

import nftables

from compiler import merge_elements
from compiler.fragments import TABLE_FAMILY, TABLE_NAME
from compiler.hooks import BASE_CHAIN, BASE_DIGEST_PREFIX
from compiler.units import UnitObjects

from . import drift, netlink, nfmsg, steps
from .interface import ApplyError, CounterValue, KernelState  # noqa: F401 (their home was here)
from .scratch import ScratchCrashed, scratch
from .transcribe import Transcription, Untranscribable, transcribe

log = logging.getLogger(__name__)

BE64 = struct.Struct(">Q")
COUNTERS_BY_DUMP = 50_000  # more counters than this are read by name (see Kernel.read_counters)


# One counter object as the kernel dumps it: NAME, TYPE (counter), a few 4-byte-aligned attributes
# (handle, use), then DATA with BYTES and PACKETS. Checked against the message count; else parsed in full.
COUNTER_MESSAGE = re.compile(
    rb"\x02\x00([^\x00]+)\x00+\x08\x00\x03\x00\x00\x00\x00\x01(?:.{4}){0,12}?"
    rb"\x1c\x00\x04[\x00\x80]\x0c\x00\x01\x00(.{8})\x0c\x00\x02\x00(.{8})",
    re.DOTALL,
)


# Every counter message names its table first: counting this attribute counts the messages.
TABLE_ATTRIBUTE = netlink.attr(nfmsg.OBJ_TABLE, TABLE_NAME.encode() + b"\0")


def _parse_counter(data: bytes, start: int, end: int) -> tuple[str | None, CounterValue]:
    """One counter object's name and values, attribute by attribute."""
    name, packets, octets = None, 0, 0
    for kind, a, b in netlink.attrs(data, start, end):
        if kind == nfmsg.OBJ_NAME:
            name = data[a : b - 1].decode()
        elif kind == nfmsg.OBJ_DATA:
            for inner, c, _d in netlink.attrs(data, a, b):
                if inner == nfmsg.COUNTER_BYTES:
                    (octets,) = BE64.unpack_from(data, c)
                elif inner == nfmsg.COUNTER_PACKETS:
                    (packets,) = BE64.unpack_from(data, c)
    return name, CounterValue(packets, octets)


def _counters_in(data: bytes, expected: int, counters: dict[str, CounterValue]) -> None:
    """Add the counter objects of one received buffer (``expected`` of them) to ``counters``."""
    found = COUNTER_MESSAGE.findall(data)
    if len(found) == expected:  # every message matched: the usual layout
        for name, octets, packets in found:
            counters[name.decode()] = CounterValue(int.from_bytes(packets), int.from_bytes(octets))
        return
    for start, end in netlink.message_spans(data):
        name, value = _parse_counter(data, start, end)
        if name is not None:
            counters[name] = value


def _rule_comments(data: bytes, start: int, end: int) -> Iterator[str]:
    """The comment of one rule message: libnftnl's user data (type, length, value) in NFTA_RULE_USERDATA."""
    for kind, a, b in netlink.attrs(data, start, end):
        if kind != nfmsg.RULE_USERDATA:
            continue
        while a + 2 <= b:
            udata_type, length = data[a], data[a + 1]
            if udata_type == nfmsg.UDATA_RULE_COMMENT:
                yield data[a + 2 : a + 2 + length].rstrip(b"\0").decode(errors="replace")
            a += 2 + length


class Kernel:
    """The real :class:`interface.Interface`: a libnftables context bound to the current network
    namespace (made on first use), and lbweb's own netlink reads and batches.

    In the worker every call into libnftables goes through ``sandbox.IsolatedKernel`` instead,
    which runs this class in a child process."""

    _context: nftables.Nftables | None = None

    def __init__(self) -> None:
        # prefetch's announced changes, by token: the document, its transcription, the units it writes whole
        self._ahead: dict[int, tuple[dict, Transcription, Mapping[str, UnitObjects]]] = {}
        self._next_token = 0
        self._written: dict[str, drift.Record] = {}  # records made at the commits, for written_records()

    @property
    def _nft(self) -> nftables.Nftables:
        if self._context is None:
            self._context = nftables.Nftables()
            self._context.set_json_output(True)
            self._context.set_handle_output(False)
            # python-nftables from PyPI predates set_dry_run(); libnftables has it.
            self._lib = ctypes.CDLL("libnftables.so.1")
            self._lib.nft_ctx_set_dry_run.argtypes = [ctypes.c_void_p, ctypes.c_bool]
        return self._context

    def _cmd(self, text: str, step: str = steps.READ) -> tuple[int, str, str]:
        steps.enter(step, text)
        return self._nft.cmd(text)

    def _set_dry_run(self, on: bool) -> None:
        context = self._nft._Nftables__ctx  # makes the context (and self._lib) on first use
        self._lib.nft_ctx_set_dry_run(context, on)

    def _run(self, document: dict, step: str) -> None:
        rc, _out, err = self._cmd(json.dumps(document), step)
        if rc != 0:
            raise ApplyError((err or f"libnftables returned {rc}").strip(), document)

    def check(self, document: dict) -> None:
        """Dry run: parse and validate against the kernel without committing."""
        self._set_dry_run(True)
        try:
            self._run(document, steps.DRY_RUN)
        finally:
            self._set_dry_run(False)

    def apply(self, document: dict) -> None:
        """Commit the whole document as one atomic transaction, or nothing."""
        if document.get("nftables"):
            self._run(merge_elements(document), steps.COMMIT)

    def apply_text(self, text: str) -> None:
        """:meth:`apply` of a document already in JSON text (what the kernel writer is sent)."""
        rc, _out, err = self._cmd(text, steps.COMMIT)
        if rc != 0:
            raise ApplyError((err or f"libnftables returned {rc}").strip())

    def release(self) -> None:
        """The end of a bulk change: Python's cyclic collector runs again (:meth:`prefetch` stopped it). The
        libnftables context is reused."""
        gc.enable()

    def prefetch(self, document: dict, context: list[dict], whole: Mapping[str, UnitObjects] | None = None) -> int:
        """Start transcribing a change that a later :meth:`apply_incremental` (or :meth:`apply_prefetched`
        with the token returned) will commit: its scratch loads run in the scratch process meanwhile.

        A bulk apply announces each transaction before it commits the one before, so the scratch process
        loads the next while this one builds and commits the current. The two took turns before: the full
        apply of 10,000 farms kept one of two cores idle a third of the time. Only the last two are kept.

        ``whole``: the units the change writes whole (new ones); once it is committed as lbweb's batch,
        their records are made from what the scratch namespace made of them (``drift.written_records``)
        and kept for :meth:`written_records`, so the table need not be read back for them."""
        gc.disable()  # until release(): the transactions allocate millions of objects, with no cycles worth a scan
        self._next_token += 1
        token = self._next_token
        self._ahead[token] = (document, Transcription(document, context, scratch()), whole or {})
        while len(self._ahead) > 2:
            self._ahead.pop(next(iter(self._ahead)))
        return token

    def apply_prefetched(self, token: int) -> str | None:
        """:meth:`apply_incremental` of the change :meth:`prefetch` announced under ``token``; None, having
        done nothing, when this process does not know it (a new kernel writer since): send it whole."""
        if token not in self._ahead:
            return None
        document, transcription, whole = self._ahead.pop(token)
        return self._apply_transcribed(document, transcription, whole)

    def apply_incremental(self, document: dict, context: list[dict]) -> str:
        """Commit a change as one transaction written by lbweb itself (see ``transcribe``), so its cost
        does not grow with the number of farms; libnftables does it when it cannot be transcribed.
        Returns who wrote it: "netlink" or "libnftables"."""
        if not document.get("nftables"):
            return "none"
        for token, (announced, transcription, whole) in list(self._ahead.items()):
            if announced is document:
                del self._ahead[token]
                return self._apply_transcribed(document, transcription, whole)
        return self._apply_transcribed(document, Transcription(document, context, scratch()))

    def written_records(self) -> dict[str, drift.Record]:
        """The records made at the commits since the last call (see :meth:`prefetch`'s ``whole``); a unit
        not among them was not recorded (libnftables wrote it, or it uses an anonymous set): read it back."""
        written, self._written = self._written, {}
        return written

    def _apply_transcribed(
        self, document: dict, transcription: Transcription, whole: Mapping[str, UnitObjects] | None = None
    ) -> str:
        try:
            messages = transcription.messages()
        except ScratchCrashed as exc:  # libnftables died on this input: on the real table it would too
            raise ApplyError(str(exc), document) from exc
        except Untranscribable as exc:
            log.info("libnftables applies this change: %s", exc)
            self.apply(document)
            return "libnftables"
        steps.enter(steps.BATCH, messages)
        try:
            nfmsg.commit(messages)
        except nfmsg.BatchRefused as exc:
            raise ApplyError(str(exc), document) from exc
        except OSError as exc:  # not sent, or no answer: the caller rebuilds the table to be sure
            raise ApplyError(f"netlink batch: {exc}", document, uncertain=True) from exc
        made = transcription.made((TABLE_FAMILY, TABLE_NAME)) if whole else None
        if made is not None:
            self._written.update(drift.written_records(made, whole))
        return "netlink"

    def repair(self, removals: list[nfmsg.Message], document: dict, context: list[dict]) -> str:
        """Remove what the kernel holds of drifted units (``removals``, made from what it dumped) and
        write them again (``document``), in one transaction. Raises :class:`Untranscribable` when the
        document needs libnftables (the caller rebuilds instead) and :class:`ApplyError` when the
        kernel refuses the batch (nothing changed)."""
        try:
            messages = transcribe(document, context, scratch()) if document.get("nftables") else []
        except ScratchCrashed as exc:  # libnftables died on this input: on the real table it would too
            raise ApplyError(str(exc), document) from exc
        steps.enter(steps.BATCH, removals + messages)
        try:
            nfmsg.commit(removals + messages)
        except nfmsg.BatchRefused as exc:
            raise ApplyError(str(exc), document) from exc
        except OSError as exc:
            raise ApplyError(f"netlink batch: {exc}", document) from exc
        return "netlink"

    def generation_id(self) -> int:
        """The namespace's ruleset generation (moves with every committed nf_tables transaction)."""
        return nfmsg.generation_id()

    def list_table(self, family: str = TABLE_FAMILY, name: str = TABLE_NAME) -> list[dict[str, Any]] | None:
        rc, out, _err = self._cmd(f"list table {family} {name}")
        if rc != 0:
            return None
        return json.loads(out)["nftables"] if out else []

    def list_set(self, name: str) -> list[Any] | None:
        """The elements of one of lbweb's sets (with their remaining timeout), or None if it is absent."""
        rc, out, _err = self._cmd(f"list set {TABLE_FAMILY} {TABLE_NAME} {name}")
        if rc != 0:
            return None
        for item in json.loads(out)["nftables"]:
            if "set" in item:
                return item["set"].get("elem", [])
        return []

    def dsr_tables(self) -> list[tuple[str, str]]:
        """lbweb's netdev tables (one per DSR farm) present in the kernel."""
        rc, out, _err = self._cmd("list tables")
        if rc != 0 or not out:
            return []
        tables = [i["table"] for i in json.loads(out)["nftables"] if "table" in i]
        return [(t["family"], t["name"]) for t in tables if t["family"] == "netdev" and t["name"].startswith("lbweb-")]

    def read_counters(self, names: Collection[str] | None = None) -> dict[str, CounterValue]:
        """The named counters of lbweb's table ({} without the table): every one, or those of ``names``
        that exist. Read-only netlink, no libnftables.

        The same data as ``list counters table inet lbweb``, but libnftables builds its whole cache
        (chains, rules, maps) first: ~130 ms for 4,000 counters against a few ms here, and the collector
        reads them every 2 s. Up to ``COUNTERS_BY_DUMP`` counters in one dump; more are asked for by name
        (``netlink.get_each``), because a dump's cost grows with the square of the table's objects
        (100,000 counters: 0.4 s either way; 310,000: 10.6 s dumped, 2.0 s by name).
        """
        if names is not None and len(names) > COUNTERS_BY_DUMP:
            return self._read_counters_by_name(names)
        request = netlink.attr(nfmsg.OBJ_TABLE, TABLE_NAME.encode() + b"\0")
        request += netlink.attr(nfmsg.OBJ_TYPE, struct.pack(">I", nfmsg.OBJECT_TYPES["counter"]))
        message_type = (nfmsg.NFNL_SUBSYS_NFTABLES << 8) | nfmsg.GETOBJ
        counters: dict[str, CounterValue] = {}
        try:
            for data in netlink.dump_raw(netlink.NETLINK_NETFILTER, message_type, nfmsg.FAMILIES["inet"], request):
                _counters_in(data, data.count(TABLE_ATTRIBUTE), counters)
        except netlink.NetlinkError as exc:
            if exc.errno == errno.ENOENT:  # no lbweb table in this namespace (yet)
                return {}
            raise
        if names is None:
            return counters
        return {name: counters[name] for name in names if name in counters}

    @staticmethod
    def _read_counters_by_name(names: Collection[str]) -> dict[str, CounterValue]:
        counters: dict[str, CounterValue] = {}
        named = (("counter", name) for name in names)
        for data, spans, answers in nfmsg.each_named_object(TABLE_FAMILY, TABLE_NAME, named):
            if len(spans) == answers:
                _counters_in(data, answers, counters)
                continue
            for start, end in spans:  # beside the error of a counter that does not exist
                name, value = _parse_counter(data, start, end)
                if name is not None:
                    counters[name] = value
        return counters

    def base_digest(self) -> str | None:
        """The digest lbweb's skeleton carries, read from the kernel (None: table or chain missing).

        Every incremental apply asks first, so it must not cost more with more farms: one netlink
        dump of the rules of the skeleton's ``base`` chain alone (the kernel filters by table and chain).
        libnftables' ``list chain`` would first read every chain, set and element of the table
        (~0.13 s at 1,000 farms, ~16 s at 10,000).
        """
        request = netlink.attr(nfmsg.RULE_TABLE, TABLE_NAME.encode() + b"\0")
        request += netlink.attr(nfmsg.RULE_CHAIN, BASE_CHAIN.encode() + b"\0")
        message_type = (nfmsg.NFNL_SUBSYS_NFTABLES << 8) | nfmsg.GETRULE
        try:
            chunks = netlink.dump_chunks(
                netlink.NETLINK_NETFILTER, message_type, nfmsg.FAMILIES["inet"], request, sock=nfmsg.shared_socket()
            )
            for data, spans in chunks:
                for start, end in spans:
                    for comment in _rule_comments(data, start, end):
                        if comment.startswith(BASE_DIGEST_PREFIX):
                            return comment.removeprefix(BASE_DIGEST_PREFIX)
        except netlink.NetlinkError as exc:
            if exc.errno == errno.ENOENT:  # no lbweb table or no base chain
                return None
            raise
        return None

    # -- drift: reading lbweb's tables back as netlink messages (``drift/read.py``), in this process --

    def read_units(self, units: Mapping[str, UnitObjects]) -> drift.Reading:
        return drift.read_kernel(units)

    def probe_records(
        self,
        owners: drift.Owners,
        units: Mapping[str, UnitObjects],
        maps: Iterable[str],
        previous: Mapping[str, drift.Record],
    ) -> dict[str, drift.Record]:
        return drift.probe_records(owners, units, maps, previous)
