"""nftlb JSON documents (``{"farms": [...], "policies": [...]}``) in and out, for operators moving from nftlb
or SKUDONET.

Import translates nftlb's attribute names and values onto lbweb's fields, then writes everything through the
services in ONE transaction: every problem is reported with its path (``farms[2].backends[0].ip-addr``) and,
if there is any error, nothing is written. Attributes lbweb does not know or does not support are never
dropped silently: they are listed under ``unknown`` (and are errors with ``strict``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from . import services
from .models import Backend, Farm, Policy

ON_OFF = {"on": True, "off": False, True: True, False: False}
FARM_STATES = {"up": "up", "off": "off", "down": "off"}
BACKEND_STATES = {"up": "enabled", "available": "enabled", "down": "enabled", "off": "disabled", "drain": "drain",
                  "enabled": "enabled", "disabled": "disabled"}  # fmt: skip
PERSISTENCE = {"none": "", "srcip": "srcip", "srcip srcport": "srcip srcport", "srcmac": "srcmac"}
POLICY_TYPES = {"blacklist": "deny", "whitelist": "allow", "deny": "deny", "allow": "allow"}
UNSUPPORTED = {
    "mark": "lbweb marks each farm's connections with the farm id",
    "queue": "lbweb balances in the kernel; no user-space queue",
    "limits-ttl": "lbweb keeps rate-limited clients for a fixed time",
    "priority": "farm-level priority is not supported; backends have priorities",
    "addresses": "named addresses are not supported; use the farm's virtual-addr",
    "oface": "DSR sends frames back out of the same interface (iface)",
    "ether-addr": "the LB's MAC is read from the interface",
    "new-rtlimit-log-prefix": "limit hits are counted, not logged",
    "rst-rtlimit-log-prefix": "limit hits are counted, not logged",
    "est-connlimit-log-prefix": "limit hits are counted, not logged",
    "tcp-strict-log-prefix": "invalid packets are counted, not logged",
    "rst-rtlimit-burst": "reset limits have no burst",
    "source-addr": "per-backend source addresses are not supported; set the farm's source-addr",
    "name": "backends are identified by ip-addr and port",
}


class _Problems:
    def __init__(self) -> None:
        self.errors: list[dict] = []
        self.unknown: list[dict] = []

    def error(self, path: str, message: str) -> None:
        self.errors.append({"path": path, "message": message})

    def ignored(self, path: str, attribute: str, reason: str = "unknown to lbweb") -> None:
        self.unknown.append({"path": f"{path}.{attribute}", "attribute": attribute, "reason": reason})


def _rate(value: Any) -> int:
    """'10/second' or 10 -> 10; other units are refused rather than guessed."""
    text = str(value).strip()
    match = re.fullmatch(r"(\d+)(?:/(second|sec|s))?", text)
    if not match:
        raise ValueError(f"'{value}' is not a rate per second like 10/second")
    return int(match.group(1))


def _int(value: Any) -> int:
    try:
        return int(str(value).strip())
    except ValueError:
        raise ValueError(f"'{value}' is not a number") from None


def _choice(table: dict, what: str):
    def convert(value: Any):
        key = value.strip().lower() if isinstance(value, str) else value
        if key not in table:
            raise ValueError(f"{what} '{value}' is not supported (one of: {', '.join(map(str, table))})")
        return table[key]

    return convert


def _none_is_empty(value: Any) -> str:
    text = str(value).strip()
    return "" if text.lower() == "none" else text


def _verdict(value: Any) -> str:
    words = str(value).lower().split()
    if "reject" in words:
        return "reject"
    if "drop" in words:
        return "drop"
    raise ValueError(f"verdict '{value}' is not supported: lbweb drops or rejects past a limit")


def _log(value: Any) -> bool:
    return str(value).strip().lower() not in ("none", "off", "false", "")


FARM_ATTRIBUTES = {
    "name": ("name", str),
    "description": ("description", str),
    "virtual-addr": ("vip", str),
    "virtual-ports": ("ports", lambda v: str(v).replace(" ", "")),
    "mode": ("mode", _choice({m: m for m in ("snat", "dnat", "dsr", "stlsdnat")}, "mode")),
    "protocol": ("protocol", _choice({p: p for p in ("tcp", "udp", "sctp", "all")}, "protocol")),
    "scheduler": ("scheduler", _choice({s: s for s in ("rr", "weight", "hash", "symhash", "leastconn")}, "scheduler")),
    "sched-param": ("sched_param", _none_is_empty),
    "persistence": ("persistence", _choice(PERSISTENCE, "persistence")),
    "persist-ttl": ("persist_ttl", _int),
    "source-addr": ("source_addr", _none_is_empty),
    "source-ports": ("source_ports", _none_is_empty),
    "new-rtlimit": ("new_rtlimit", _rate),
    "new-rtlimit-burst": ("new_rtlimit_burst", _int),
    "rst-rtlimit": ("rst_rtlimit", _rate),
    "est-connlimit": ("est_connlimit", _int),
    "verdict": ("limit_verdict", _verdict),
    "log": ("log", _log),
    "log-prefix": ("log_prefix", str),
    "log-rtlimit": ("log_rtlimit", _rate),
    "helper": ("helper", _none_is_empty),
    "tcp-strict": ("tcp_strict", _choice(ON_OFF, "tcp-strict")),
    "intra-connect": ("intra_connect", _choice(ON_OFF, "intra-connect")),
    "flow-offload": ("flow_offload", _choice(ON_OFF, "flow-offload")),
    "iface": ("interface", str),
    "state": ("state", _choice(FARM_STATES, "state")),
}
BACKEND_ATTRIBUTES = {
    "ip-addr": ("address", str),
    "port": ("port", lambda v: None if str(v).strip() in ("", "0") else _int(v)),
    "weight": ("weight", _int),
    "priority": ("priority", _int),
    "state": ("state", _choice(BACKEND_STATES, "backend state")),
    "est-connlimit": ("est_connlimit", _int),
    "ether-addr": ("mac", str),
}
FIELD_TO_ATTRIBUTE = {f: a for a, (f, _) in {**FARM_ATTRIBUTES, **BACKEND_ATTRIBUTES}.items()}


@dataclass
class ImportResult:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    policies: list[str] = field(default_factory=list)
    unknown: list[dict] = field(default_factory=list)
    errors: list[dict] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "created": self.created,
            "updated": self.updated,
            "policies": self.policies,
            "unknown": self.unknown,
            "errors": self.errors,
        }


def _translate(obj: Any, table: dict, path: str, problems: _Problems, skip: tuple[str, ...] = ()) -> dict:
    values: dict = {}
    if not isinstance(obj, dict):
        problems.error(path, "expected an object")
        return values
    for attribute, raw in obj.items():
        if attribute in skip:
            continue
        if attribute not in table:
            problems.ignored(path, attribute, UNSUPPORTED.get(attribute, "unknown to lbweb"))
            continue
        name, convert = table[attribute]
        try:
            values[name] = convert(raw)
        except ValueError as exc:
            problems.error(f"{path}.{attribute}", str(exc))
    return values


def _validation_errors(exc: ValidationError, path: str, problems: _Problems) -> None:
    if hasattr(exc, "error_dict"):
        for name, messages in exc.message_dict.items():
            where = f"{path}.{FIELD_TO_ATTRIBUTE.get(name, name)}"
            for message in messages:
                problems.error(where, message)
    else:
        for message in exc.messages:
            problems.error(path, message)


def _import_policy(index: int, raw: dict, problems: _Problems, result: ImportResult) -> None:
    path = f"policies[{index}]"
    if not isinstance(raw, dict):
        problems.error(path, "expected an object")
        return
    for attribute in raw:
        if attribute not in ("name", "type", "family", "elements", "description"):
            problems.ignored(path, attribute, UNSUPPORTED.get(attribute, "unknown to lbweb"))
    try:
        kind = _choice(POLICY_TYPES, "policy type")(raw.get("type", "blacklist"))
    except ValueError as exc:
        problems.error(f"{path}.type", str(exc))
        return
    elements = " ".join(e.get("data", "") if isinstance(e, dict) else str(e) for e in raw.get("elements", []))
    values = {"name": raw.get("name", ""), "type": kind, "elements": elements}
    try:
        existing = Policy.objects.filter(name=values["name"]).first()
        if existing:
            services.policy_update(policy=existing, **values)
        else:
            services.policy_create(**values)
        result.policies.append(values["name"])
    except ValidationError as exc:
        _validation_errors(exc, path, problems)


def _import_farm(index: int, raw: dict, problems: _Problems, result: ImportResult) -> None:
    path = f"farms[{index}]"
    values = _translate(raw, FARM_ATTRIBUTES, path, problems, skip=("backends", "policies", "sessions", "family"))
    family = str(raw.get("family", "")).lower() if isinstance(raw, dict) else ""
    if family == "dual":
        problems.error(f"{path}.family", "dual-stack farms are not supported: make one IPv4 and one IPv6 farm")
    elif family in ("ipv4", "ipv6") and values.get("vip") and (":" in values["vip"]) != (family == "ipv6"):
        problems.error(f"{path}.family", f"family {family} does not match virtual-addr {values['vip']}")
    if not isinstance(raw, dict) or "name" not in raw:
        problems.error(path, "a farm needs a name")
        return
    policy_names = [p.get("name") if isinstance(p, dict) else p for p in raw.get("policies", [])]
    policies = list(Policy.objects.filter(name__in=policy_names))
    for missing in sorted(set(policy_names) - {p.name for p in policies}):
        problems.error(f"{path}.policies", f"policy '{missing}' does not exist (define it under 'policies')")
    farm = Farm.objects.filter(name=values["name"]).first()
    try:
        if farm:
            farm = services.farm_update(
                farm=farm, policies=policies, **{k: v for k, v in values.items() if k != "name"}
            )
            result.updated.append(farm.name)
        else:
            farm = services.farm_create(policies=policies, **values)
            result.created.append(farm.name)
    except ValidationError as exc:
        _validation_errors(exc, path, problems)
        return
    names: dict[str, Backend] = {}
    kept: set[int] = set()
    for b_index, raw_backend in enumerate(raw.get("backends", [])):
        b_path = f"{path}.backends[{b_index}]"
        b_values = _translate(raw_backend, BACKEND_ATTRIBUTES, b_path, problems)
        if "address" not in b_values:
            problems.error(b_path, "a backend needs ip-addr")
            continue
        existing = farm.backends.filter(address=b_values["address"], port=b_values.get("port")).first()
        try:
            if existing:
                backend = services.backend_update(backend=existing, **b_values)
            else:
                backend = services.backend_create(farm=farm, **b_values)
        except ValidationError as exc:
            _validation_errors(exc, b_path, problems)
            continue
        kept.add(backend.id)
        names[str(raw_backend.get("name", backend))] = backend
    for stale in farm.backends.exclude(id__in=kept):
        services.backend_delete(backend=stale)
    for s_index, raw_session in enumerate(raw.get("sessions", [])):
        s_path = f"{path}.sessions[{s_index}]"
        backend = names.get(str(raw_session.get("backend")))
        if backend is None:
            problems.error(f"{s_path}.backend", f"no backend named '{raw_session.get('backend')}' in this farm")
            continue
        for attribute in raw_session:
            if attribute not in ("client", "backend"):
                problems.ignored(s_path, attribute, "dynamic sessions are learnt by the kernel, not imported")
        farm.static_sessions.filter(client=raw_session.get("client")).delete()
        try:
            services.session_create(farm=farm, client=str(raw_session.get("client", "")), backend=backend)
        except ValidationError as exc:
            _validation_errors(exc, s_path, problems)


def nftlb_import(*, document: Any, dry_run: bool = False, strict: bool = False) -> ImportResult:
    """Create or update policies and farms (by name) from an nftlb document: all of it, or nothing."""
    problems = _Problems()
    result = ImportResult()
    if not isinstance(document, dict) or not isinstance(document.get("farms", []), list):
        result.errors.append({"path": "", "message": 'expected an nftlb document: {"farms": [...]}'})
        return result
    for key in document:
        if key not in ("farms", "policies"):
            problems.ignored("", key, UNSUPPORTED.get(key, "unknown to lbweb"))
    with transaction.atomic():
        for index, raw in enumerate(document.get("policies", [])):
            _import_policy(index, raw, problems, result)
        for index, raw in enumerate(document.get("farms", [])):
            _import_farm(index, raw, problems, result)
        result.unknown = problems.unknown
        result.errors = problems.errors
        if strict:
            result.errors += [{"path": u["path"], "message": f"not imported: {u['reason']}"} for u in problems.unknown]
        if result.errors or dry_run:
            transaction.set_rollback(True)
    return result


def _backend_name(backend: Backend) -> str:
    return str(backend)


def export_farm(farm: Farm) -> dict:
    """One farm in nftlb's attribute names (lbweb extensions keep their lbweb values)."""
    doc = {
        "name": farm.name,
        "family": "ipv6" if ":" in farm.vip else "ipv4",
        "virtual-addr": farm.vip,
        "virtual-ports": farm.ports,
        "mode": farm.mode,
        "protocol": farm.protocol,
        "scheduler": farm.scheduler,
        "sched-param": farm.sched_param or "none",
        "persistence": farm.persistence or "none",
        "persist-ttl": str(farm.persist_ttl),
        "helper": farm.helper or "none",
        "log": "forward" if farm.log else "none",
        "log-prefix": farm.log_prefix,
        "log-rtlimit": f"{farm.log_rtlimit}/second",
        "new-rtlimit": f"{farm.new_rtlimit}/second",
        "new-rtlimit-burst": str(farm.new_rtlimit_burst),
        "rst-rtlimit": f"{farm.rst_rtlimit}/second",
        "est-connlimit": str(farm.est_connlimit),
        "verdict": farm.limit_verdict,
        "tcp-strict": "on" if farm.tcp_strict else "off",
        "intra-connect": "on" if farm.intra_connect else "off",
        "flow-offload": "on" if farm.flow_offload else "off",
        "state": farm.state,
    }
    if farm.description:
        doc["description"] = farm.description
    if farm.source_addr:
        doc["source-addr"] = farm.source_addr
    if farm.source_ports:
        doc["source-ports"] = farm.source_ports
    if farm.interface:
        doc["iface"] = farm.interface
    doc["backends"] = [
        {
            "name": _backend_name(b),
            "ip-addr": b.address,
            **({"port": str(b.port)} if b.port is not None else {}),
            "weight": str(b.weight),
            "priority": str(b.priority),
            "state": {"enabled": "up", "disabled": "off"}.get(b.state, b.state),
            "est-connlimit": str(b.est_connlimit),
            **({"ether-addr": b.mac} if b.mac else {}),
        }
        for b in farm.backends.all()
    ]
    doc["policies"] = [{"name": p.name} for p in farm.policies.all()]
    doc["sessions"] = [{"client": s.client, "backend": _backend_name(s.backend)} for s in farm.static_sessions.all()]
    return doc


def export_document(farms) -> dict:
    farms = list(farms.prefetch_related("backends", "policies", "static_sessions__backend"))
    policy_ids = {p.id for f in farms for p in f.policies.all()}
    policies = Policy.objects.filter(id__in=policy_ids).order_by("name")
    return {
        "farms": [export_farm(f) for f in farms],
        "policies": [
            {
                "name": p.name,
                "type": {"deny": "blacklist", "allow": "whitelist"}[p.type],
                "elements": [{"data": e} for e in p.element_list],
            }
            for p in policies
        ],
    }
