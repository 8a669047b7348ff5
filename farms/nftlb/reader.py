"""nftlb JSON documents (``{"farms": [...], "policies": [...]}``) read into lbweb field values.

:func:`import_document` only reads the document: it returns an :class:`~farms.nftlb.plans.ImportPlan` with the
field values of every farm, backend, static session and policy, and three lists of findings, each entry naming
its place in the document (``farms[2].backends[0].ip-addr``):

- ``errors``: a value lbweb cannot take or an nftlb setting it cannot honour; the import must not happen;
- ``unknown``: an attribute neither nftlb nor lbweb knows; reported, not applied (errors when ``strict``);
- ``ignored``: an nftlb attribute, or part of a value, lbweb does not keep, with the reason.

A farm in the document describes the whole farm: an attribute it leaves out takes its default, as in a
fresh nftlb farm. :mod:`farms.nftlb.writer` writes farms back in the same format, so export, import into an
empty database and export again gives the same document.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any

from ..choices import FarmModeChoices, FarmSchedulerChoices
from ..models import Backend, Farm
from ..services import FARM_FIELDS
from ..validation import parse_networks
from . import codecs as c
from .plans import MISSING, BackendPlan, FarmPlan, ImportPlan, PolicyPlan, SessionPlan
from .schema import (
    ADDRESS_IGNORED,
    BACKEND_ATTRIBUTES,
    BACKEND_IGNORED,
    ELEMENT_IGNORED,
    FAMILIES,
    FARM_ATTRIBUTES,
    FARM_IGNORED,
    POLICY_IGNORED,
    POLICY_TYPES,
    STATE_ATTRIBUTES,
    Attribute,
    Compound,
    Ignored,
)

FARM_BY_NAME = {a.name: a for a in FARM_ATTRIBUTES}
BACKEND_BY_NAME = {a.name: a for a in BACKEND_ATTRIBUTES}
TOP_LEVEL = ("farms", "policies", "addresses")
# Where nftlb's default differs from lbweb's own (a farm left without the attribute takes nftlb's).
NFTLB_DEFAULTS = {"log_rtlimit": 0}
ADDRESS_ATTRIBUTES = {
    "ip-addr": FARM_BY_NAME["virtual-addr"],
    "ports": FARM_BY_NAME["virtual-ports"],
    "protocol": FARM_BY_NAME["protocol"],
}

HASHED = (FarmSchedulerChoices.HASH, FarmSchedulerChoices.MAGLEV)  # the schedulers that read sched-param


def _at(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


class _Reader:
    """Walks one document, filling an :class:`ImportPlan`."""

    def __init__(self, strict: bool):
        self.plan = ImportPlan()
        self.strict = strict
        self.addresses: dict[str, dict[str, Any]] = {}

    # -- generic helpers ----------------------------------------------------------------------------

    def value(self, path: str, key: str, parse, raw: Any) -> Any:
        """Parse one attribute; a refusal becomes an error at its path and returns MISSING."""
        try:
            parsed = parse(raw)
        except c.BadValue as exc:
            self.plan.error(_at(path, key), str(exc))
            return MISSING
        if isinstance(parsed, c.Lossy):
            self.plan.left_out(_at(path, key), key, raw, parsed.reason)
            return parsed.value
        return parsed

    def attribute(self, path: str, key: str, attr: Attribute | Compound, raw: Any, values: dict) -> None:
        """One attribute into the fields that keep it (a refused one leaves them MISSING)."""
        if isinstance(attr, Compound):
            parsed = self.value(path, key, attr.parse, raw)
            values.update(dict.fromkeys(attr.fields, MISSING) if parsed is MISSING else parsed)
        else:
            values[attr.field] = self.value(path, key, attr.parse, raw)

    def other(self, path: str, key: str, raw: Any, ignored: dict[str, Ignored]) -> None:
        """An attribute without an lbweb field: left out with its reason, refused, or unknown."""
        if key in STATE_ATTRIBUTES:
            if key == "action" and str(raw).strip().lower() not in ("", "none", "start", "reload"):
                self.plan.error(_at(path, key), f"action '{raw}' is an nftlb API command; it cannot be imported")
            return
        rule = ignored.get(key)
        if rule is None:
            self.plan.unknown.append({"path": _at(path, key), "attribute": key})
            if self.strict:
                self.plan.error(_at(path, key), f"unknown attribute '{key}' (strict import)")
            return
        shown = raw if isinstance(raw, str) else str(raw)
        if shown.strip() in rule.harmless:
            return
        if rule.blocking:
            self.plan.error(_at(path, key), f"'{shown}' is not supported: {rule.reason}")
        else:
            self.plan.left_out(_at(path, key), key, raw, rule.reason)

    def objects(self, path: str, raw: Any, what: str) -> list[tuple[str, dict]]:
        """The JSON objects of a list attribute, each with its path."""
        if raw is None:
            return []
        if not isinstance(raw, list):
            self.plan.error(path, f"{what} must be a JSON list")
            return []
        out = []
        for index, item in enumerate(raw):
            if isinstance(item, dict):
                out.append((f"{path}[{index}]", item))
            else:
                self.plan.error(f"{path}[{index}]", f"each of {what} must be a JSON object")
        return out

    def name(self, path: str, obj: dict, what: str) -> str | None:
        raw = obj.get("name")
        name = MISSING if raw is None else self.value(path, "name", c.text, raw)
        if name == "" or raw is None:
            self.plan.error(_at(path, "name"), f"a {what} needs a name")
        return name if isinstance(name, str) and name else None

    # -- document -----------------------------------------------------------------------------------

    def document(self, doc: Any) -> ImportPlan:
        if not isinstance(doc, dict):
            self.plan.error("", 'an nftlb document is a JSON object like {"farms": [...]}')
            return self.plan
        for key in doc:
            if key not in TOP_LEVEL:
                self.other("", key, doc[key], {})
        for path, obj in self.objects("addresses", doc.get("addresses"), "addresses"):
            name = self.name(path, obj, "address")
            found = self.address(path, obj)
            if name:
                self.addresses[name] = found
        for path, obj in self.objects("policies", doc.get("policies"), "policies"):
            self.policy(path, obj)
        seen: set[str] = set()
        for path, obj in self.objects("farms", doc.get("farms"), "farms"):
            farm = self.farm(path, obj)
            if farm is None:
                continue
            if farm.name in seen:
                self.plan.error(_at(path, "name"), f"farm '{farm.name}' appears twice in the document")
                continue
            seen.add(farm.name)
            self.plan.farms.append(farm)
        return self.plan

    def address(self, path: str, obj: dict) -> dict[str, Any]:
        """nftlb's address object: a VIP, ports and protocol a farm refers to by name."""
        found: dict[str, Any] = {}
        for key, raw in obj.items():
            attr = ADDRESS_ATTRIBUTES.get(key)
            if attr:
                found[attr.field] = self.value(path, key, attr.parse, raw)
            elif key == "family":
                self.value(path, key, c.choice(FAMILIES), raw)
            elif key != "name":
                self.other(path, key, raw, ADDRESS_IGNORED)
        return found

    def policy(self, path: str, obj: dict) -> None:
        name = self.name(path, obj, "policy")
        values: dict[str, Any] = {"type": "deny", "description": "", "elements": ""}
        ok = name is not None
        for key, raw in obj.items():
            if key == "name":
                continue
            if key == "type":
                values["type"] = self.value(path, key, c.choice(POLICY_TYPES), raw)
            elif key == "description":
                values["description"] = self.value(path, key, c.text, raw)
            elif key == "elements":
                values["elements"] = self.elements(_at(path, key), raw)
            elif key == "family":  # lbweb policies hold both families; the elements say which
                self.value(path, key, c.choice(FAMILIES), raw)
            else:
                self.other(path, key, raw, POLICY_IGNORED)
        if ok and MISSING not in values.values():
            self.plan.policies.append(PolicyPlan(path, name, values))

    def elements(self, path: str, raw: Any) -> Any:
        networks = []
        for element_path, obj in self.objects(path, raw, "elements"):
            for key, value in obj.items():
                if key != "data":
                    self.other(element_path, key, value, ELEMENT_IGNORED)
            if "data" not in obj:
                self.plan.error(_at(element_path, "data"), "an element needs its data (an address or network)")
                continue
            try:
                networks += parse_networks(c.text(obj["data"]))
            except ValueError as exc:
                self.plan.error(_at(element_path, "data"), str(exc))
                return MISSING
        return "\n".join(networks)

    # -- farms --------------------------------------------------------------------------------------

    def farm(self, path: str, obj: dict) -> FarmPlan | None:
        errors_before = len(self.plan.errors)
        name = self.name(path, obj, "farm")
        values: dict[str, Any] = {}
        plan = FarmPlan(path, name or "", values)
        family = None
        for key, raw in obj.items():
            attr = FARM_BY_NAME.get(key)
            if attr:
                self.attribute(path, key, attr, raw, values)
            elif key == "family":
                family = self.value(path, key, c.choice(FAMILIES, {"inet": _ONE_FAMILY, "dual": _ONE_FAMILY}), raw)
            elif key == "addresses":
                self.farm_addresses(path, raw, values)
            elif key == "backends":
                plan.backends = self.backends(_at(path, key), raw)
            elif key == "policies":
                for item_path, item in self.objects(_at(path, key), raw, "policies"):
                    policy = self.name(item_path, item, "policy reference")
                    for extra in set(item) - {"name"}:
                        self.other(item_path, extra, item[extra], {})
                    if policy:
                        plan.policies.append((_at(item_path, "name"), policy))
            elif key not in ("name", "sessions"):
                self.other(path, key, raw, FARM_IGNORED)
        for required in ("virtual-addr", "mode"):
            if FARM_BY_NAME[required].field not in values:
                self.plan.error(_at(path, required), f"a farm needs its {required}")
                values[FARM_BY_NAME[required].field] = MISSING
        if name is None:
            return None
        self.farm_rules(plan, family, obj)
        plan.sessions = self.sessions(plan, obj.get("sessions"))
        self.differences(plan, obj)
        # Refused backends and sessions are skipped one by one; a refused farm value skips the whole farm.
        own = (_at(path, "backends["), _at(path, "sessions["))
        plan.valid = not any(not e["path"].startswith(own) for e in self.plan.errors[errors_before:])
        return plan

    def farm_addresses(self, path: str, raw: Any, values: dict) -> None:
        refs = self.objects(_at(path, "addresses"), raw, "addresses")
        if len(refs) != 1:
            self.plan.error(_at(path, "addresses"), "an lbweb farm has exactly one virtual address; split the farm")
            return
        ref_path, ref = refs[0]
        if set(ref) - {"name"}:
            found = self.address(ref_path, ref)
        else:
            name = self.name(ref_path, ref, "address reference")
            found = self.addresses.get(name or "")
            if found is None:
                self.plan.error(_at(ref_path, "name"), f"no address '{name}' in the document's addresses")
                return
        for field_name, value in found.items():
            values.setdefault(field_name, value)

    def farm_rules(self, plan: FarmPlan, family: Any, obj: dict) -> None:
        """nftlb's defaults and cross-attribute rules, as lbweb needs them."""
        values, path = plan.values, plan.path
        values["name"] = plan.name
        vip = values.get("vip")
        known = family not in (None, MISSING) and vip not in (None, MISSING)
        if known and ipaddress.ip_address(vip).version != family:
            self.plan.error(_at(path, "family"), f"family ipv{family} does not match virtual-addr {vip}")
        for name in FARM_FIELDS:
            values.setdefault(name, NFTLB_DEFAULTS.get(name, _default_farm(name)))
        if values["mode"] == FarmModeChoices.LOCAL:
            self.local_rules(plan, obj)
        scheduler, mode = values["scheduler"], values["mode"]
        if scheduler in (FarmSchedulerChoices.HASH, FarmSchedulerChoices.SYMHASH) and values["persistence"]:
            self.plan.warn(
                _at(path, "persistence"),
                "persistence",
                "a hash scheduler already sends a client to the same backend while the backends stay the same; "
                "persistence (checked first, as in nftlb) keeps it there when they change",
            )
        if scheduler == FarmSchedulerChoices.HASH and values["sched_param"] == "":
            values["sched_param"] = "srcip"  # nftlb hashes the source address by default
        elif scheduler not in HASHED and values["sched_param"] not in ("", MISSING):
            self.plan.left_out(
                _at(path, "sched-param"), "sched-param", obj["sched-param"], f"not used by the {scheduler} scheduler"
            )
            values["sched_param"] = ""
        if mode is not MISSING and mode != FarmModeChoices.DSR:
            for key, name, reason in (
                ("iface", "interface", "lbweb hooks non-DSR farms where the routing table says"),
                ("oface", "oface", "lbweb routes non-DSR traffic by the routing table (marks steer it)"),
                ("ether-addr", "ether_addr", "only DSR farms rewrite MAC addresses"),
            ):
                if values[name] not in ("", MISSING):
                    self.plan.left_out(_at(path, key), key, obj[key], reason)
                    values[name] = ""

    def local_rules(self, plan: FarmPlan, obj: dict) -> None:
        """nftlb's mode local (src/nft.c, ``run_farm_local``): the VIP's service runs on the appliance; its
        packets are filtered and limited on their way in and reach the local socket untranslated. What nftlb
        keeps for such a farm but never applies to its clients' traffic is left out here, each with why."""
        values, path = plan.values, plan.path
        local = "a local farm's connections end on the appliance"
        if plan.backends:
            self.plan.left_out(
                _at(path, "backends"),
                "backends",
                ", ".join(b.name or b.values.get("address", "") for b in plan.backends),
                "nftlb uses a local farm's backends only to rewrite the source address of the connections the "
                "local service itself opens to them, which it marks with the backend's mark; lbweb does not "
                "(give the service its source address): a local farm has no backends",
            )
            plan.backends = []
        rules = (
            ("source-addr", "source_addr", "", "nftlb uses it only for the local service's own connections to "
             "the backends (see backends)"),
            ("source-ports", "source_ports", "", "nothing is translated"),
            ("scheduler", "scheduler", FarmSchedulerChoices.ROUND_ROBIN, f"nothing is scheduled: {local}"),
            ("sched-param", "sched_param", "", f"nothing is scheduled: {local}"),
            ("persistence", "persistence", "", f"nftlb keeps no sessions for a local farm: {local}"),
            ("helper", "helper", "", "nftlb sets no helper on a local farm"),
            ("mark", "mark", 0, "nftlb uses a local farm's mark only in its backends' source-address map"),
            ("flow-offload", "flow_offload", False, f"nothing is forwarded: {local}"),
            ("when-all-down", "when_all_down", "reject", "a local farm has no backends to be down"),
            ("fallback-addr", "fallback_address", None, "a local farm has no backends to be down"),
            ("fallback-port", "fallback_port", None, "a local farm has no backends to be down"),
        )  # fmt: skip
        for key, name, default, reason in rules:
            quiet = key == "scheduler" and values[name] in ("weight", "rr")  # nftlb's default: it means nothing
            if values[name] not in (default, MISSING) and key in obj and not quiet:
                self.plan.left_out(_at(path, key), key, obj[key], reason)
            if values[name] is not MISSING:
                values[name] = default
        if values["log_forward"] is True or values["log_output"] is True:
            self.plan.left_out(
                _at(path, "log"), "log", obj["log"], "forward and output: nothing of a local farm is forwarded"
            )
            values["log_forward"] = values["log_output"] = False
        if values["log"] is True:
            self.plan.differ(
                _at(path, "log"),
                "log",
                "nftlb writes no log rule for a local farm (its code never reaches the one it has); lbweb logs "
                "new connections to the local service, as 'log input' asks",
            )

    def differences(self, plan: FarmPlan, obj: dict) -> None:
        """Where lbweb deliberately behaves otherwise than nftlb with this farm: said, never silent."""
        values, path = plan.values, plan.path
        marked = values.get("mark") not in (0, MISSING, None) or any(
            b.values.get("mark") not in (0, MISSING, None) for b in plan.backends
        )
        if marked:
            self.plan.differ(
                _at(path, "mark"),
                "mark",
                "lbweb sets the packet mark to the farm's mark ORed with the backend's, on every packet of the "
                "connection both ways; nftlb adds bits of its own (0x80000000 for masquerading farms, and a "
                "numbered mark for each backend without one): match them in ip rules with a mask",
            )
        if "log-prefix" in obj and "ANAME" in str(obj["log-prefix"]):
            self.plan.differ(
                _at(path, "log-prefix"), "log-prefix", "lbweb has no address objects: ANAME is the farm's name"
            )
        if any(b.values.get("est_connlimit") for b in plan.backends) and values.get("log_drops"):
            self.plan.differ(
                _at(path, "backends"),
                "est-connlimit-log-prefix",
                "a backend's connection limit logs est-connlimit-<farm>-<backend address> (nftlb: the backend's name)",
            )

    def backends(self, path: str, raw: Any) -> list[BackendPlan]:
        out: list[BackendPlan] = []
        names: set[str] = set()
        for item_path, obj in self.objects(path, raw, "backends"):
            values: dict[str, Any] = {}
            name = c.text(obj["name"]) if isinstance(obj.get("name"), str | int) else ""
            for key, value in obj.items():
                attr = BACKEND_BY_NAME.get(key)
                if attr:
                    self.attribute(item_path, key, attr, value, values)
                elif key == "name":
                    self.plan.left_out(
                        _at(item_path, key), key, value, "lbweb backends have no name; sessions may refer to it"
                    )
                else:
                    self.other(item_path, key, value, BACKEND_IGNORED)
            if "address" not in values:
                self.plan.error(_at(item_path, "ip-addr"), "a backend needs its ip-addr")
            if name and name in names:
                self.plan.error(_at(item_path, "name"), f"backend name '{name}' appears twice in this farm")
            names.add(name)
            for attr in BACKEND_ATTRIBUTES:
                values.setdefault(attr.field, MISSING if attr.field == "address" else _default_backend(attr.field))
            out.append(BackendPlan(item_path, name, values))
        return out

    def sessions(self, plan: FarmPlan, raw: Any) -> list[SessionPlan]:
        out = []
        if raw and plan.values.get("mode") == FarmModeChoices.LOCAL:
            self.plan.left_out(_at(plan.path, "sessions"), "sessions", raw, "a local farm has no backends")
            return out
        names = {b.name for b in plan.backends if b.name}
        for item_path, obj in self.objects(_at(plan.path, "sessions"), raw, "sessions"):
            if "expiration" in obj:
                self.plan.left_out(
                    item_path, "sessions", obj.get("client", ""), "a learnt session (with expiration) is not imported"
                )
                continue
            for key, value in obj.items():
                if key not in ("client", "backend"):
                    self.other(item_path, key, value, {})
            client = self.value(item_path, "client", _session_client, obj.get("client", ""))
            backend = self.value(item_path, "backend", c.text, obj.get("backend", ""))
            if backend is not MISSING and backend not in names:
                self.plan.error(_at(item_path, "backend"), f"this farm has no backend named '{backend}'")
                continue
            if client is not MISSING:
                out.append(SessionPlan(item_path, client, backend))
        return out


_ONE_FAMILY = "an lbweb farm has one VIP of one family; make one farm for IPv4 and one for IPv6"


def _default_farm(name: str) -> Any:
    return Farm._meta.get_field(name).get_default()


def _default_backend(name: str) -> Any:
    return Backend._meta.get_field(name).get_default()


def _session_client(raw: Any) -> str:
    """nftlb writes a client as the persistence key: ``addr``, ``addr . port`` or a MAC; lbweb as addr:port."""
    value = c.text(raw)
    if not value:
        raise c.BadValue("a session needs its client")
    match = re.fullmatch(r"(\S+)\s+\.\s+(\d+)", value)
    if match:
        address, port = match.groups()
        return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"
    return value


def import_document(document: Any, *, strict: bool = False) -> ImportPlan:
    """Read an nftlb document into lbweb field values, without touching the database or the kernel."""
    return _Reader(strict).document(document)
