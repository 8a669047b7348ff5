"""Issue 18 without a browser: bulk states (API and page), the cut's count in its audit event, the inline
backend editor, the preview's plain summary, the backends' history behind the charts, the forms' rules and
the menu's current section. (The browser journeys: test_ui_day_browser.py, test_ui_history_browser.py.)"""

from __future__ import annotations

import datetime as dt
import json

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from compiler.spec import BackendSpec, FarmSpec
from dataplane import tasks
from farms import audit, capabilities, health_services, preview, services
from farms.forms import FARM_FIELD_WHEN, FarmForm, applies
from farms.models import AuditEvent, Backend, HealthEvent
from farms.summary import summarise
from lbweb.navigation import section_of
from monitoring.selectors import backend_history

pytestmark = pytest.mark.django_db

FARM = {"name": "web", "vip": "198.18.100.1", "ports": "80", "mode": "dnat", "scheduler": "weight"}


@pytest.fixture
def farm():
    farm = services.farm_create(**FARM)
    for address, weight in (("198.18.1.11", 5), ("198.18.1.12", 3), ("198.18.1.13", 1)):
        services.backend_create(farm=farm, address=address, weight=weight)
    return farm


def api_as(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


# -- bulk states ------------------------------------------------------------------------------------------


def test_bulk_state_api_is_all_or_nothing_audited_and_for_operators(farm, role_users):
    ids = list(farm.backends.values_list("id", flat=True))
    viewer = api_as(role_users["viewer"]).post("/api/v1/backends/bulk-state/", {"backends": ids, "state": "drain"})
    assert viewer.status_code == 403
    operator = api_as(role_users["operator"])
    unknown = operator.post("/api/v1/backends/bulk-state/", {"backends": [ids[0], 999999], "state": "drain"})
    assert unknown.status_code == 400 and "999999" in str(unknown.json())
    assert set(Backend.objects.values_list("state", flat=True)) == {"enabled"}  # nothing changed
    services.backend_update(backend=Backend.objects.get(id=ids[2]), state="drain")
    before = AuditEvent.objects.count()
    done = operator.post("/api/v1/backends/bulk-state/", {"backends": ids, "state": "drain"}, format="json")
    assert done.status_code == 200 and done.json() == {"changed": ids[:2], "state": "drain"}
    assert set(Backend.objects.values_list("state", flat=True)) == {"drain"}
    events = AuditEvent.objects.order_by("id")[before:]
    assert [(e.object_id, e.actor_name, e.before["state"], e.after["state"]) for e in events] == [
        (ids[0], "operator-user", "enabled", "drain"),
        (ids[1], "operator-user", "enabled", "drain"),
    ]
    bad = operator.post("/api/v1/backends/bulk-state/", {"backends": ids, "state": "cut"}, format="json")
    assert bad.status_code == 400  # cut is not a state: it has its confirmation and its count


def test_bulk_state_page_changes_only_the_chosen_backends_of_the_farm(farm, role_users):
    web = Client()
    web.force_login(role_users["operator"])
    first, second, _third = farm.backends.order_by("id")
    response = web.post(f"/farms/{farm.pk}/backends/state/", {"state": "disabled", "backend": [first.id, second.id]})
    assert response.status_code == 302
    assert list(farm.backends.order_by("id").values_list("state", flat=True)) == ["disabled", "disabled", "enabled"]
    other = services.farm_create(**{**FARM, "name": "other", "vip": "198.18.100.2"})
    stranger = services.backend_create(farm=other, address="198.18.1.11")
    web.post(f"/farms/{farm.pk}/backends/state/", {"state": "drain", "backend": [stranger.id]})
    assert Backend.objects.get(id=stranger.id).state == "enabled"  # not a backend of this farm


# -- the cut: asked first, counted after ------------------------------------------------------------------


def test_the_cut_hands_its_audit_event_to_the_worker_which_adds_the_count(farm, role_users, monkeypatch):
    queued = []
    monkeypatch.setattr(services, "_enqueue", lambda name, **kwargs: queued.append((name, kwargs)))
    backend = farm.backends.first()
    with pytest.raises(RuntimeError), audit.transaction.atomic():  # a rolled-back cut leaves no trace
        services.backend_maintenance(backend=backend, mode="cut", actor=role_users["operator"])
        raise RuntimeError("rolled back")
    assert not AuditEvent.objects.filter(action="maintenance").exists()
    services.backend_maintenance(backend=backend, mode="cut", actor=role_users["operator"])
    event = AuditEvent.objects.get(action="maintenance")
    assert queued[-1] == ("cut_backend", {"backend_id": backend.id, "audit_event_id": event.id})
    monkeypatch.setattr(tasks.sessions, "cut_backend", lambda backend_id: 7)  # the kernel's part: see the browser test
    assert tasks.cut_backend(backend.id, event.id) == 7
    event.refresh_from_db()
    assert event.after["connections_cut"] == 7 and event.after["state"] == "disabled"
    assert ("connections_cut", None, 7) in event.changes()


def test_the_cut_page_shows_the_census_count_and_the_state_button_no_longer_cuts(farm, role_users, redis_server):
    from monitoring.store import CENSUS, client

    backend = farm.backends.first()
    census = {"t": 1_800_000_000.0, "farms": {str(farm.id): {"ac": 9, "b": {str(backend.id): {"ac": 4}}}}}
    client(redis_server.url).set(CENSUS, json.dumps(census))
    web = Client()
    web.force_login(role_users["operator"])
    page = web.get(f"/backends/{backend.id}/cut/").content.decode()
    assert 'data-connections="4"' in page and "4 open connections" in page
    assert web.post(f"/backends/{backend.id}/state/", {"state": "cut"})["Location"] == f"/backends/{backend.id}/cut/"
    assert Backend.objects.get(id=backend.id).state == "enabled"
    client(redis_server.url).delete(CENSUS)
    page = web.get(f"/backends/{backend.id}/cut/").content.decode()
    assert "not known now" in page  # no census: it says so, it does not say 0


# -- the inline backend editor ------------------------------------------------------------------------------


def editor_data(farm, rows: list[dict], **extra) -> dict:
    data = {"backends-TOTAL_FORMS": str(len(rows)), "backends-INITIAL_FORMS": str(farm.backends.count())}
    for index, row in enumerate(rows):
        for name, value in {"weight": "1", "priority": "1", "state": "enabled", "port": "", **row}.items():
            data[f"backends-{index}-{name}"] = value
    return {**data, **extra}


def test_the_inline_editor_changes_adds_and_removes_in_one_save_or_not_at_all(farm, admin_user):
    web = Client()
    web.force_login(admin_user)
    b1, b2, b3 = farm.backends.order_by("id")
    rows = [
        {"id": str(b1.id), "address": b1.address, "weight": "2"},
        {"id": str(b2.id), "address": b2.address, "weight": "3", "DELETE": "on"},
        {"id": str(b3.id), "address": b3.address, "weight": "1"},
        {"address": "198.18.1.14", "weight": "4"},
        {"address": "", "weight": "1"},  # the empty row the page always offers
    ]
    previewed = web.post(f"/farms/{farm.pk}/backends/", editor_data(farm, rows, _preview="1"))
    text = previewed.content.decode()
    assert previewed.status_code == 200 and "− backend 198.18.1.12" in text and "+ backend 198.18.1.14" in text
    assert "weight 5 → 2" in text and farm.backends.count() == 3  # nothing saved
    clash = [*rows[:3], {"address": "198.18.1.11", "weight": "1"}]  # a second 198.18.1.11
    refused = web.post(f"/farms/{farm.pk}/backends/", editor_data(farm, clash, _save="1"))
    assert refused.status_code == 400 and sorted(farm.backends.values_list("weight", flat=True)) == [1, 3, 5]
    saved = web.post(f"/farms/{farm.pk}/backends/", editor_data(farm, rows, _save="1"))
    assert saved.status_code == 302
    assert dict(farm.backends.values_list("address", "weight")) == {
        "198.18.1.11": 2,
        "198.18.1.13": 1,
        "198.18.1.14": 4,
    }
    assert {e.action for e in AuditEvent.objects.filter(actor_name="admin")} == {"update", "delete", "create"}


# -- the plain summary ----------------------------------------------------------------------------------------


def test_the_summary_says_the_change_in_words():
    new = FarmSpec(id=1, name="web", vip="198.18.50.1", ports=((80, 80), (443, 443)), mode="dnat", scheduler="weight",
                   backends=(BackendSpec(1, "198.18.1.11", weight=5), BackendSpec(2, "198.18.1.12", weight=3),
                             BackendSpec(3, "198.18.1.13", weight=1)))  # fmt: skip
    lines = summarise(None, new)
    assert lines[0] == "+ farm web: VIP 198.18.50.1 tcp/80,443, DNAT, weighted"
    assert "weights 5/3/1 → 56/33/11 % of new connections (198.18.1.11, 198.18.1.12, 198.18.1.13)" in lines
    drained = FarmSpec(**{**new.__dict__, "backends": (BackendSpec(1, "198.18.1.11", weight=5, state="drain"),
                                                       *new.backends[1:])})  # fmt: skip
    assert summarise(new, drained) == [
        "backend 198.18.1.11: state enabled → drain",
        "weights 3/1 → 75/25 % of new connections (198.18.1.12, 198.18.1.13)",
        "new connections: balanced over 3 backends → balanced over 2 backends",
    ]
    empty = FarmSpec(id=1, name="web", vip="198.18.50.1", ports=((80, 80),))
    assert summarise(None, empty)[-1] == "new connections: rejected (TCP reset)"
    assert summarise(empty, None) == ["− farm web: VIP 198.18.50.1 tcp/80 and its 0 backends leave the kernel"]


def test_the_preview_api_carries_the_summary(farm, admin_user):
    body = api_as(admin_user).post(f"/api/v1/farms/{farm.id}/preview/", {"ports": "80,443"}, format="json").json()
    assert body["summary"][:2] == ["− VIP 198.18.100.1 tcp/80", "+ VIP 198.18.100.1 tcp/80,443"]
    assert preview.farm_removal(farm).summary[0].startswith("− farm web")


# -- the history behind the charts ----------------------------------------------------------------------------


def test_backend_history_comes_from_the_audit_trail_and_the_health_events(farm):
    b1 = farm.backends.order_by("id").first()
    created = AuditEvent.objects.get(action="create", object_type="backend", object_id=b1.id).time
    at = lambda seconds: created + dt.timedelta(seconds=seconds)  # noqa: E731
    AuditEvent.objects.filter(object_type="backend", object_id=b1.id).update(time=created)
    services.backend_update(backend=b1, state="drain")
    AuditEvent.objects.filter(action="update", object_type="backend", object_id=b1.id).update(time=at(10))
    health_services.health_record([health_services.HealthTransition(b1.id, "up", "TCP connect: ok", at(5))])
    health_services.health_record([health_services.HealthTransition(b1.id, "down", "TCP connect: refused", at(20))])
    services.backend_update(backend=Backend.objects.get(id=b1.id), state="enabled")
    AuditEvent.objects.filter(action="update", object_id=b1.id, after__state="enabled").update(time=at(30))
    services.backend_delete(backend=farm.backends.order_by("id").last())
    history = {h["id"]: h for h in backend_history(farm, created.timestamp() - 100, at(40).timestamp())}
    segments = [(s["from"] - created.timestamp(), s["status"], s["health"]) for s in history[b1.id]["segments"]]
    assert (
        segments
        == [
            (0, "serving", "unknown"),  # from its creation, not from the window's start
            (5, "serving", "up"),
            (10, "draining", "up"),
            (20, "down", "down"),
            (30, "down", "down"),  # enabled again, but still down
        ][: len(segments)]
        and [s[1] for s in segments] == ["serving", "serving", "draining", "down", "down"]
    )
    assert history[b1.id]["segments"][-1]["reason"] == "TCP connect: refused"
    later = {h["id"]: h for h in backend_history(farm, at(15).timestamp(), at(40).timestamp())}
    first = later[b1.id]["segments"][0]  # the window opens between two changes: the one before it holds
    assert (round(first["from"] - created.timestamp()), first["status"], first["health"]) == (15, "draining", "up")
    assert first["reason"] == "TCP connect: ok"
    removed = [h for h in history.values() if h["deleted"]]
    assert len(removed) == 1 and removed[0]["address"] == "198.18.1.13"  # a deleted backend keeps its past
    assert HealthEvent.objects.count() == 2


def test_idle_points_are_not_made_up_before_a_backend_existed(farm, redis_server, settings):
    from collector.sampler import Sample
    from monitoring.selectors import farm_series
    from monitoring.store import MetricStore, client

    settings.REDIS_URL = redis_server.url
    store = MetricStore(client(redis_server.url), interval=2.0)
    client(redis_server.url).flushdb()
    now = float(int(timezone.now().timestamp()))  # whole seconds: the store keeps milliseconds
    type(farm).objects.filter(pk=farm.pk).update(created=timezone.now() - dt.timedelta(seconds=10))
    farm.refresh_from_db()
    for t in (now - 600, now - 300, now - 4, now - 2):  # samples from before the farm and after
        store.write(Sample(t=t, system={"new_conns": 0.0}, farms={}, census=False))
    series = farm_series(store, farm, "15m", now=now)
    created = farm.created.timestamp()
    assert series["window_start"] == created and series["farm"]["created"] == created
    assert [p["t"] for p in series["points"] if not p.get("gap")] == [now - 4, now - 2]
    assert all("enabled" not in b for p in series["points"] for b in p.get("backends", {}).values())


# -- forms and the menu -----------------------------------------------------------------------------------


def test_farm_form_rules_and_the_kernels_limits(redis_server, settings):
    settings.REDIS_URL = redis_server.url
    from lbweb.redis_client import get_redis

    get_redis.cache_clear()
    get_redis().set(capabilities.REDIS_KEY, json.dumps({"flowtable": False, "helper-sip": False, "reject-nat": False}))
    capabilities.forget()
    try:
        form = FarmForm()
        assert "disabled" in str(form["flow_offload"]) and "no flowtables" in form.fields["flow_offload"].help_text
        helper = str(form["helper"])
        assert 'value="sip" disabled' in helper and "not in this kernel" in helper and 'value="ftp">' in helper
        assert 'value="reject" disabled' in str(form["limit_verdict"])
        assert form.fields["name"].widget.attrs["autofocus"] and form.fields["vip"].widget.attrs["aria-required"]
    finally:
        get_redis().delete(capabilities.REDIS_KEY)
        capabilities.forget()
    assert applies(FARM_FIELD_WHEN["source_addr"], {"mode": "snat"})
    assert not applies(FARM_FIELD_WHEN["source_addr"], {"mode": "dnat"})
    assert not applies(FARM_FIELD_WHEN["persist_ttl"], {"mode": "snat", "scheduler": "weight", "persistence": ""})


def test_the_menu_marks_the_section_of_the_page():
    assert section_of("/") == section_of("/farms/3/edit/") == section_of("/backends/4/cut/") == "farms"
    assert section_of("/system/tls/") == "system" and section_of("/api/docs/") == "api"
    assert section_of("/accounts/login/") is None


def test_both_api_docs_pages_carry_lbwebs_header_with_their_section_marked(admin_user):
    web = Client()
    web.force_login(admin_user)
    for path in ("/api/docs/", "/api/redoc/"):
        page = web.get(path).content.decode()
        assert '<header class="site">' in page and 'lang="en"' in page, path
        assert '<a href="/api/docs/" aria-current="page">API</a>' in page, path


def test_backends_edit_reports_every_refused_row_and_keeps_nothing(farm, admin_user):
    b1, b2, _b3 = farm.backends.order_by("id")
    rows = [(b1, {"weight": 7}), (None, {"address": "198.18.1.13"}), (None, {"address": "2001:2::1"}),
            (None, {"address": "198.18.1.12"})]  # fmt: skip
    with pytest.raises(services.BackendRowsError) as refused:
        services.backends_edit(farm=farm, rows=rows, removed=[b2], actor=admin_user)
    assert set(refused.value.rows) == {1, 2}  # a twin of 198.18.1.13 and an IPv6 address; .12 was removed first
    assert "must be IPv4 too" in " ".join(refused.value.rows[2].messages)
    assert sorted(farm.backends.values_list("weight", flat=True)) == [1, 3, 5] and farm.backends.count() == 3
    assert not AuditEvent.objects.filter(actor_name="admin").exists()


# Fields the edit page hides where they do not apply, with a value that would matter: wherever the page hides
# one, the model refuses that value (so hiding it never hides an option that works).
REFUSED_WHERE_HIDDEN = {
    "sched_param": "srcip",
    "persistence": "srcip",
    "interface": "eth0",
    "source_addr": "198.18.0.9",
    "source_ports": "2000-3000",
    "new_rtlimit": 10,
    "est_connlimit": 10,
    "rst_rtlimit": 10,
    "helper": "tftp",
    "tcp_strict": True,
    "intra_connect": True,
    "flow_offload": True,
    "count_bytes": False,
    "log": True,
    "fallback_address": "198.18.1.99",
    "scheduler": "weight",
    "when_all_down": "fallback",
}


def test_a_field_hidden_by_the_page_is_one_the_model_refuses():
    from django.core.exceptions import ValidationError

    from farms.models import Farm

    checked = 0
    for mode in ("snat", "dnat", "dsr", "stlsdnat", "local"):
        for scheduler in ("rr", "weight", "hash", "symhash", "leastconn", "maglev"):
            for protocol in ("tcp", "udp"):
                context = {"mode": mode, "scheduler": scheduler, "protocol": protocol, "persistence": "",
                           "log": False, "when_all_down": "reject"}  # fmt: skip
                base = {**context, "interface": "eth0" if mode == "dsr" else ""}
                try:
                    Farm(name="f", vip="198.18.100.1", ports="80", **base).full_clean()
                except ValidationError:
                    continue  # a combination refused by itself (DSR with round robin, ...): nothing to learn
                for name, value in REFUSED_WHERE_HIDDEN.items():
                    if applies(FARM_FIELD_WHEN[name], {**context, name: value}):
                        continue
                    farm = Farm(name="f", vip="198.18.100.1", ports="80", **{**base, name: value})
                    with pytest.raises(ValidationError) as refused:
                        farm.full_clean()
                    assert name in refused.value.message_dict, (name, context, refused.value.message_dict)
                    checked += 1
    assert checked > 50


@pytest.mark.parametrize(
    "fields",
    [
        {"mode": "dsr", "scheduler": "hash", "sched_param": "srcip", "interface": "eth0"},
        {"mode": "stlsdnat", "protocol": "udp", "scheduler": "rr"},
        {"mode": "snat", "protocol": "all", "ports": "", "scheduler": "maglev"},
    ],
)
def test_the_farm_page_of_every_kind_of_farm_shows_its_fields_only(fields, admin_user):
    farm = services.farm_create(**{**FARM, "name": "kind", "vip": "198.18.100.9", **fields})
    services.backend_create(farm=farm, address="198.18.1.11")
    web = Client()
    web.force_login(admin_user)
    page = web.get(f"/farms/{farm.pk}/")
    text = page.content.decode()
    assert page.status_code == 200 and "balanced over 1 backend" in text
    assert ("SNAT source address" in text) == (fields["mode"] == "snat")
    assert ("DSR interface" in text) == (fields["mode"] == "dsr")
    editor = page.context["backend_formset"].forms[0].fields
    assert ("port" in editor) == (fields["mode"] != "dsr" and fields.get("protocol") != "all")
    assert ("mac" in editor) == (fields["mode"] == "dsr")
