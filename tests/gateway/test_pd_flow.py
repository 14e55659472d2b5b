import asyncio

import httpx
import pytest
from prometheus_client import CollectorRegistry

from tandem.api.backend import ResponseInfo
from tandem.errors import NoHealthyWorker, PromptTooLong, TandemError
from tandem.gateway.config import GatewayConfig
from tandem.gateway.metrics import GatewayMetrics
from tandem.gateway.monitor import Monitor
from tandem.gateway.pd_flow import GatewayBackend, GatewayParts
from tandem.gateway.registry import Registry
from tandem.router.load_tracker import LoadTracker
from tandem.router.policies.placement import PlacementConfig
from tandem.router.policies import make_policy
from tandem.router.prefix_index import PrefixIndex
from tandem.router.router import Router, pools_policies
from tandem.types import AgentTurn, EngineRequest, FinishReason, RequestContext, SamplingParams
from tests.gateway.fake_workers import EOS, FakeCluster, HttpxWorkerHTTP, greedy

PROMPT = [5, 6, 7, 8, 9, 10, 11, 12, 13, 14]


def build(roles, policy="round_robin", marker=None, **cfg):
    cluster = FakeCluster(roles)
    config = GatewayConfig(**cfg)
    reg = Registry(config.registry)
    for url, role in roles.items():
        reg.add_static(url, role)
    index, tracker = PrefixIndex(), LoadTracker()
    metrics = GatewayMetrics(CollectorRegistry(), reg, tracker)
    router = Router(reg, index, tracker, pools_policies(make_policy(policy)), config.admission,
                    on_decision=metrics.on_decision)
    http = HttpxWorkerHTTP(httpx.AsyncClient(transport=cluster.transport()))
    monitor = Monitor(reg, index, tracker, http)
    parts = GatewayParts(config, reg, router, tracker, http, metrics, monitor.forget, marker=marker)
    return cluster, GatewayBackend(parts, None, "m", 4096), monitor, tracker


def run(backend, monitor, max_tokens=12, prompt=PROMPT, context=RequestContext()):
    async def go():
        await monitor.poll_once()
        info = ResponseInfo()
        req = EngineRequest("r1", list(prompt), SamplingParams(max_tokens=max_tokens, temperature=0.0),
                            context=context)
        deltas = [d async for d in backend.generate(req, info)]
        return deltas, info
    return asyncio.run(go())


def tokens(deltas):
    return [t for d in deltas for t in d.new_token_ids]


def expected(n=12):
    out = greedy(PROMPT, n)
    assert EOS not in out  # the test prompt must run to max_tokens
    return out


P0, P1, D0, D1, B0, B1 = (f"http://127.0.0.1:{p}" for p in (9100, 9101, 9200, 9201, 9300, 9301))


def test_colocated_single_call_with_headers_and_usage():
    cluster, backend, monitor, tracker = build({B0: "both"})
    deltas, info = run(backend, monitor)
    assert tokens(deltas) == expected()
    assert info.headers == {"x-tandem-prefill": B0, "x-tandem-decode": B0}
    last = deltas[-1]
    assert last.finished and last.finish_reason is FinishReason.LENGTH
    assert (last.num_prompt_tokens, last.num_cached_tokens, last.num_output_tokens) == (10, 4, 12)
    assert all(d.request_id == "r1" for d in deltas)
    assert [c[0] for c in cluster.calls] == [B0]
    assert tracker.load(B0).in_flight == 0


def test_disaggregated_stitches_first_token_and_merges_usage():
    cluster, backend, monitor, tracker = build({P0: "prefill", D0: "decode"})
    deltas, info = run(backend, monitor)
    assert tokens(deltas) == expected()
    assert deltas[0].new_token_ids == expected()[:1] and not deltas[0].finished
    assert info.headers == {"x-tandem-prefill": P0, "x-tandem-decode": D0}
    (pu, pid, presume, _), (du, did, dresume, dhandle) = cluster.calls
    assert (pu, presume, du, dresume, dhandle) == (P0, [], D0, expected()[:1], True)
    last = deltas[-1]
    assert (last.num_prompt_tokens, last.num_cached_tokens, last.num_output_tokens) == (10, 4, 12)
    assert deltas[0].kv_handle is None and all(d.kv_handle is None for d in deltas)
    assert tracker.load(P0).in_flight == 0 and tracker.load(D0).in_flight == 0


def test_the_context_reaches_the_router_and_every_worker():
    cluster, backend, monitor, tracker = build({P0: "prefill", D0: "decode", D1: "decode"},
                                               policy="affinity")
    ctx = RequestContext(session_id="s1", tenant="key-0", cache_salt="t", priority=2)
    deltas, _ = run(backend, monitor, context=ctx)
    assert tokens(deltas) == expected()
    assert [(r.prefill_only, r.context) for r in cluster.requests] == [(True, ctx), (False, ctx)]
    decisions = backend.parts.metrics.decisions
    assert decisions.labels("prefill", "affinity", "affinity")._value.get() == 1
    assert decisions.labels("decode", "affinity", "affinity")._value.get() == 1
    run(backend, monitor)   # no session: the fallback policy decides
    assert decisions.labels("decode", "affinity", "affinity")._value.get() == 1
    assert cluster.requests[-1].context == RequestContext()


def test_conversations_without_the_header_stay_on_their_worker_across_turns():
    """The default policy over two colocated workers: conversations recognised by their prompt up
    to the first assistant header (marker 500, 501) spread over both and keep their worker."""
    marker = (500, 501)
    cluster, backend, monitor, tracker = build({B0: "both", B1: "both"}, policy="default",
                                               marker=marker)
    system = list(range(20, 60))
    firsts = {}
    for c in range(4):   # four conversations, one after another: two on each worker
        deltas, info = run(backend, monitor, max_tokens=2, prompt=system + [100 + c] + list(marker))
        firsts[c] = info.headers["x-tandem-decode"]
    assert sorted(firsts.values()) == [B0, B0, B1, B1]
    for c in range(4):   # their later turns: each on its own worker, reason affinity
        later = system + [100 + c] + list(marker) + [7, 8, 9] + [300 + c] * 9 + list(marker)
        _, info = run(backend, monitor, max_tokens=2, prompt=later)
        assert info.headers["x-tandem-decode"] == firsts[c]
    decisions = backend.parts.metrics.decisions
    assert decisions.labels("both", "default", "affinity")._value.get() == 4
    # with x-session-affinity the header is the key: a new session, not conversation 0's
    _, info = run(backend, monitor, max_tokens=2, prompt=system + [100] + list(marker),
                  context=RequestContext(session_id="h1"))
    assert decisions.labels("both", "default", "affinity")._value.get() == 4


def test_local_prefill_short_prompt_is_served_whole_by_the_decode_worker():
    cluster, backend, monitor, tracker = build({P0: "prefill", D0: "decode"}, local_prefill_tokens=10)
    deltas, info = run(backend, monitor)
    assert tokens(deltas) == expected()
    assert info.headers == {"x-tandem-prefill": D0, "x-tandem-decode": D0}
    (du, _, dresume, dhandle), = cluster.calls
    assert (du, dresume, dhandle) == (D0, [], False)
    last = deltas[-1]
    assert (last.num_prompt_tokens, last.num_cached_tokens, last.num_output_tokens) == (10, 4, 12)
    assert backend.parts.metrics.local_prefills._value.get() == 1
    assert tracker.load(D0).in_flight == 0


def test_a_both_worker_in_a_disaggregated_fleet_serves_whole_requests_beside_the_decode_worker():
    """The planner's half-way role: chosen among the decode workers (round robin here: D0, then B0),
    a both worker computes the prompt and every token itself; the decode worker still gets handoffs."""
    cluster, backend, monitor, tracker = build({P0: "prefill", D0: "decode", B0: "both"})
    first, info1 = run(backend, monitor)
    second, info2 = run(backend, monitor)
    assert tokens(first) == tokens(second) == expected()
    assert info1.headers == {"x-tandem-prefill": P0, "x-tandem-decode": D0}
    assert info2.headers == {"x-tandem-prefill": B0, "x-tandem-decode": B0}
    assert [(c[0], c[3]) for c in cluster.calls] == [(P0, False), (D0, True), (B0, False)]
    placements = backend.parts.metrics.placements
    assert placements.labels("local", "both")._value.get() == 1
    assert all(tracker.load(u).in_flight == 0 for u in (P0, D0, B0))


def test_local_prefill_longer_prompt_still_goes_prefill_then_decode():
    cluster, backend, monitor, tracker = build({P0: "prefill", D0: "decode"}, local_prefill_tokens=9)
    deltas, info = run(backend, monitor)
    assert tokens(deltas) == expected()
    assert info.headers == {"x-tandem-prefill": P0, "x-tandem-decode": D0}
    assert [c[0] for c in cluster.calls] == [P0, D0]
    assert backend.parts.metrics.local_prefills._value.get() == 0


def test_local_prefill_stream_migrates_when_its_decode_worker_dies():
    cluster, backend, monitor, tracker = build({P0: "prefill", D0: "decode", D1: "decode"},
                                               local_prefill_tokens=64)
    cluster.break_after[D0] = 4
    deltas, _ = run(backend, monitor)
    assert tokens(deltas) == expected()
    assert [(c[0], len(c[2])) for c in cluster.calls] == [(D0, 0), (D1, 4)]
    assert tracker.load(D0).in_flight == 0 and tracker.load(D1).in_flight == 0


def test_prefill_finishing_at_first_token_skips_decode():
    cluster, backend, monitor, tracker = build({P0: "prefill", D0: "decode"})
    deltas, info = run(backend, monitor, max_tokens=1)
    assert tokens(deltas) == expected()[:1] and deltas[-1].finish_reason is FinishReason.LENGTH
    assert [c[0] for c in cluster.calls] == [P0]
    assert info.headers["x-tandem-decode"] == P0


def test_dead_prefill_worker_is_retried_on_another():
    cluster, backend, monitor, tracker = build({P0: "prefill", P1: "prefill", D0: "decode"})

    async def go():
        await monitor.poll_once()
        cluster.dead.add(P0)  # dies after the health check: the request finds out
        req = EngineRequest("r1", list(PROMPT), SamplingParams(max_tokens=12, temperature=0.0))
        return [d async for d in backend.generate(req, ResponseInfo())]
    deltas = asyncio.run(go())
    assert tokens(deltas) == expected()
    assert [c[0] for c in cluster.calls] == [P1, D0]
    assert not backend.parts.registry.get(P0).healthy


def test_decode_killed_mid_stream_migrates_token_for_token():
    cluster, backend, monitor, tracker = build({P0: "prefill", P1: "prefill", D0: "decode", D1: "decode"})
    cluster.break_after[D0] = 4   # round robin sends the first decode to D0
    deltas, _ = run(backend, monitor)
    assert tokens(deltas) == expected()
    # first pass: P0 -> D0 (dies after 1 + 4 tokens); second pass resumes 5 tokens on P1 -> D1
    urls = [(c[0], len(c[2])) for c in cluster.calls]
    assert urls == [(P0, 0), (D0, 1), (P1, 5), (D1, 6)]
    assert backend.parts.metrics.migrations._value.get() == 1
    last = deltas[-1]
    assert (last.num_output_tokens, last.num_cached_tokens) == (12, 4)
    for u in (P0, P1, D0, D1):
        assert tracker.load(u).in_flight == 0


def test_decode_refusing_before_its_first_token_moves_prefill_too():
    """A decode call that fails softly before any token most likely could not pull the KV:
    the retry avoids its prefill worker as well as the decode worker."""
    # keep_prefix off: the session's second request would otherwise stay whole on its decode home
    cluster, backend, monitor, tracker = build({P0: "prefill", P1: "prefill", D0: "decode", D1: "decode"},
                                               policy="affinity",
                                               placement=PlacementConfig(keep_prefix=False))
    session = RequestContext(session_id="s1")
    run(backend, monitor, context=session)
    p_home, d_home = (c[0] for c in cluster.calls)
    cluster.calls.clear()
    cluster.refuse[d_home] = 503
    deltas, _ = run(backend, monitor, context=session)
    assert tokens(deltas) == expected()
    p_other, d_other = ({P0, P1} - {p_home}).pop(), ({D0, D1} - {d_home}).pop()
    assert [c[0] for c in cluster.calls] == [p_home, d_home, p_other, d_other]
    assert backend.parts.registry.get(d_home).healthy   # refused, not dead


def test_colocated_worker_killed_mid_stream_migrates():
    cluster, backend, monitor, tracker = build({B0: "both", B1: "both"})
    cluster.break_after[B0] = 3
    deltas, info = run(backend, monitor)
    assert tokens(deltas) == expected()
    assert [(c[0], len(c[2])) for c in cluster.calls] == [(B0, 0), (B1, 3)]
    assert info.headers["x-tandem-decode"] == B0  # headers name the first pass


def test_no_worker_left_mid_stream_ends_with_error_delta():
    cluster, backend, monitor, tracker = build({B0: "both"})
    cluster.break_after[B0] = 3
    deltas, _ = run(backend, monitor)
    assert tokens(deltas) == expected()[:3]
    assert deltas[-1].finish_reason is FinishReason.ERROR and "no healthy" in deltas[-1].error


def test_no_healthy_worker_before_first_token_is_503():
    cluster, backend, monitor, tracker = build({B0: "both"})
    cluster.dead.add(B0)
    with pytest.raises(NoHealthyWorker) as e:
        run(backend, monitor)
    assert e.value.status == 503


def test_worker_4xx_is_the_clients_error_not_retried():
    cluster, backend, monitor, tracker = build({B0: "both", B1: "both"})
    with pytest.raises(TandemError) as e:
        run(backend, monitor, prompt=[-1, 2, 3])
    assert (e.value.status, e.value.code, e.value.param) == (400, "context_length_exceeded", "messages")
    assert isinstance(e.value, PromptTooLong)   # rebuilt as such: each API words it its own way
    assert len(cluster.calls) == 1


def test_closing_stream_early_releases_load():
    cluster, backend, monitor, tracker = build({P0: "prefill", D0: "decode"})

    async def go():
        await monitor.poll_once()
        req = EngineRequest("r1", list(PROMPT), SamplingParams(max_tokens=50, temperature=0.0))
        gen = backend.generate(req, ResponseInfo())
        got = [await anext(gen), await anext(gen)]
        assert tracker.load(D0).in_flight == 1
        await gen.aclose()
        return got
    got = asyncio.run(go())
    assert len(got) == 2 and tracker.load(D0).in_flight == 0 and tracker.load(P0).in_flight == 0


def test_a_resumed_request_passes_its_saved_tokens_on_and_a_failure_before_new_ones_is_a_retry():
    """A queued job's saved progress (resume_output_ids) reaches every worker call; the flow emits
    only the rest, counts all of them, and a worker failing before any new token is a retry."""
    cluster, backend, monitor, tracker = build({P0: "prefill", P1: "prefill", D0: "decode"})
    saved = expected()[:5]

    async def go():
        await monitor.poll_once()
        cluster.dead.add(P0)
        req = EngineRequest("r1", list(PROMPT), SamplingParams(max_tokens=12, temperature=0.0),
                            resume_output_ids=list(saved))
        return [d async for d in backend.generate(req, ResponseInfo())]
    deltas = asyncio.run(go())
    assert tokens(deltas) == expected()[5:]
    assert [(c[0], c[2]) for c in cluster.calls] == [(P1, saved), (D0, expected()[:6])]
    assert deltas[-1].num_output_tokens == 12
    assert backend.parts.metrics.migrations._value.get() == 0


def test_a_resumed_request_refused_before_new_tokens_is_the_clients_error():
    cluster, backend, monitor, tracker = build({B0: "both", B1: "both"})

    async def go():
        await monitor.poll_once()
        req = EngineRequest("r1", [-1, 2, 3], SamplingParams(max_tokens=12, temperature=0.0),
                            resume_output_ids=[5, 6])
        return [d async for d in backend.generate(req, ResponseInfo())]
    with pytest.raises(TandemError) as e:
        asyncio.run(go())
    assert e.value.status == 400


# greedy(ENDS_PROMPT) stops at EOS after 11 tokens, "<883>" first
ENDS_PROMPT = [49, 314, 73, 880, 79, 318, 306, 762, 163, 427]


@pytest.mark.parametrize("roles,pools", [({B0: "both", B1: "both"}, ("both",)),
                                         ({P0: "prefill", D0: "decode"}, ("prefill", "decode"))])
@pytest.mark.parametrize("markers,max_tokens,rests", [
    (("<tool>",), 30, True),      # stop, tools offered, no tool call: the task ended
    (("<883>",), 30, False),      # stop after a tool call: the agent comes back
    (("<tool>",), 5, False),      # cut at max_tokens: no end said
    ((), 30, False),              # no tools offered: a stop says nothing of the session
])
def test_a_turn_that_ends_the_task_leaves_its_session_resting(roles, pools, markers, max_tokens, rests):
    """Resting: the session keeps its home but no longer counts against its worker when new
    sessions are spread (tandem/router/sessions.py)."""
    assert greedy(ENDS_PROMPT, 30)[-1] == EOS and len(greedy(ENDS_PROMPT, 30)) == 12
    cluster, backend, monitor, tracker = build(roles, policy="default")
    ctx = RequestContext(session_id="s1", agent=AgentTurn(tool_call_markers=markers))
    deltas, info = run(backend, monitor, max_tokens=max_tokens, prompt=ENDS_PROMPT, context=ctx)
    assert deltas[-1].finish_reason is (FinishReason.STOP if max_tokens == 30 else FinishReason.LENGTH)
    sessions = backend.parts.router.sessions
    for pool in pools:
        assert sessions.home(pool, "s1") is not None
        assert sum(sessions.counts(pool).values()) == (0 if rests else 1), pool
