"""nftlb's attribute names, each mapped once onto an lbweb field with its codec.

One table per object (farm, backend, policy) drives both import and export. Attributes nftlb has and
lbweb does not keep are listed with the reason they are left out; an unknown attribute is neither.
``description`` and ``source-ports`` are lbweb extensions (written only when set), as are the values
``leastconn`` and ``maglev`` (schedulers), ``reject`` (verdict) and ``drain`` (backend state).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..choices import (
    FarmAllDownChoices,
    FarmModeChoices,
    FarmProtocolChoices,
    FarmSchedulerChoices,
    HashFieldChoices,
    HelperChoices,
)
from . import codecs as c

# Values of nftlb attributes that carry run-time state, not configuration: never imported, never reported.
STATE_ATTRIBUTES = frozenset({"counter-packets", "counter-bytes", "used", "action"})


@dataclass(frozen=True)
class Attribute:
    """An nftlb attribute kept in an lbweb field."""

    name: str
    field: str
    parse: Callable[[Any], Any]
    dump: Callable[[Any], str | None] = c.number


@dataclass(frozen=True)
class Compound:
    """An nftlb attribute kept in several lbweb fields (``log`` in three switches, a rate in its number and
    its unit): ``parse`` returns the fields' values, ``dump`` reads them from the object."""

    name: str
    fields: tuple[str, ...]
    parse: Callable[[Any], dict[str, Any]]
    dump: Callable[[Any], str | None]


@dataclass(frozen=True)
class Ignored:
    """An nftlb attribute lbweb does not keep: reported with ``reason`` unless its value is in ``harmless``
    (nftlb's default, which changes nothing); ``blocking`` makes any other value an error instead."""

    reason: str
    harmless: frozenset[str] = frozenset({""})
    blocking: bool = False


def _persistence_parser() -> Callable[[Any], str]:
    return c.word_set(
        {
            frozenset(): "",
            frozenset({"srcip"}): "srcip",
            frozenset({"srcip", "srcport"}): "srcip srcport",
            frozenset({"srcmac"}): "srcmac",
        },
        "none, srcip, 'srcip srcport' or srcmac",
    )


def _verdict(raw: Any) -> dict[str, Any]:
    """nftlb's verdict for what a limit or a deny list catches: ``log`` (lbweb: log_drops), ``drop`` (or
    lbweb's ``reject``), and ``accept``, which is what an allow list does with its members (lbweb too)."""
    words = set(c.tokens(raw)) - {"none"}
    unknown = words - {"log", "drop", "reject", "accept"}
    if unknown:
        raise c.BadValue(f"'{c.text(raw)}' is not made of log, drop, accept (or lbweb's reject)")
    action = words & {"drop", "reject"}
    if len(action) > 1:
        raise c.BadValue("drop or reject, not both")
    if words and not action:
        raise c.BadValue(f"'{c.text(raw)}' lets what a limit catches through; lbweb's limits drop or reject (add drop)")
    return {"limit_verdict": (action or {"drop"}).pop(), "log_drops": "log" in words or not words}


def _dump_verdict(farm) -> str:
    words = (["log"] if farm.log_drops else []) + [farm.limit_verdict, "accept"]
    return " ".join(words)


def _log(raw: Any) -> dict[str, bool]:
    words = set(c.tokens(raw))
    unknown = words - {"none", "input", "forward", "output"}
    if unknown:
        raise c.BadValue(f"'{c.text(raw)}' is not none or a list of input, forward, output")
    return {"log": "input" in words, "log_forward": "forward" in words, "log_output": "output" in words}


def _dump_log(farm) -> str:
    words = [w for w, on in (("input", farm.log), ("forward", farm.log_forward), ("output", farm.log_output)) if on]
    return " ".join(words) or "none"


def _rate(number_field: str, unit_field: str) -> Compound:
    def parse(raw: Any) -> dict[str, Any]:
        found = c.rate(raw)
        return {number_field: found["number"], unit_field: found["unit"]}

    return Compound(
        number_field.replace("_", "-"),
        (number_field, unit_field),
        parse,
        lambda obj: c.dump_rate(getattr(obj, number_field), getattr(obj, unit_field)),
    )


def _farm_state(raw: Any) -> str | c.Lossy:
    value = c.choice({"up": "up", "off": "off", "down": "down", "config_error": "config_error"})(raw)
    if value in ("down", "config_error"):
        return c.Lossy("off", f"lbweb farms are up or off; state '{value}' was imported as off")
    return value


def _backend_state(raw: Any) -> str | c.Lossy:
    words = {"up": "up", "available": "up", "off": "off", "down": "down", "config_error": "config_error"}
    value = c.choice({**words, "drain": "drain"})(raw)
    if value in ("down", "config_error"):
        return c.Lossy(
            "disabled",
            f"lbweb keeps no health state in the configuration: a backend nftlb had '{value}' "
            "was imported disabled; enable it once it is healthy",
        )
    return {"up": "enabled", "off": "disabled", "drain": "drain"}[value]


def _dump_backend_state(value: str) -> str:
    return {"enabled": "up", "disabled": "off"}.get(value, value)


NO_HELPER = ("netbios-ns", "sane")


def _words(choices) -> dict[str, str]:
    return {v: v for v in choices.values if v}


FARM_ATTRIBUTES = (
    Attribute("virtual-addr", "vip", c.ip_address, str),
    Attribute("virtual-ports", "ports", c.text, str),  # nftlb writes both, empty or not
    Attribute("source-addr", "source_addr", c.text, str),
    Attribute("source-ports", "source_ports", c.text, c.omit_if_empty),  # lbweb extension
    Attribute("mode", "mode", c.choice(_words(FarmModeChoices)), str),
    Attribute("protocol", "protocol", c.choice(_words(FarmProtocolChoices)), str),
    Attribute("scheduler", "scheduler", c.choice(_words(FarmSchedulerChoices)), str),
    Attribute("sched-param", "sched_param", c.hash_fields(list(HashFieldChoices.values)), c.none_if_empty),
    Attribute("persistence", "persistence", _persistence_parser(), c.none_if_empty),
    Attribute("persist-ttl", "persist_ttl", c.integer(1, 7 * 86400)),
    Attribute(
        "helper",
        "helper",
        c.choice(
            {"none": "", **_words(HelperChoices)},
            {h: f"lbweb has no {h} helper; use one of {', '.join(_words(HelperChoices))}" for h in NO_HELPER},
        ),
        c.none_if_empty,
    ),
    Compound("log", ("log", "log_forward", "log_output"), _log, _dump_log),
    Attribute("log-prefix", "log_prefix", c.verbatim, lambda v: None if v in ("", "TYPE-FNAME ") else v),
    _rate("log_rtlimit", "log_rtlimit_unit"),
    Attribute("mark", "mark", c.hex_mark, c.dump_hex),
    Attribute("limits-ttl", "limits_ttl", c.integer(1, 7 * 86400)),
    _rate("new_rtlimit", "new_rtlimit_unit"),
    Attribute("new-rtlimit-burst", "new_rtlimit_burst", c.integer()),
    _rate("rst_rtlimit", "rst_rtlimit_unit"),
    Attribute("rst-rtlimit-burst", "rst_rtlimit_burst", c.integer()),
    Attribute("est-connlimit", "est_connlimit", c.integer()),
    Compound("verdict", ("limit_verdict", "log_drops"), _verdict, _dump_verdict),
    Attribute("tcp-strict", "tcp_strict", c.switch, c.dump_switch),
    Attribute("flow-offload", "flow_offload", c.switch, c.dump_switch_if_on),  # nftlb writes them only when on
    Attribute("intra-connect", "intra_connect", c.switch, c.dump_switch_if_on),
    Attribute("iface", "interface", c.text, c.omit_if_empty),
    Attribute("oface", "oface", c.text, c.omit_if_empty),
    Attribute("ether-addr", "ether_addr", c.mac, c.omit_if_empty),
    Attribute("state", "state", _farm_state, str),
    Attribute("description", "description", c.verbatim, c.omit_if_empty),  # lbweb extension
    # lbweb extensions for health checking: what new connections get when no backend is active
    Attribute(
        "when-all-down", "when_all_down", c.choice(_words(FarmAllDownChoices)), lambda v: None if v == "reject" else v
    ),
    Attribute("fallback-addr", "fallback_address", c.ip_address, c.omit_if_empty),
    Attribute("fallback-port", "fallback_port", c.optional_port, lambda v: None if v is None else str(v)),
    # lbweb extension: nftlb has no per-backend byte counting to turn off; written only when off
    Attribute("count-bytes", "count_bytes", c.switch, lambda v: None if v else "off"),
)

LOG_PREFIX_DEFAULTS = frozenset({"", "KNAME-FNAME", "KNAME-FNAME "})
LIMIT_PREFIX = "lbweb logs what a limit drops with nftlb's default prefix (KNAME-FNAME: {kind}-<farm> )"
FARM_IGNORED = {
    "newname": Ignored("renaming is an nftlb API action; import the farm under its new name"),
    "fqdn": Ignored("lbweb does not use a farm's FQDN"),
    "iether-addr": Ignored("lbweb reads the MAC addresses of its own interfaces (ether-addr sets the source MAC)"),
    "oether-addr": Ignored("lbweb reads the MAC addresses of its own interfaces (ether-addr sets the source MAC)"),
    "responsettl": Ignored("lbweb does not use a response TTL", frozenset({"", "0", "60"})),
    "priority": Ignored(
        "nftlb recomputes a farm's priority from its backends' states at every start (a lower-priority "
        "backend comes in for each one that is down); lbweb does the same, so a configured value has no effect",
        frozenset({"", "1"}),
    ),
    "new-rtlimit-log-prefix": Ignored(LIMIT_PREFIX.format(kind="new-rtlimit"), LOG_PREFIX_DEFAULTS),
    "rst-rtlimit-log-prefix": Ignored(LIMIT_PREFIX.format(kind="rst-rtlimit"), LOG_PREFIX_DEFAULTS),
    "est-connlimit-log-prefix": Ignored(LIMIT_PREFIX.format(kind="est-connlimit"), LOG_PREFIX_DEFAULTS),
    "tcp-strict-log-prefix": Ignored(LIMIT_PREFIX.format(kind="tcp-strict"), LOG_PREFIX_DEFAULTS),
    "queue": Ignored(
        "lbweb does not send packets to a user-space queue (nftlb's queue hands SYNs to a program lbweb does not run)",
        frozenset({"", "-1"}),
        blocking=True,
    ),
}

BACKEND_ATTRIBUTES = (
    Attribute("ip-addr", "address", c.ip_address, str),
    Attribute("port", "port", c.optional_port, c.omit_if_empty),
    Attribute("weight", "weight", c.integer(1, 10000)),
    Attribute("priority", "priority", c.integer(1, 100)),
    Attribute("mark", "mark", c.hex_mark, c.dump_hex),
    Attribute("est-connlimit", "est_connlimit", c.integer()),
    Attribute("state", "state", _backend_state, _dump_backend_state),
    Attribute("ether-addr", "mac", c.mac, c.omit_if_empty),
    Attribute("oface", "oface", c.text, c.omit_if_empty),
    Attribute("source-addr", "source_addr", c.text, c.omit_if_empty),
)
BACKEND_IGNORED = {
    "est-connlimit-log-prefix": Ignored(
        "lbweb logs what a backend's limit drops as est-connlimit-<farm>-<backend address> ",
        frozenset({"", "KNAME-FNAME-BNAME", "KNAME-FNAME-BNAME "}),
    ),
    "fqdn": Ignored("lbweb does not use a backend's FQDN"),
}

POLICY_IGNORED = {
    "timeout": Ignored("lbweb policy elements do not expire", frozenset({"", "0"})),
    "priority": Ignored("lbweb checks every policy of a farm on every packet", frozenset({"", "1"})),
    "route": Ignored("lbweb checks policies where packets arrive (nftlb's route in)", frozenset({"", "in"})),
    "log-prefix": Ignored(
        "lbweb logs what a policy drops with nftlb's default prefix (policy-BL-<policy>-<farm> )",
        frozenset({"", "KNAME-TYPE-PNAME-FNAME", "KNAME-TYPE-PNAME-FNAME "}),
    ),
}
ELEMENT_IGNORED = {"time": Ignored("lbweb policy elements do not expire")}
ADDRESS_IGNORED = {
    "iface": Ignored("lbweb hooks non-DSR farms on every interface"),
    "oface": Ignored("lbweb routes replies by the routing table"),
    "ether-addr": Ignored("set the MAC address on the farm (ether-addr)"),
    "verdict": Ignored("set the verdict on the farm", frozenset({"", "log drop", "drop"})),
    "log-prefix": Ignored("set the log prefix on the farm", LOG_PREFIX_DEFAULTS),
    "log-rtlimit": Ignored("set the log rate on the farm", frozenset({"", "0", "0/second"})),
}

POLICY_TYPES = {"blacklist": "deny", "whitelist": "allow", "deny": "deny", "allow": "allow"}
POLICY_TYPE_WORDS = {"deny": "blacklist", "allow": "whitelist"}
FAMILIES = {"ipv4": 4, "ipv6": 6}


def field_attributes(attributes) -> dict[str, str]:
    """Each lbweb field and the nftlb attribute that holds it."""
    out = {}
    for a in attributes:
        for name in a.fields if isinstance(a, Compound) else (a.field,):
            out[name] = a.name
    return out


FARM_FIELD_ATTRIBUTE = field_attributes(FARM_ATTRIBUTES) | {"name": "name", "policies": "policies"}
BACKEND_FIELD_ATTRIBUTE = field_attributes(BACKEND_ATTRIBUTES)
