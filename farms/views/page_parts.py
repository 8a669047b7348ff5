"""What a farm's page shows, shared by its views: the backends' rows and state buttons, the words for
health checking and traffic, the open connections."""

from __future__ import annotations

from lbweb import heartbeat
from monitoring.store import metric_store

from ..choices import BackendHealthChoices, BackendStateChoices, FarmModeChoices, FarmTrafficChoices
from ..forms import FARM_FIELD_WHEN, HEALTH_CHECK_FIELD_WHEN, FarmForm, HealthCheckForm, applies
from ..models import AuditEvent, Backend, Farm, HealthCheck
from ..specs import farm_spec
from ..summary import shares

# The verb on a backend's one-click button for each state it can be put in (the label otherwise).
STATE_VERBS = {
    BackendStateChoices.ENABLED: "Enable",
    BackendStateChoices.DRAIN: "Drain",
    BackendStateChoices.DISABLED: "Disable",
}
PAGE_SIZE = 100


def state_actions(backend: Backend) -> list[dict]:
    """The one-click state buttons of a backend: one per other state of BackendStateChoices."""
    return [
        {"value": value, "verb": STATE_VERBS.get(value, label), "label": label}
        for value, label in BackendStateChoices.choices
        if value != backend.state
    ]


def farm_page_context(farm: Farm) -> dict:
    """What the farm page shows besides the farm itself."""
    form = FarmForm(instance=farm)
    conditions = {name for when in FARM_FIELD_WHEN.values() for name in when}
    values = {name: getattr(farm, name) for name in conditions}
    options = []
    for title, fields in form.fieldsets():
        rows = [(f.label, _shown(farm, f.name)) for f in fields if applies(FARM_FIELD_WHEN.get(f.name), values)]
        if rows:
            options.append((title, rows))
    spec = farm_spec(farm)
    check = HealthCheck.effective_for(farm)
    check_values = {name: getattr(check, name) for name in ("type",)}
    first_port = farm.port_ranges[0][0] if farm.ports else None
    probed = "each backend's port" + (f", else {first_port}" if first_port else "")
    check_rows = [
        (f.label, probed if f.name == "port" and check.port is None else _shown(check, f.name))
        for _title, fields in HealthCheckForm(instance=check).fieldsets()
        for f in fields
        if f.name != "type" and applies(HEALTH_CHECK_FIELD_WHEN.get(f.name), check_values)
    ]
    connections, census_at = open_connections(farm.pk)
    return {
        "options": options,
        "backends": backend_rows(farm, spec, connections),
        "events": AuditEvent.objects.filter(farm_ref=farm.pk)[:10],
        "healthd_words": healthd_words(heartbeat.read_status()),
        "check": check,
        "check_is_default": check.pk is None,
        "is_local": farm.mode == FarmModeChoices.LOCAL,
        "check_rows": check_rows,
        "traffic_words": traffic_words(farm, spec),
        "bulk_states": [(value, STATE_VERBS.get(value, label)) for value, label in BackendStateChoices.choices],
        "census_at": census_at,
    }


def open_connections(farm_id: int) -> tuple[dict[int, int], float | None]:
    """Each backend's open connections from the newest census; nothing known when Redis is down."""
    try:
        return metric_store().open_connections(farm_id)
    except Exception:  # Redis down: the page says "—" or "not known", never 0
        return {}, None


def clock_text(timestamp: float | None) -> str:
    """A census time as the server's local clock reads it, with its age."""
    if timestamp is None:
        return ""
    from datetime import datetime

    from django.utils import timezone

    moment = datetime.fromtimestamp(timestamp, tz=timezone.get_current_timezone())
    age = max(0, round(timezone.now().timestamp() - timestamp))
    return f"{moment:%H:%M:%S}, {age} s ago"


def _shown(obj, name: str) -> str:
    if name == "policies":
        return ", ".join(p.name for p in obj.policies.all()) or "—"
    display = getattr(obj, f"get_{name}_display", None)
    value = display() if display else getattr(obj, name)
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value) if value not in ("", None) else "—"


HEALTHD_STATES = {"impaired": "impaired", "stopped": "stopped", "never_seen": "not running", "unknown": "unknown"}


def healthd_words(status: dict) -> str:
    """The banner of the farm list and the farm page when health checking is not running as it should."""
    state = status.get("state")
    if state == "running":
        return ""
    words = f"Health checking {HEALTHD_STATES.get(state, state)}"
    detail = str(status.get("detail", "")).removeprefix(words.lower()).lstrip(": ")  # "stopped: stopped: ..." once
    return f"{words}: {detail}." if detail else f"{words}."


def traffic_words(farm: Farm, spec) -> str:
    """What new connections to the farm get now, in the words the compiler's rules would use."""
    traffic = spec.traffic
    if traffic == FarmTrafficChoices.BALANCED:
        count = len(spec.active_backends)
        return f"New connections are balanced over {count} backend{'s' if count != 1 else ''}."
    if traffic == FarmTrafficChoices.OFF:
        return "The farm is off: lbweb does not serve its VIP."
    if traffic == FarmTrafficChoices.LOCAL:
        return (
            "New connections go to the service listening on the VIP on the appliance itself, after the farm's "
            "policies and limits."
        )
    if traffic == FarmTrafficChoices.FALLBACK:
        return f"No backend takes new connections: they go to the fallback {farm.fallback_address}."
    why = "It has no backend" if not spec.backends else "No backend takes new connections"
    answer = "a TCP reset" if farm.protocol == "tcp" else "an ICMP port unreachable"
    return f"{why}: the farm rejects new connections ({answer})."


def backend_rows(farm: Farm, spec, connections: dict[int, int]) -> list[dict]:
    """Each backend with its state buttons, its health in words, and whether it takes new connections."""
    share = shares(spec)
    active = {b.id for b in spec.active_backends}
    eligible_priorities = [b.priority for b in spec.backends if b.eligible]
    rows = []
    for backend in farm.backends.all():
        if not spec.enabled:
            serving = "no: the farm is off"
        elif backend.state == BackendStateChoices.DISABLED:
            serving = "no: disabled"
        elif backend.health == BackendHealthChoices.DOWN:
            serving = "no: down"
        elif backend.state == BackendStateChoices.DRAIN:
            serving = "only clients bound by persistence (draining)"
        elif backend.pk in active:
            serving = f"yes: {share[backend.pk][1]} % of new connections"
        else:
            serving = f"standby: priority {backend.priority} waits while priority {min(eligible_priorities)} serves"
        rows.append(
            {
                "backend": backend,
                "actions": state_actions(backend),
                "serving": serving,
                "takes_traffic": backend.pk in active,
                "connections": connections.get(backend.pk),
            }
        )
    return rows
