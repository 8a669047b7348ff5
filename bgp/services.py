"""The only writers of the BGP tables; each write is validated (``clean()``), checked by BIRD's own parser when BGP
is on (``bird -p`` on the file the change would make), audited (``farms.audit``) in its transaction, and followed
by a deploy (the worker rewrites BIRD's file and reloads it: ``dataplane.bgp``)."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from compiler.bgp import render
from farms.audit import audited
from farms.models import Farm
from lbweb import enqueue
from lbweb.writes import validated_save

from . import engine_check
from .models import ANNOUNCEMENT_FIELDS, PEER_FIELDS, SETTINGS_FIELDS, BgpPeer, BgpSettings, FarmAnnouncement
from .specs import bgp_spec, every_route


def request_deploy() -> None:
    """The worker rewrites BIRD's file after this commits (broker down: its heartbeat deploys within seconds)."""
    enqueue.send_after_commit("bgp.tasks.deploy", what="BGP deploy")


def check_with_bird() -> None:
    """What the change would make, read by ``bird -p`` inside the transaction: a refusal rolls the change back,
    with BIRD's words on the form."""
    settings = BgpSettings.load()
    if not settings.enabled:
        return
    try:
        text = render.bird_conf(bgp_spec(settings, every_route()))
        engine_check.check_text(text)
    except (ValueError, engine_check.CheckFailed) as exc:
        raise ValidationError(f"BIRD would refuse this configuration: {exc}") from exc


def _saved() -> None:
    check_with_bird()
    request_deploy()


@audited("update", "settings")
@transaction.atomic
def settings_update(*, settings: BgpSettings | None = None, **values) -> BgpSettings:
    """Change this node's BGP settings (on, AS, router id, BFD timers, drain period)."""
    settings = settings or BgpSettings.load()
    validated_save(settings, SETTINGS_FIELDS, values, update_fields=None if settings._state.adding else SETTINGS_FIELDS)
    _saved()
    return settings


@audited(lambda **kw: "drain" if kw.get("drained") else "undrain", "settings")
@transaction.atomic
def drain(*, settings: BgpSettings | None = None, drained: bool) -> BgpSettings:
    """Drain this node (its VIPs go with the graceful-shutdown community first, then are withdrawn) or undo it."""
    settings = settings or BgpSettings.load()
    if settings._state.adding:
        settings.save()
    if settings.drained != drained:
        settings.drained, settings.drained_at = drained, timezone.now() if drained else None
        settings.save(update_fields=["drained", "drained_at"])
    request_deploy()
    return settings


@audited("create")
@transaction.atomic
def peer_create(**values) -> BgpPeer:
    """Add a router this node announces the VIPs to."""
    peer = validated_save(BgpPeer(), PEER_FIELDS, values)
    _saved()
    return peer


@audited("update", "peer")
@transaction.atomic
def peer_update(*, peer: BgpPeer, **values) -> BgpPeer:
    """Change a peer (a session whose settings change restarts; the others stay up)."""
    validated_save(peer, PEER_FIELDS, values)
    _saved()
    return peer


@audited("delete", "peer")
@transaction.atomic
def peer_delete(*, peer: BgpPeer) -> None:
    """Stop peering with a router (its session ends; it forgets this node's routes)."""
    peer.delete()
    request_deploy()


@audited("update", "announcement")
@transaction.atomic
def announcement_update(*, announcement: FarmAnnouncement, **values) -> FarmAnnouncement:
    """A farm's announcement (:func:`announcement_of`): whether its VIP is announced, its MED and communities."""
    validated_save(announcement, ANNOUNCEMENT_FIELDS, values)
    _saved()
    return announcement


def announcement_of(farm: Farm) -> FarmAnnouncement:
    """The farm's announcement row, or a new one with the defaults (announced, no MED, no community)."""
    return FarmAnnouncement.objects.filter(farm=farm).first() or FarmAnnouncement(farm=farm)
