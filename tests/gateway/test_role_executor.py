"""The gateway carries out the planner's switches of self-registered workers (decision -> call)."""

import asyncio

import httpx
import orjson
from prometheus_client import CollectorRegistry, Histogram

from tandem.gateway.config import RegistryConfig
from tandem.gateway.monitor import Monitor
from tandem.gateway.planner_loop import PlannerLoop
from tandem.gateway.registry import Registry
from tandem.gateway.role_executor import ExecutorConfig, RoleExecutor
from tandem.planner.policy import PlannerConfig, RoleSwitch
from tandem.router.load_tracker import LoadTracker
from tandem.router.prefix_index import PrefixIndex
from tests.gateway.fake_workers import HttpxWorkerHTTP

P0, P1, S0 = "http://127.0.0.1:9100", "http://127.0.0.1:9101", "http://127.0.0.1:9200"
FAST = ExecutorConfig(drain_timeout_s=1.0, grace_s=0.5, poll_s=0.01, call_timeout_s=1.0)


class RoleWorkers:
    """/internal/role of fake workers: a switch finishes after `polls` GETs; `refuse`: status."""

    def __init__(self, roles: dict[str, str], polls: int = 2) -> None:
        self.roles = dict(roles)
        self.polls = polls
        self.switching: dict[str, tuple[str, int]] = {}   # url -> (to, GETs left)
        self.calls: list[tuple[str, str, dict | None]] = []
        self.refuse: dict[str, int] = {}

    def report(self, url: str) -> dict:
        to = self.switching.get(url)
        return {"role": self.roles[url], "switching_to": to and to[0], "role_switches": 0}

    async def handle(self, request: httpx.Request) -> httpx.Response:
        url = f"http://{request.url.host}:{request.url.port}"
        assert request.url.path == "/internal/role"
        body = orjson.loads(await request.aread()) if request.method == "POST" else None
        self.calls.append((url, request.method, body))
        if url in self.refuse:
            return httpx.Response(self.refuse[url], json={"error": {"message": "no"}})
        if request.method == "POST":
            self.switching[url] = (body["role"], self.polls)
            return httpx.Response(202, json=self.report(url))
        if url in self.switching:
            to, left = self.switching[url]
            if left <= 1:
                del self.switching[url]
                self.roles[url] = to
            else:
                self.switching[url] = (to, left - 1)
        return httpx.Response(200, json=self.report(url))


def setup(roles={P0: "prefill", P1: "prefill", S0: "decode"}, polls=2):
    fake = RoleWorkers(roles, polls)
    http = HttpxWorkerHTTP(httpx.AsyncClient(transport=httpx.MockTransport(fake.handle)))
    reg = Registry(RegistryConfig())
    for url, role in roles.items():
        if url == S0:
            reg.add_static(url, role)
        else:
            reg.heartbeat(url, role, 0.0)
        reg.poll_ok(url, {"role": role}, 0.0)
    prom = CollectorRegistry()
    return fake, reg, RoleExecutor(reg, http, prom, FAST), prom


def count(prom, frm, to, outcome):
    return prom.get_sample_value("tandem:gateway_role_switches_total",
                                 {"from_role": frm, "to_role": to, "outcome": outcome}) or 0


def test_switch_holds_the_worker_drained_calls_it_and_takes_its_new_role():
    async def go():
        fake, reg, ex, prom = setup()
        sw = RoleSwitch(P1, "prefill", "decode", "itl")
        assert ex.start(sw)
        w = reg.get(P1)
        assert ex.busy and w.draining and w.switching_to == "decode" and not reg.get(P0).draining
        reg.heartbeat(P1, "prefill", 1.0, draining=False)    # its heartbeats cannot lift the hold
        assert w.draining
        assert not ex.start(RoleSwitch(P0, "prefill", "decode", "itl"))   # one at a time
        out = await asyncio.wait_for(ex.wait(), 5)
        assert out.done and out.role == "decode" and not ex.busy
        assert fake.calls[0] == (P1, "POST", {"role": "decode", "drain_timeout_s": 1.0})
        assert [c[1] for c in fake.calls[1:]] == ["GET", "GET"] and {c[0] for c in fake.calls} == {P1}
        assert (w.role, w.draining, w.switching_to) == ("decode", False, None)
        reg.heartbeat(P1, "prefill", 2.0)    # the heartbeat still names its first role: stats win
        assert w.role == "decode" and reg.has_live("decode")
        assert count(prom, "prefill", "decode", "done") == 1
    asyncio.run(go())


def test_refused_or_stuck_switch_lifts_the_hold_and_counts_a_failure():
    async def go():
        fake, reg, ex, prom = setup(polls=10**6)
        fake.refuse[P0] = 409
        assert ex.start(RoleSwitch(P0, "prefill", "decode", "itl"))
        out = await asyncio.wait_for(ex.wait(), 5)
        assert not out.done and "409" in out.detail
        assert (reg.get(P0).role, reg.get(P0).draining) == ("prefill", False)
        # P1 accepts but never reports the new role: given up after drain timeout + grace
        assert ex.start(RoleSwitch(P1, "prefill", "decode", "itl"))
        out = await asyncio.wait_for(ex.wait(), 5)
        assert not out.done and "in time" in out.detail
        assert (reg.get(P1).role, reg.get(P1).draining) == ("prefill", False)
        assert count(prom, "prefill", "decode", "failed") == 2
        assert count(prom, "prefill", "decode", "done") == 0
    asyncio.run(go())


def test_static_workers_are_left_to_tandem_up():
    async def go():
        fake, reg, ex, prom = setup()
        assert not ex.handles(RoleSwitch(S0, "decode", "prefill", "ttft"))
        assert not ex.start(RoleSwitch(S0, "decode", "prefill", "ttft"))
        assert fake.calls == [] and not reg.get(S0).draining
    asyncio.run(go())


def test_planner_loop_starts_the_switch_and_plans_nothing_while_it_runs():
    async def go():
        fake, reg, ex, prom = setup(roles={P0: "prefill", P1: "prefill"}, polls=3)
        ttft = Histogram("ttft", "", ("model_name",), buckets=(0.5, 1.0), registry=prom)
        itl = Histogram("itl", "", ("model_name",), buckets=(0.05, 0.1), registry=prom)
        clock = [0.0]
        cfg = PlannerConfig(slo_ttft_ms=1000, slo_itl_ms=10, min_samples=2, cooldown_s=5)
        loop = PlannerLoop(cfg, ttft, itl, reg, LoadTracker(), prom, clock=lambda: clock[0],
                           executor=ex)
        for _ in range(3):        # ITL over its target, TTFT well within: a prefill worker moves
            ttft.labels("m").observe(0.1)
            itl.labels("m").observe(0.09)
        sw = loop.round()
        assert sw == RoleSwitch(P0, "prefill", "decode", "itl") and ex.busy
        assert loop.state()["in_flight"]["worker_id"] == P0
        for _ in range(3):
            itl.labels("m").observe(0.09)
        clock[0] = 100.0          # past the cooldown, but a switch is under way
        assert loop.round() is None and loop.seq == 1
        clock[0] = 101.0
        await asyncio.wait_for(ex.wait(), 5)
        assert loop.last_switch_at == 101.0      # the cooldown restarts when the switch ends
        assert reg.get(P0).role == "decode" and loop.state()["last_outcome"]["done"]
        for _ in range(3):
            itl.labels("m").observe(0.09)
        clock[0] = 103.0
        assert loop.round() is None              # cooldown; and P1 is the last prefill worker anyway
    asyncio.run(go())


def test_registry_role_and_drain_sources():
    reg = Registry(RegistryConfig())
    w = reg.heartbeat(P0, "prefill", 0.0)
    reg.poll_ok(P0, {"role": "prefill", "switching_to": "decode"}, 0.0)   # the worker drains itself
    assert w.healthy and w.draining
    reg.heartbeat(P0, "prefill", 1.0, draining=False)
    assert w.draining                                 # its stats still say it is switching
    reg.poll_ok(P0, {"role": "decode", "switching_to": None}, 1.5)
    assert (w.role, w.draining) == ("decode", False)
    reg.heartbeat(P0, "prefill", 2.0)
    assert w.role == "decode"
    assert reg.drain(P0) and w.draining               # a drain asked of the gateway
    reg.undrain(P0)
    assert not w.draining


def test_worker_reporting_its_new_role_lifts_the_hold_at_once():
    reg = Registry(RegistryConfig())
    w = reg.heartbeat(P0, "prefill", 0.0)
    reg.poll_ok(P0, {"role": "prefill"}, 0.0)
    reg.begin_switch(P0, "decode")
    reg.poll_ok(P0, {"role": "prefill", "switching_to": "decode"}, 0.5)   # draining
    assert w.draining and w.switching_to == "decode"
    seq = w.role_seq
    # done by the worker's word before the executor asks again: a decode worker held draining
    # would leave the decode pool "emptied on purpose" (503) until then
    reg.poll_ok(P0, {"role": "decode", "switching_to": None}, 1.0)
    assert (w.role, w.draining, w.switching_to) == ("decode", False, None) and w.role_seq == seq + 1
    reg.end_switch(P0, {"role": "decode", "switching_to": None})          # the executor, later
    assert (w.role, w.draining, w.role_seq) == ("decode", False, seq + 1)


def test_monitor_drops_a_stats_reply_that_a_switch_overtook():
    async def go():
        reg = Registry(RegistryConfig())
        w = reg.heartbeat(P0, "prefill", 0.0)
        reg.poll_ok(P0, {"role": "prefill"}, 0.0)
        reg.begin_switch(P0, "decode")

        async def handle(request: httpx.Request) -> httpx.Response:
            if request.url.path == "/internal/kv_events":
                return httpx.Response(404)
            # answered as the switch was under way; the executor ends it before the reply lands
            reg.end_switch(P0, {"role": "decode", "switching_to": None})
            return httpx.Response(200, json={"role": "prefill", "switching_to": "decode"})

        http = HttpxWorkerHTTP(httpx.AsyncClient(transport=httpx.MockTransport(handle)))
        await Monitor(reg, PrefixIndex(), LoadTracker(), http).poll_worker(w)
        assert (w.role, w.draining) == ("decode", False)     # the stale reply was not applied
    asyncio.run(go())
