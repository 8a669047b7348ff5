"""The real collector with every kind of farm: L4 farms (the kernel's counters) and HTTP farms (HAProxy's
statistics) sampled side by side, without the process ever ending; a farm whose figures cannot be read says
why on its row, and a collector that lives but samples nothing never shows as running."""

from __future__ import annotations

import time

import pytest

from tests.conftest import METRICS_INTERVAL as INTERVAL
from tests.conftest import OUTPUT, wait_for
from tests.support.l7_lab import HAProxyLab
from tests.support.lab import backend4, vip4
from tests.support.stack import Collector, Worker

pytestmark = [pytest.mark.dataplane, pytest.mark.django_db(transaction=True)]

HTTP_VIP = "198.18.100.1"  # on the LB namespace's loopback (tests/support/l7_lab.py)


@pytest.fixture
def haproxy(lab, tmp_path):
    engine_lab = HAProxyLab(lab, tmp_path / "haproxy").start()
    yield engine_lab
    engine_lab.stop()


@pytest.fixture
def stack(lab, worker_env, haproxy, redis_server, settings, request):
    """The worker and the collector in the LB namespace, both knowing where HAProxy's master socket is."""
    import redis

    redis.Redis.from_url(redis_server.url).flushdb()
    settings.REDIS_URL = redis_server.url
    settings.LBWEB_METRICS_INTERVAL = INTERVAL
    env = dict(worker_env, LBWEB_HAPROXY_DIR=str(haproxy.workdir))
    lab.ns(lab.lb, "nft", "delete", "table", "inet", "lbweb", check=False)
    lab.ensure_servers()
    logs = OUTPUT / "logs"
    worker = Worker(lab.lb, env, logs / f"worker-{request.node.name}.log").start()
    collector = Collector(lab.lb, env, logs / f"collector-{request.node.name}.log", INTERVAL).start()
    yield worker, collector
    collector.stop()
    worker.stop()


def row(api, farm_id: int) -> dict:
    return next(f for f in api.get("metrics/summary/")["farms"] if f["id"] == farm_id)


def test_the_collector_samples_l4_and_http_farms_side_by_side_and_keeps_running(api, lab, haproxy, stack):
    _worker, collector = stack
    l4 = api.farm(name="l4", vip=vip4(80), protocol="tcp", ports="80", mode="snat",
                  backends=[{"address": backend4("b1")}])  # fmt: skip
    http = api.farm(name="web", vip=HTTP_VIP, ports="80", mode="http",
                    backends=[{"address": backend4("b2"), "port": 80}])  # fmt: skip
    api.wait_applied(l4["id"])
    api.wait_applied(http["id"])
    assert lab.http_get(vip4(80), count=3)
    assert {haproxy.get(HTTP_VIP, "/").status for _ in range(5)} == {200}

    started = time.time()
    # Both kinds in the store: the L4 farm's kernel counters, the HTTP farm's requests from HAProxy.
    wait_for(lambda: (row(api, l4["id"]).get("total_conns") or 0) >= 3, what="the L4 farm's connections")

    def requests_counted():  # requests while the collector samples: a rate needs two readings around them
        assert haproxy.get(HTTP_VIP, "/").status == 200
        points = api.get(f"metrics/farms/{http['id']}/?window=5m")["points"]
        return [p for p in points if p.get("requests")]

    series = wait_for(requests_counted, what="the HTTP farm's requests in its series")
    assert not any(p.get("error") for p in series), series
    # A few intervals more: the process is still the one started, and it sampled all along.
    time.sleep(6 * INTERVAL)
    assert collector.proc.poll() is None, (OUTPUT / "logs").glob("collector-*")
    summary = api.get("metrics/summary/")
    assert summary["last_sample"] > started + 5 * INTERVAL and not summary["stale"], summary
    assert row(api, l4["id"]).get("error") is None and row(api, http["id"]).get("error") is None
    points = [p for p in api.get("metrics/system/?window=5m")["points"] if p["t"] >= started]
    assert len(points) >= 6 and not any(p.get("gap") for p in points), points
    status = api.get("status/")
    assert status["processes"]["collector"]["state"] == "running", status

    # HAProxy gone: the HTTP farm's row says why it has no figures (null, not an idle farm's zeros), the L4
    # farm's figures go on, and the collector with them.
    haproxy.stop()
    failing = wait_for(lambda: (r := row(api, http["id"])).get("error") and r, what="the HTTP farm's error")
    assert "HAProxy's statistics unavailable" in failing["error"] and failing.get("requests") is None, failing
    assert failing["bytes_in"] is None and failing["new_conns"] is None, failing
    points = api.get(f"metrics/farms/{http['id']}/?window=5m")["points"]
    assert any(p.get("error") and p["new_conns"] is None for p in points), points
    before = row(api, l4["id"])["total_conns"]
    assert lab.http_get(vip4(80), count=2)
    wait_for(lambda: row(api, l4["id"])["total_conns"] >= before + 2, what="the L4 farm still counted")
    assert row(api, l4["id"]).get("error") is None
    assert collector.proc.poll() is None
    assert api.get("status/")["processes"]["collector"]["state"] == "running"


def test_a_farm_whose_figures_fail_says_why_and_the_others_are_read(lab, redis_server, settings, monkeypatch):
    """Any error while one farm's entry is built is that farm's error (in the sample, the store and the summary),
    never the sample's."""
    from collector import sampler as sampling
    from dataplane.kernel.fake import FakeKernel
    from farms import services
    from monitoring import selectors
    from monitoring.farm_index import load_index
    from monitoring.store import MetricStore, client
    from tests.support.lab import run_in_netns

    settings.REDIS_URL = redis_server.url
    ok = services.farm_create(name="ok", vip=vip4(81), protocol="tcp", ports="80", mode="snat")
    broken = services.farm_create(name="broken", vip=vip4(82), protocol="tcp", ports="80", mode="snat")
    real_farm = sampling.Sampler._farm

    def farm_entry(self, farm, *args):
        if farm.id == broken.id:
            raise ZeroDivisionError("division by zero")
        return real_farm(self, farm, *args)

    monkeypatch.setattr(sampling.Sampler, "_farm", farm_entry)
    index = load_index()

    def two_samples():
        sampler = sampling.Sampler(kernel=FakeKernel())
        try:
            return [sampler.sample(index) for _ in range(2)]
        finally:
            sampler.close()

    first, second = run_in_netns(lab.lb, two_samples)
    for sample in (first, second):
        assert sample.farms[broken.id] == {
            "error": "figures not read: ZeroDivisionError: division by zero",
            "backends": {},
        }
        assert "error" not in sample.farms[ok.id] and "bytes_in" in sample.farms[ok.id]
    import redis

    redis.Redis.from_url(redis_server.url).flushdb()
    MetricStore(client(redis_server.url), interval=2.0).write(second)
    rows = {r["name"]: r for r in selectors.summary(MetricStore(client(redis_server.url)))["farms"]}
    assert rows["broken"]["error"] == "figures not read: ZeroDivisionError: division by zero"
    assert rows["broken"]["new_conns"] is None and "error" not in rows["ok"]


def test_a_collector_whose_samples_all_fail_keeps_running_and_shows_as_impaired(
    redis_server, settings, monkeypatch, client
):
    """A sample that fails as a whole is a gap, not the end of the process; the heartbeat, which lives in a
    thread of its own, says that no sample was done and why, so the status never says the collector runs."""
    import redis
    from django.core.management import call_command

    from collector.management.commands import collector as command
    from lbweb import heartbeat

    settings.REDIS_URL = redis_server.url
    redis.Redis.from_url(redis_server.url).flushdb()
    published = {}

    class Publisher:  # the heartbeat's thread would outlive this test in this process: its info is read here
        def __init__(self, name, info=None):
            published[name] = info

        def beat(self):
            pass

    monkeypatch.setattr(heartbeat, "start_publisher", Publisher)

    class FailingSampler:
        def __init__(self, **_options):
            pass

        def sample(self, index):
            raise RuntimeError("no kernel today")

        def close(self):
            pass

    monkeypatch.setattr(command, "Sampler", FailingSampler)
    call_command("collector", count=3, interval=0.05)  # returns: three failed samples, no exception
    info = published["collector"]()
    assert info["progress_at"] is None and info["last_error"] == "sample failed: RuntimeError: no kernel today"
    redis.Redis.from_url(redis_server.url).set(heartbeat.key_of("collector"), heartbeat.encode(info))
    status = client.get("/api/v1/status/").json()
    collector = status["processes"]["collector"]
    assert collector["state"] == "impaired", collector
    assert "has completed no round" in collector["detail"] and "no kernel today" in collector["detail"], collector
    assert collector["detail"] in status["alerts"]
