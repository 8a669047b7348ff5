"""The BGP rows in the generator's words (``compiler.bgp``): read by the web (its ``bird -p`` check before a save)
and by the worker (``dataplane.bgp.applier``, which adds what this node's kernel holds)."""

from __future__ import annotations

from compiler.bgp.routes import FarmState, host_route
from compiler.bgp.spec import BgpSpec, PeerSpec, RouteSpec
from farms.choices import FarmModeChoices, FarmStateChoices
from farms.specs import farm_spec, farms_queryset

from .models import BgpPeer, BgpSettings, FarmAnnouncement


def peer_spec(peer: BgpPeer) -> PeerSpec:
    return PeerSpec(
        key=peer.pk, address=peer.address, asn=peer.asn, password=peer.password, hold_time=peer.hold_time,
        keepalive_time=peer.keepalive_time, multihop=peer.multihop, bfd=peer.bfd, source_address=peer.source_address,
    )  # fmt: skip


def bgp_spec(settings: BgpSettings, routes: tuple[RouteSpec, ...], peers=None) -> BgpSpec:
    peers = BgpPeer.objects.order_by("pk") if peers is None else peers
    return BgpSpec(
        router_id=settings.router_id,
        local_asn=settings.local_asn,
        peers=tuple(peer_spec(p) for p in peers),
        routes=routes,
        bfd_interval_ms=settings.bfd_interval_ms,
        bfd_multiplier=settings.bfd_multiplier,
    )


def farm_states(held, failed) -> list[FarmState]:
    """Every L4 farm as route health injection sees it; ``held(farm)`` and ``failed(farm)`` say what this node's
    kernel holds and what failed to apply here (the web, checking syntax only, says True and False)."""
    announcements = {a.farm_id: a for a in FarmAnnouncement.objects.all()}
    states = []
    for farm in farms_queryset():
        spec = farm_spec(farm)
        settings = announcements.get(farm.pk) or FarmAnnouncement(farm=farm)
        active = 1 if spec.mode == FarmModeChoices.LOCAL else len(spec.active_backends)
        states.append(
            FarmState(
                name=farm.name, vip=farm.vip, up=farm.state == FarmStateChoices.UP, failed=failed(farm),
                held=held(farm), active_backends=active, announce=settings.announce, med=settings.med,
                communities=settings.parsed_communities(),
            )
        )  # fmt: skip
    return states


def every_route() -> tuple[RouteSpec, ...]:
    """Every farm's route as if all could serve: what the web's check writes, so each MED and community is read
    by ``bird -p`` before it is saved."""
    routes = {}
    for state in farm_states(held=lambda farm: True, failed=lambda farm: False):
        routes.setdefault(host_route(state.vip), RouteSpec(host_route(state.vip), state.med, state.communities))
    return tuple(routes.values())
