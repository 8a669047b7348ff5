"""What only this namespace knows, filled into the farms' specs before they are compiled here."""

from __future__ import annotations

import dataclasses

from farms.choices import FarmModeChoices
from farms.specs import Snapshot

from .kernel import links


def localise(snap: Snapshot) -> Snapshot:
    """Fill in what only this namespace knows: interface and backend MACs (DSR), offload devices."""
    specs = []
    for spec in snap.specs:
        try:
            if spec.mode == FarmModeChoices.DSR and spec.enabled:
                spec = links.resolve_dsr(spec)
            if spec.flow_offload:
                spec = dataclasses.replace(spec, offload_devices=links.forwarding_devices())
        except links.LinkError as exc:
            snap.failures[spec.id] = str(exc)
        specs.append(spec)
    snap.specs = specs
    return snap
