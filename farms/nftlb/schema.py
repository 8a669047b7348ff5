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


def _verdict(raw: Any) -> str | c.Lossy:
    words = set(c.tokens(raw)) - {"none"}
    if not words:
        return "drop"
    if "accept" in words or words == {"log"}:
        raise c.BadValue("lbweb drops or rejects what passes a limit; 'accept' and log-only are not supported")
    action = words - {"log"}
    if action not in ({"drop"}, {"reject"}):
        raise c.BadValue(f"'{c.text(raw)}' is not one of drop, 'log drop', reject")
    (value,) = action
    if "log" in words:
        return c.Lossy(value, "lbweb counts what a limit drops (named counters) instead of logging it")
    return value


def _log(raw: Any) -> bool:
    words = set(c.tokens(raw))
    if words <= {"none"}:
        return False
    unknown = words - {"input", "forward", "output"}
    if unknown:
        raise c.BadValue(f"'{c.text(raw)}' is not none or a list of input, forward, output")
    return True


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
    Attribute("virtual-ports", "ports", c.text, c.omit_if_empty),
    Attribute("source-addr", "source_addr", c.text, c.omit_if_empty),
    Attribute("source-ports", "source_ports", c.text, c.omit_if_empty),  # lbweb extension
    Attribute(
        "mode",
        "mode",
        c.choice(
            _words(FarmModeChoices),
            {"local": "mode local (nftlb's local proxy) is not supported by lbweb; use snat or dnat"},
        ),
        str,
    ),
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
    Attribute("log", "log", _log, lambda on: "forward" if on else "none"),
    Attribute("log-prefix", "log_prefix", c.verbatim, c.omit_if_empty),
    Attribute("log-rtlimit", "log_rtlimit", c.log_rate, c.dump_rate),
    Attribute("new-rtlimit", "new_rtlimit", c.rate, c.dump_rate),
    Attribute("new-rtlimit-burst", "new_rtlimit_burst", c.integer()),
    Attribute("rst-rtlimit", "rst_rtlimit", c.rate, c.dump_rate),
    Attribute("est-connlimit", "est_connlimit", c.integer()),
    Attribute("verdict", "limit_verdict", _verdict, str),
    Attribute("tcp-strict", "tcp_strict", c.switch, c.dump_switch),
    Attribute("flow-offload", "flow_offload", c.switch, c.dump_switch),
    Attribute("intra-connect", "intra_connect", c.switch, c.dump_switch),
    Attribute("iface", "interface", c.text, c.omit_if_empty),
    Attribute("state", "state", _farm_state, str),
    Attribute("description", "description", c.verbatim, c.omit_if_empty),  # lbweb extension
    # lbweb extensions for health checking: what new connections get when no backend is active
    Attribute(
        "when-all-down", "when_all_down", c.choice(_words(FarmAllDownChoices)), lambda v: None if v == "reject" else v
    ),
    Attribute("fallback-addr", "fallback_address", c.ip_address, c.omit_if_empty),
    Attribute("fallback-port", "fallback_port", c.optional_port, lambda v: None if v is None else str(v)),
)

LOG_PREFIX_DEFAULTS = frozenset({"", "KNAME-TYPE-FNAME", "TYPE-FNAME"})
FARM_IGNORED = {
    "newname": Ignored("renaming is an nftlb API action; import the farm under its new name"),
    "fqdn": Ignored("lbweb does not use a farm's FQDN"),
    "ether-addr": Ignored("lbweb reads the MAC addresses of its own interfaces"),
    "iether-addr": Ignored("lbweb reads the MAC addresses of its own interfaces"),
    "oether-addr": Ignored("lbweb reads the MAC addresses of its own interfaces"),
    "responsettl": Ignored("lbweb does not use a response TTL", frozenset({"", "0"})),
    "mark": Ignored(
        "lbweb does not mark a farm's packets; route by the backends' addresses instead",
        frozenset({"", "0", "0x0", "0x00000000"}),
    ),
    "priority": Ignored(
        "lbweb moves to the next priority group by itself when every backend of a group is unavailable",
        frozenset({"", "1"}),
    ),
    "limits-ttl": Ignored("lbweb's per-client limit entries expire by themselves", frozenset({"", "120"})),
    "rst-rtlimit-burst": Ignored("lbweb's reset limit has no burst", frozenset({"", "0"})),
    "new-rtlimit-log-prefix": Ignored("lbweb counts limited packets instead of logging them", LOG_PREFIX_DEFAULTS),
    "rst-rtlimit-log-prefix": Ignored("lbweb counts limited packets instead of logging them", LOG_PREFIX_DEFAULTS),
    "est-connlimit-log-prefix": Ignored("lbweb counts limited packets instead of logging them", LOG_PREFIX_DEFAULTS),
    "tcp-strict-log-prefix": Ignored("lbweb counts dropped packets instead of logging them", LOG_PREFIX_DEFAULTS),
    "queue": Ignored("lbweb does not queue packets to user space", frozenset({"", "-1"}), blocking=True),
}

BACKEND_ATTRIBUTES = (
    Attribute("ip-addr", "address", c.ip_address, str),
    Attribute("port", "port", c.optional_port, c.omit_if_empty),
    Attribute("weight", "weight", c.integer(1, 10000)),
    Attribute("priority", "priority", c.integer(1, 100)),
    Attribute("est-connlimit", "est_connlimit", c.integer()),
    Attribute("state", "state", _backend_state, _dump_backend_state),
    Attribute("ether-addr", "mac", c.mac, c.omit_if_empty),
)
BACKEND_IGNORED = {
    "mark": FARM_IGNORED["mark"],
    "est-connlimit-log-prefix": FARM_IGNORED["est-connlimit-log-prefix"],
    "source-addr": Ignored(
        "lbweb sets the SNAT source per farm (the farm's source-addr), not per backend", blocking=True
    ),
}

POLICY_IGNORED = {
    "family": Ignored("lbweb policies hold IPv4 and IPv6 elements together", frozenset({"", "ipv4", "ipv6", "inet"})),
    "timeout": Ignored("lbweb policy elements do not expire", frozenset({"", "0"})),
    "priority": Ignored("lbweb checks every policy of a farm before balancing", frozenset({"", "1"})),
    "log-prefix": Ignored("lbweb counts what policies drop instead of logging it", frozenset({""})),
}
ELEMENT_IGNORED = {"time": Ignored("lbweb policy elements do not expire")}
ADDRESS_IGNORED = {
    "iface": Ignored("lbweb hooks non-DSR farms on every interface"),
    "oface": Ignored("lbweb routes replies by the routing table"),
    "ether-addr": FARM_IGNORED["ether-addr"],
    "verdict": Ignored("set the verdict on the farm", frozenset({"", "log drop", "drop"})),
    "log-prefix": Ignored("set the log prefix on the farm", LOG_PREFIX_DEFAULTS),
    "log-rtlimit": Ignored("set the log rate on the farm", frozenset({"", "0", "0/second"})),
}

POLICY_TYPES = {"blacklist": "deny", "whitelist": "allow", "deny": "deny", "allow": "allow"}
POLICY_TYPE_WORDS = {"deny": "blacklist", "allow": "whitelist"}
FAMILIES = {"ipv4": 4, "ipv6": 6}

FARM_FIELD_ATTRIBUTE = {a.field: a.name for a in FARM_ATTRIBUTES} | {"name": "name", "policies": "policies"}
BACKEND_FIELD_ATTRIBUTE = {a.field: a.name for a in BACKEND_ATTRIBUTES}
