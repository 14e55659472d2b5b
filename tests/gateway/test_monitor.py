import asyncio

import httpx

from tandem.gateway.config import RegistryConfig
from tandem.gateway.monitor import Monitor
from tandem.gateway.registry import Registry
from tandem.router.load_tracker import LoadTracker
from tandem.router.prefix_index import PrefixIndex

from tests.gateway.fake_workers import HttpxWorkerHTTP


class FakeWorkers:
    """httpx MockTransport handler: per host, stats and an event log; `down` hosts refuse,
    `slow` hosts accept but time out."""

    def __init__(self):
        self.down: set[str] = set()
        self.slow: set[str] = set()
        self.stats: dict[str, dict] = {}
        self.events: dict[str, list[dict]] = {}
        self.since_seen: list[tuple[str, int]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        host = f"http://{request.url.host}:{request.url.port}"
        if host in self.down:
            raise httpx.ConnectError("refused", request=request)
        if host in self.slow:
            raise httpx.ReadTimeout("no answer", request=request)
        if request.url.path == "/internal/stats":
            return httpx.Response(200, json=self.stats[host])
        if request.url.path == "/internal/kv_events":
            since = int(request.url.params["since"])
            self.since_seen.append((host, since))
            evs = self.events.get(host, [])
            newer = [e for e in evs if e["seq"] > since]
            return httpx.Response(200, json={"seq": evs[-1]["seq"] if evs else 0, "reset": False,
                                             "events": newer})
        return httpx.Response(404)


def setup(unhealthy_after=2, lost=None):
    fake = FakeWorkers()
    reg = Registry(RegistryConfig(unhealthy_after=unhealthy_after))
    index, tracker = PrefixIndex(), LoadTracker()
    http = HttpxWorkerHTTP(httpx.AsyncClient(transport=httpx.MockTransport(fake)))
    on_lost = lost.append if lost is not None else (lambda url: None)
    return fake, reg, index, tracker, Monitor(reg, index, tracker, http, clock=lambda: 0.0,
                                              on_lost=on_lost)


def test_poll_marks_healthy_feeds_index_and_load():
    fake, reg, index, tracker, mon = setup()
    a = reg.add_static("http://127.0.0.1:9001", None)
    fake.stats[a.url] = {"role": "prefill", "waiting_prefill_tokens": 70, "running_context_tokens": 5,
                         "kv_layout": {"block_size": 16}}
    fake.events[a.url] = [{"seq": 1, "type": "stored", "block_hashes": ["1", "2"]},
                          {"seq": 2, "type": "stored", "block_hashes": ["3"]}]
    asyncio.run(mon.poll_once())
    assert a.healthy and a.role == "prefill" and a.kv_since == 2
    assert index.match([1, 2, 3]) == {a.url: 3}
    assert tracker.load(a.url).prefill_tokens == 70 and tracker.load(a.url).decode_tokens == 5
    fake.events[a.url].append({"seq": 3, "type": "removed", "block_hashes": ["2"]})
    asyncio.run(mon.poll_once())
    assert fake.since_seen[-1] == (a.url, 2) and index.match([1, 2, 3]) == {a.url: 1}


def test_failures_make_unhealthy_and_forget_index_then_resync():
    lost = []
    fake, reg, index, tracker, mon = setup(unhealthy_after=2, lost=lost)
    a = reg.add_static("http://127.0.0.1:9002", "both")
    fake.stats[a.url] = {"role": "both"}
    fake.events[a.url] = [{"seq": 5, "type": "stored", "block_hashes": ["9"]}]
    asyncio.run(mon.poll_once())
    assert index.match([9]) == {a.url: 1}
    fake.slow.add(a.url)     # connects, does not answer in time: busy, not gone
    asyncio.run(mon.poll_once())
    assert a.healthy and index.match([9]) == {a.url: 1} and lost == []
    asyncio.run(mon.poll_once())
    assert not a.healthy and index.match([9]) == {} and a.kv_since == 0
    assert lost == [a.url]   # its connections are aborted: calls waiting on it fail now
    fake.slow.clear()
    asyncio.run(mon.poll_once())
    assert a.healthy and fake.since_seen[-1] == (a.url, 0) and index.match([9]) == {a.url: 1}


def test_a_probe_that_cannot_connect_gives_the_worker_up_at_once():
    """Refused, or no answer to the connection (a host that vanished): unhealthy at the first
    such probe, whatever unhealthy_after says."""
    lost = []
    fake, reg, index, tracker, mon = setup(unhealthy_after=3, lost=lost)
    a = reg.add_static("http://127.0.0.1:9004", "both")
    fake.stats[a.url] = {"role": "both"}
    asyncio.run(mon.poll_once())
    assert a.healthy
    fake.down.add(a.url)
    asyncio.run(mon.poll_once())
    assert not a.healthy and lost == [a.url]
    asyncio.run(mon.poll_once())
    assert lost == [a.url]   # given up once


def test_restart_detected_by_instance_id():
    fake, reg, index, tracker, mon = setup()
    a = reg.add_static("http://127.0.0.1:9003", "both")
    fake.stats[a.url] = {"role": "both", "instance_id": "one"}
    fake.events[a.url] = [{"seq": 1, "type": "stored", "block_hashes": ["4"]}]
    asyncio.run(mon.poll_once())
    fake.stats[a.url] = {"role": "both", "instance_id": "two"}
    fake.events[a.url] = []
    asyncio.run(mon.poll_once())
    assert index.match([4]) == {} and fake.since_seen[-1] == (a.url, 0)


def test_a_drain_asked_of_the_gateway_holds_until_the_worker_is_a_new_instance():
    """Registered or static alike: heartbeats and polls of the same instance keep it drained."""
    fake, reg, index, tracker, mon = setup()
    a = reg.heartbeat("http://127.0.0.1:9004", "decode", 0.0)
    fake.stats[a.url] = {"role": "decode", "instance_id": "one"}
    asyncio.run(mon.poll_once())
    reg.drain(a.url)
    reg.heartbeat(a.url, "decode", 1.0, draining=False)
    asyncio.run(mon.poll_once())
    assert a.draining and not reg.has_live("decode")
    fake.stats[a.url] = {"role": "decode", "instance_id": "two"}
    asyncio.run(mon.poll_once())
    assert not a.draining and reg.has_live("decode")


def test_a_silent_worker_does_not_slow_the_polls_of_the_others():
    """Each worker is polled on its own: while one worker's polls hang (a vanished host, until
    the probe timeout), the others are still polled every interval."""
    polled = {"http://127.0.0.1:9005": 0, "http://127.0.0.1:9006": 0}

    async def handler(request: httpx.Request) -> httpx.Response:
        host = f"http://{request.url.host}:{request.url.port}"
        if request.url.path == "/internal/stats":
            polled[host] += 1
            if host.endswith("9005"):
                await asyncio.sleep(5)
            return httpx.Response(200, json={"role": "both"})
        return httpx.Response(404)

    async def main():
        reg = Registry(RegistryConfig(poll_interval_s=0.05, probe_timeout_s=3.0))
        for url in polled:
            reg.add_static(url, "both")
        http = HttpxWorkerHTTP(httpx.AsyncClient(transport=httpx.MockTransport(handler)))
        mon = Monitor(reg, PrefixIndex(), LoadTracker(), http)
        stop = asyncio.Event()
        task = asyncio.create_task(mon.run(stop))
        await asyncio.sleep(0.6)
        stop.set()
        await task

    asyncio.run(main())
    assert polled["http://127.0.0.1:9005"] == 1 and polled["http://127.0.0.1:9006"] >= 5, polled
