"""Rules for HTTP and HTTPS farms and their options. Pure (no Django import): the models' ``clean()`` call these
and raise the field-keyed errors they return, so the UI and the API refuse the same input with the same words."""

from __future__ import annotations

import re

from compiler.haproxy.config import ERROR_REASONS

TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an HTTP header name (RFC 9110 token)
HOST = re.compile(r"^(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
L4_ONLY = {
    "source_addr": "",
    "source_ports": "",
    "new_rtlimit": 0,
    "rst_rtlimit": 0,
    "helper": "",
    "flow_offload": False,
    "interface": "",
    "tcp_strict": False,
}
REDIRECT_CODES = (301, 302, 303, 307, 308)
ERROR_STATUSES = tuple(ERROR_REASONS)  # the statuses HAProxy's errorfile takes and lbweb names


def l7_farm_errors(farm, e: dict[str, str]) -> None:
    """A farm of mode http/https: TCP on its ports, routing settings in its services, no kernel-only options."""
    if farm.protocol != "tcp":
        e["protocol"] = "HTTP and HTTPS farms are TCP."
    if farm.scheduler != "rr" or farm.sched_param:
        e["scheduler"] = "HTTP farms choose backends per service (its scheduler); leave the farm's at rr."
    if farm.persistence:
        e["persistence"] = "HTTP farms keep clients per service (cookie, source, header); leave the farm's empty."
    for name, default in L4_ONLY.items():
        if getattr(farm, name) != default:
            e[name] = f"{name} applies to kernel (L4) farms only."
    if farm.when_all_down != "reject" or farm.fallback_address:
        e["when_all_down"] = "An HTTP farm without a serving backend answers 503 (its error page)."


def header_rules_errors(rules) -> str | None:
    """``rules``: [{"direction": "request"|"response", "name": ..., "value": ... or absent to delete}]."""
    if not isinstance(rules, list):
        return "A list of {direction, name, value} objects."
    for i, rule in enumerate(rules):
        if not isinstance(rule, dict) or set(rule) - {"direction", "name", "value"}:
            return f"Rule {i + 1}: an object with direction, name and (to set) value."
        if rule.get("direction") not in ("request", "response"):
            return f"Rule {i + 1}: direction is 'request' or 'response'."
        if not isinstance(rule.get("name"), str) or not TOKEN.match(rule["name"]):
            return f"Rule {i + 1}: '{rule.get('name')}' is not a header name."
        value = rule.get("value")
        if value is not None and (not isinstance(value, str) or CONTROL.search(value) or len(value) > 1000):
            return f"Rule {i + 1}: the value must be text without control characters (at most 1000)."
    return None


def redirect_rules_errors(rules) -> str | None:
    """``rules``: [{"path_prefix": "/old", "target": "https://...", "code": 301, "keep_path": false}]."""
    if not isinstance(rules, list):
        return "A list of {path_prefix, target, code, keep_path} objects."
    for i, rule in enumerate(rules):
        if not isinstance(rule, dict) or set(rule) - {"path_prefix", "target", "code", "keep_path"}:
            return f"Redirect {i + 1}: an object with path_prefix, target, code and keep_path."
        prefix, target = rule.get("path_prefix"), rule.get("target")
        if not isinstance(prefix, str) or not prefix.startswith("/") or CONTROL.search(prefix) or " " in prefix:
            return f"Redirect {i + 1}: path_prefix starts with / and has no spaces."
        if not isinstance(target, str) or not target or CONTROL.search(target) or " " in target:
            return f"Redirect {i + 1}: target is a URL or a path without spaces."
        if rule.get("code", 302) not in REDIRECT_CODES:
            return f"Redirect {i + 1}: code is one of {', '.join(map(str, REDIRECT_CODES))}."
    return None


def error_pages_errors(pages) -> str | None:
    """``pages``: {"503": "<html>...</html>", ...}."""
    if not isinstance(pages, dict):
        return "An object: status code -> HTML."
    for status, body in pages.items():
        if not str(status).isdigit() or int(status) not in ERROR_STATUSES:
            return f"Status {status}: one of {', '.join(map(str, ERROR_STATUSES))}."
        if not isinstance(body, str) or len(body.encode()) > 16000:
            return f"Status {status}: HTML text of at most 16,000 bytes."
    return None


def hosts_errors(hosts: str) -> str | None:
    for host in hosts.split():
        if not HOST.match(host.lower()):
            return f"'{host}' is not a host name or a wildcard such as *.example.com."
    return None


def regex_errors(pattern: str) -> str | None:
    if CONTROL.search(pattern):
        return "No control characters."
    try:
        re.compile(pattern)
    except re.error as exc:
        return f"Not a regular expression: {exc}."
    return None


def path_prefix_errors(prefix: str) -> str | None:
    if prefix and (not prefix.startswith("/") or CONTROL.search(prefix) or " " in prefix):
        return "A path prefix starts with / and has no spaces."
    return None
