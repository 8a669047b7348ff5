"""Small builders of libnftables JSON fragments, all aimed at lbweb's own table."""

from __future__ import annotations

from typing import Any

from compiler.types import Json

TABLE_FAMILY = "inet"
TABLE_NAME = "lbweb"


def _ref(**extra: Any) -> Json:
    return {"family": TABLE_FAMILY, "table": TABLE_NAME, **extra}


def table() -> Json:
    return {"family": TABLE_FAMILY, "name": TABLE_NAME}


def add(kind: str, body: Json) -> Json:
    return {"add": {kind: body}}


def delete(kind: str, body: Json) -> Json:
    return {"delete": {kind: body}}


def flush(kind: str, body: Json) -> Json:
    return {"flush": {kind: body}}


def chain(name: str, **hook: Any) -> Json:
    return _ref(name=name, **hook)


def base_chain(name: str, *, type_: str, hook: str, prio: int) -> Json:
    return chain(name, type=type_, hook=hook, prio=prio, policy="accept")


def rule(chain_name: str, expr: list[Json], comment: str | None = None) -> Json:
    body = _ref(chain=chain_name, expr=expr)
    if comment:
        body["comment"] = comment
    return body


def named_map(name: str, key_type: str | list[str], data: str, flags: list[str] | None = None) -> Json:
    body = _ref(name=name, type=key_type, map=data)
    if flags:
        body["flags"] = flags
    return body


def named_set(name: str, key_type: str) -> Json:
    return _ref(name=name, type=key_type)


def counter(name: str) -> Json:
    return _ref(name=name)


def element(set_name: str, elems: list[Any]) -> Json:
    return _ref(name=set_name, elem=elems)


def jump(target: str) -> Json:
    return {"jump": {"target": target}}


def goto(chain: str) -> Json:
    return {"goto": {"target": chain}}


def match(left: Json, right: Any, op: str = "==") -> Json:
    return {"match": {"op": op, "left": left, "right": right}}


def payload(protocol: str, field_name: str) -> Json:
    return {"payload": {"protocol": protocol, "field": field_name}}


def meta(key: str) -> Json:
    return {"meta": {"key": key}}


def ct(key: str, direction: str | None = None) -> Json:
    body: Json = {"key": key}
    if direction:
        body["dir"] = direction
    return {"ct": body}


def set_ct_mark(value: int) -> Json:
    return {"mangle": {"key": ct("mark"), "value": value}}


def reject(tcp_reset: bool) -> Json:
    """Refuse a new connection: a TCP reset, or ICMP port unreachable for any protocol."""
    return {"reject": {"type": "tcp reset"}} if tcp_reset else {"reject": None}


def counter_ref(name: str) -> Json:
    return {"counter": name}


def counter_map(key: Json, names: dict[str, str]) -> Json:
    """Count into the named counter the key selects (one lookup, whatever the key)."""
    return {"counter": {"map": {"key": key, "data": {"set": [[k, v] for k, v in names.items()]}}}}


def counter_map_ref(key: Json, map_name: str) -> Json:
    """Count into the counter a named counter map gives for the key (one lookup; nothing on a miss)."""
    return {"counter": {"map": {"key": key, "data": "@" + map_name}}}


def numgen(mode: str, modulus: int, offset: int = 0) -> Json:
    return {"numgen": {"mode": mode, "mod": modulus, "offset": offset}}


def vmap(key: Json, data: Any) -> Json:
    return {"vmap": {"key": key, "data": data}}


def concat(*parts: Any) -> Json:
    return {"concat": list(parts)}


def port_value(low: int, high: int) -> Any:
    return low if low == high else {"range": [low, high]}


def field_expr(l3: str, names: tuple[str, ...] | list[str]) -> Json:
    """The packet fields named as nftlb names them (srcip, dstport, srcmac, ...), concatenated if several."""
    source = {
        "srcip": payload(l3, "saddr"),
        "dstip": payload(l3, "daddr"),
        "srcport": payload("th", "sport"),
        "dstport": payload("th", "dport"),
        "srcmac": payload("ether", "saddr"),
        "dstmac": payload("ether", "daddr"),
    }
    parts = [source[name] for name in names]
    return parts[0] if len(parts) == 1 else concat(*parts)
