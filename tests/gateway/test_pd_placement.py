"""Conditional disaggregation in the gateway's flow (tandem/router/policies/placement.py), and
whole requests on the surviving pool while the other has no healthy worker."""

import asyncio

from tandem.router.policies.placement import PlacementConfig
from tandem.api.backend import ResponseInfo
from tandem.types import EngineRequest, SamplingParams

from tests.gateway.test_pd_flow import D0, D1, P0, PROMPT, build, expected, run, tokens


def serve(backend, monitor, load=()):
    """One request after a poll round, with `load` = [(worker, pending, context)] dispatched
    in between (a report taken after them would correct them away)."""
    async def go():
        await monitor.poll_once()
        for i, (url, pending, context) in enumerate(load):
            backend.parts.tracker.dispatch(f"other-{i}", url, pending=pending, context=context)
        info = ResponseInfo()
        req = EngineRequest("r1", list(PROMPT), SamplingParams(max_tokens=12, temperature=0.0))
        deltas = [d async for d in backend.generate(req, info)]
        for i, (url, _, _) in enumerate(load):
            backend.parts.tracker.finish(f"other-{i}", url)
        return deltas, info
    return asyncio.run(go())


def placements(backend, where, reason):
    return backend.parts.metrics.placements.labels(where, reason)._value.get()


def test_idle_system_prefills_remotely():
    cluster, backend, monitor, tracker = build({P0: "prefill", D0: "decode"})
    deltas, info = run(backend, monitor)
    assert tokens(deltas) == expected()
    assert [c[0] for c in cluster.calls] == [P0, D0]
    assert placements(backend, "remote", "remote") == 1


def test_a_prefill_queue_sends_the_request_to_the_idle_decode_worker():
    cluster, backend, monitor, tracker = build({P0: "prefill", D0: "decode"})
    # a long prompt queued at the prefill worker
    deltas, info = serve(backend, monitor, [(P0, 5000, 0)])
    assert tokens(deltas) == expected()
    assert info.headers == {"x-tandem-prefill": D0, "x-tandem-decode": D0}
    (url, _, resume, handle), = cluster.calls
    assert (url, resume, handle) == (D0, [], False)
    assert placements(backend, "local", "idle_decode") == 1
    assert backend.parts.metrics.local_prefills._value.get() == 1
    assert tracker.load(D0).in_flight == 0


def test_decode_streams_keep_a_long_remainder_remote():
    cluster, backend, monitor, tracker = build({P0: "prefill", D0: "decode"})
    # three streams decoding on D0: stall 3 * 10 = 30 >= gain 30
    load = [(P0, 30, 0)] + [(D0, 0, 100)] * 3
    deltas, info = serve(backend, monitor, load)
    assert tokens(deltas) == expected()
    assert [c[0] for c in cluster.calls] == [P0, D0]
    assert placements(backend, "remote", "remote") == 1
    serve(backend, monitor, load + [(P0, 1, 0)])   # gain 31 > 30: now local
    assert [c[0] for c in cluster.calls][2:] == [D0]
    assert placements(backend, "local", "queue") == 1


def test_placement_off_goes_remote_whatever_the_queue():
    cluster, backend, monitor, tracker = build({P0: "prefill", D0: "decode"},
                                               placement=PlacementConfig(enabled=False))
    deltas, _ = serve(backend, monitor, [(P0, 5000, 0)])
    assert tokens(deltas) == expected()
    assert [c[0] for c in cluster.calls] == [P0, D0]
    assert placements(backend, "remote", "off") == 1


def test_a_peeked_decode_choice_is_not_counted_twice():
    cluster, backend, monitor, tracker = build({P0: "prefill", D0: "decode", D1: "decode"})
    run(backend, monitor)
    run(backend, monitor)
    decisions = backend.parts.metrics.decisions
    # round robin over two decode workers, one decision per request, in turn
    assert [c[0] for c in cluster.calls] == [P0, D0, P0, D1]
    assert sum(s.value for m in decisions.collect() for s in m.samples
               if s.name.endswith("_total") and s.labels["pool"] == "decode") == 2
    assert sum(s.value for m in decisions.collect() for s in m.samples
               if s.name.endswith("_total") and s.labels["pool"] == "prefill") == 2


def test_dead_prefill_pool_decode_workers_serve_whole_requests():
    cluster, backend, monitor, tracker = build({P0: "prefill", D0: "decode"})
    cluster.dead.add(P0)
    deltas, info = run(backend, monitor)   # the monitor's poll finds P0 down: not yet unhealthy
    assert tokens(deltas) == expected()
    # P0 refused the connection: marked dead, and the retry went to the decode pool, whole
    assert [c[0] for c in cluster.calls] == [D0]
    assert backend.parts.router.mode() == "decode"
    assert info.headers == {"x-tandem-prefill": D0, "x-tandem-decode": D0}
    assert backend.ready()   # the decode pool serves whole requests: /health stays 200
    assert backend.health_detail()["mode"] == "decode"
    assert backend.health_detail()["pools"]["prefill"] == {"healthy": 0, "draining": 0, "total": 1}
    deltas, _ = run(backend, monitor)
    assert tokens(deltas) == expected()
    cluster.dead.discard(P0)
    run(backend, monitor)                  # its next poll brings it back: disaggregated again
    assert backend.parts.router.mode() == "pd" and backend.ready()
    assert [c[0] for c in cluster.calls][-2:] == [P0, D0]


def test_dead_decode_pool_prefill_workers_serve_whole_requests():
    cluster, backend, monitor, tracker = build({P0: "prefill", D0: "decode"})
    cluster.dead.add(D0)
    for _ in range(3):                     # unhealthy after three failed polls
        run_polls(monitor)
    assert backend.parts.router.mode() == "prefill"
    cluster.roles[P0] = "both"   # the fake prefill worker only takes prefill_only requests
    deltas, info = run(backend, monitor)
    assert tokens(deltas) == expected()
    assert [c[0] for c in cluster.calls] == [P0]
    assert not cluster.requests[0].prefill_only
    assert info.headers == {"x-tandem-prefill": P0, "x-tandem-decode": P0}


def run_polls(monitor):
    asyncio.run(monitor.poll_once())


def test_a_sessions_later_turn_is_prefilled_where_its_history_is():
    """Turn 1 prefills remotely and decodes on D0; turn 2 of the same session (before any KV
    event says what D0 holds) stays whole on D0, so the session's prefix is not split over the
    two workers' caches; keep_prefix=False goes back to alternating."""
    from tandem.types import RequestContext

    for keep, want in ((True, [P0, D0, D0]), (False, [P0, D0, P0, D0])):
        cluster, backend, monitor, tracker = build({P0: "prefill", D0: "decode"}, policy="default",
                                                   placement=PlacementConfig(keep_prefix=keep))
        session = RequestContext(session_id="s1")
        run(backend, monitor, context=session)
        run(backend, monitor, context=session)
        assert [c[0] for c in cluster.calls] == want
        assert placements(backend, "local", "prefix") == (1 if keep else 0)
