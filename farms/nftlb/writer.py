"""lbweb's farms and policies written as an nftlb document, in the format :mod:`farms.nftlb.reader` reads
(nftlb's own dump: its constants included), so export, import into an empty database and export again gives
the same document."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Any

from ..validation import session_key_parts
from .schema import (
    BACKEND_ATTRIBUTES,
    FARM_ATTRIBUTES,
    POLICY_TYPE_WORDS,
    Attribute,
    Compound,
)

# nftlb's dump writes these with its defaults (a farm's priority is recomputed, queue -1 is none).
NFTLB_CONSTANTS = {"priority": "1", "queue": "-1"}


def _dump(obj: Any, attributes: Iterable[Attribute | Compound]) -> dict[str, str]:
    out = {}
    for attr in attributes:
        value = attr.dump(obj) if isinstance(attr, Compound) else attr.dump(getattr(obj, attr.field))
        if value is not None:
            out[attr.name] = value
    return out


def _export_client(client: str, farm) -> str:
    """lbweb's addr:port client back into nftlb's ``addr . port`` persistence key."""
    if farm.persistence != "srcip srcport":
        return client
    address, port = session_key_parts(client, farm)
    return f"{address} . {port}"


def export_farm(farm) -> dict[str, Any]:
    """One farm (with its backends, static sessions and policy names) as an nftlb farm object."""
    family = "ipv6" if ipaddress.ip_address(farm.vip).version == 6 else "ipv4"
    doc: dict[str, Any] = {"name": farm.name, "family": family, **_dump(farm, FARM_ATTRIBUTES)}
    doc |= NFTLB_CONSTANTS  # what nftlb's own dump writes and lbweb has no field for (their defaults)
    names = {}
    backends = []
    for index, backend in enumerate(farm.backends.all()):
        names[backend.id] = f"bck{index}"
        backends.append({"name": names[backend.id], **_dump(backend, BACKEND_ATTRIBUTES)})
    doc["backends"] = backends
    sessions = [
        {"client": _export_client(s.client, farm), "backend": names[s.backend_id]} for s in farm.static_sessions.all()
    ]
    if sessions:
        doc["sessions"] = sessions
    policies = [{"name": p.name} for p in farm.policies.all()]
    if policies:
        doc["policies"] = policies
    return doc


def export_policy(policy) -> dict[str, Any]:
    versions = {ipaddress.ip_network(e, strict=False).version for e in policy.element_list}
    family = "ipv6" if versions == {6} else "ipv4"  # nftlb's default; a policy of both families says ipv4
    doc: dict[str, Any] = {"name": policy.name, "family": family, "type": POLICY_TYPE_WORDS[policy.type]}
    if policy.description:
        doc["description"] = policy.description
    doc["elements"] = [{"data": network} for network in policy.element_list]
    return doc


def export_document(farms: Iterable, policies: Iterable | None = None) -> dict[str, Any]:
    """Farms (and the policies they use, or ``policies`` when given) as an nftlb document."""
    farms = list(farms)
    if policies is None:
        used = {p.name: p for farm in farms for p in farm.policies.all()}
        policies = [used[name] for name in sorted(used)]
    doc: dict[str, Any] = {"farms": [export_farm(farm) for farm in farms]}
    policy_docs = [export_policy(p) for p in policies]
    if policy_docs:
        doc["policies"] = policy_docs
    return doc
