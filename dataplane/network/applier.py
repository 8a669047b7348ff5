"""The worker's network apply: read the plan from the database, apply it (``kernel.py``), write the files
(``networkd.py``), record the outcome, publish what the kernel now has for the page. Worker only."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from network import networkd
from network.models import NetworkSettings
from network.plan import Plan
from network.selectors import OBSERVED_KEY, current_plan

from . import kernel

log = logging.getLogger("lbweb.network")


def network_dir() -> Path:
    return Path(settings.LBWEB_NETWORK_DIR)


def apply_network(requested: int | None = None) -> kernel.Report | None:
    """Bring the kernel and the files to the configuration (``requested``: skip when already there)."""
    state = NetworkSettings.load()
    if requested is not None and requested <= state.applied_generation:
        return None
    plan = current_plan()
    previous = Plan.from_json(state.applied_plan)
    report = kernel.apply(plan, previous)
    try:
        networkd.write(network_dir(), plan)
    except OSError as exc:
        report.errors.append(f"files under {network_dir()}: {exc}")
    with transaction.atomic():
        NetworkSettings.objects.filter(pk=state.pk).update(
            applied_generation=plan.generation,
            apply_error="\n".join(report.errors),
            applied_at=timezone.now(),
            applied_plan=plan.to_json(),
        )
    log.info(
        "network generation %d applied: %d done, %d refused", plan.generation, len(report.done), len(report.errors)
    )
    publish()
    return report


def publish() -> None:
    """Write the kernel's view (links, addresses, routes) to Redis for the web process to show."""
    from lbweb.redis_client import get_redis

    try:
        view = kernel.observe()
        view["read_at"] = timezone.now().isoformat()
        get_redis().set(OBSERVED_KEY, json.dumps(view))
    except Exception as exc:  # the page shows the configuration without the live view
        log.warning("network view not published: %s", exc)
