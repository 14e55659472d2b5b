"""Streaming client and load runner against a fake OpenAI server (no engine needed)."""

from __future__ import annotations

import asyncio
import json
import time

import numpy as np
import pytest

from tandem.bench.agentic import AgenticConfig, agentic_workload
from tandem.bench.client import ClientConfig, StreamingClient
from tandem.bench.metrics import summarize
from tandem.bench.runner import LoadConfig, run_workload
from tandem.bench.trace import TraceConfig, trace_workload
from tandem.bench.vocab import TokenSpace
from tests.bench.fake_server import FakeServer, FakeState

ROWS = [
    {"timestamp": 0, "input_length": 1024, "output_length": 6, "hash_ids": [1, 2]},
    {"timestamp": 100, "input_length": 1536, "output_length": 6, "hash_ids": [1, 2, 3]},
    {"timestamp": 200, "input_length": 700, "output_length": 6, "hash_ids": [1, 4]},
    {"timestamp": 300, "input_length": 512, "output_length": 6, "hash_ids": [5]},
    {"timestamp": 400, "input_length": 2048, "output_length": 6, "hash_ids": [1, 2, 3, 6]},
]


@pytest.fixture
def trace_path(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return p


def run(workload, server, load=LoadConfig(), endpoint="completions", **client_kw):
    cfg = ClientConfig(base_url=server.url, model="fake-model", endpoint=endpoint,
                       keep_text=not workload.uses_token_ids, **client_kw)

    async def go():
        client = StreamingClient(cfg)
        try:
            return await run_workload(workload, client, load)
        finally:
            await client.aclose()
    return asyncio.run(go())


def test_trace_replay_measures_every_chunk_and_exact_prompts(trace_path):
    wl = trace_workload(trace_path, TokenSpace(0, 1000), TraceConfig(time_scale=0.5))
    with FakeServer(FakeState(token_delay_s=0.005)) as server:
        samples = run(wl, server)
    assert [s.request_id for s in samples] == [f"trace-{i}" for i in range(5)]
    for s, body, turn in zip(samples, server.state.bodies, (x.turns[0] for x in wl.sessions)):
        assert s.ok, s.error
        assert body["prompt"] == turn.prompt_token_ids.tolist()
        assert body["ignore_eos"] is True and body["stream_options"] == {"include_usage": True}
        assert s.prompt_tokens == turn.expected_prompt_tokens
        assert s.completion_tokens == 6 and len(s.chunk_times) == 6 and len(s.itl) == 5
        assert 0 < s.ttft < s.e2e and all(g >= 0 for g in s.itl)
        assert s.headers == {"x-tandem-prefill": "w0", "x-tandem-decode": "w1"}
    # open loop: sends follow the scaled timestamps (0, 50, 100, 150, 200 ms)
    starts = np.array([s.start for s in samples])
    assert np.all(np.abs((starts - starts[0]) - np.array([0, 0.05, 0.1, 0.15, 0.2])) < 0.04)


def test_measured_cache_hits_equal_the_ideal_with_a_perfect_cache(trace_path):
    wl = trace_workload(trace_path, TokenSpace(0, 1000), TraceConfig(time_scale=0.1))
    with FakeServer(FakeState(block_size=16)) as server:
        samples = run(wl, server)
    # the fake caches full 16-token blocks; with 16 tokens per hash id that is exactly the ideal,
    # except the 6-token partial block of request 2 (never a full block)
    assert [s.cached_tokens for s in samples] == [0, 32, 16, 0, 48]
    assert [s.ideal_cached_tokens for s in samples] == [0, 32, 16, 0, 48]
    summary = summarize(samples)
    assert summary.cached_ratio == summary.ideal_cached_ratio


def test_multi_token_chunks_with_continuous_usage(trace_path):
    wl = trace_workload(trace_path, TokenSpace(0, 1000), TraceConfig(time_scale=0.0, max_requests=2))
    with FakeServer(FakeState(chunk_tokens=4)) as server:
        samples = run(wl, server, continuous_usage_stats=True)
    for s in samples:
        assert s.chunk_tokens == [4, 2] and s.completion_tokens == 6
    with FakeServer(FakeState(chunk_tokens=4)) as server:
        plain = run(wl, server)
    for s in plain:   # without per-chunk usage a chunk counts as one; usage still gives the total
        assert s.chunk_tokens == [1, 1] and s.completion_tokens == 6


def test_tokens_without_text_count_at_the_finishing_chunk(trace_path):
    wl = trace_workload(trace_path, TokenSpace(0, 1000), TraceConfig(time_scale=0.0, max_requests=1))
    with FakeServer(FakeState(empty_text=True)) as server:
        (s,) = run(wl, server)
    assert s.ok and s.completion_tokens == 6
    assert len(s.chunk_times) == 1 and s.chunk_tokens == [6] and s.ttft > 0
    assert s.first_text is None


def test_tokens_without_text_count_as_first_token_with_continuous_usage(trace_path):
    wl = trace_workload(trace_path, TokenSpace(0, 1000), TraceConfig(time_scale=0.0, max_requests=1))
    with FakeServer(FakeState(empty_text=True)) as server:
        (s,) = run(wl, server, continuous_usage_stats=True)
    assert s.ok and len(s.chunk_times) == 6 and s.first_text is None
    with FakeServer(FakeState()) as server:
        (s,) = run(wl, server, continuous_usage_stats=True)
    assert s.first_text == s.ttft


def test_closed_loop_respects_concurrency_and_max_requests(trace_path):
    wl = trace_workload(trace_path, TokenSpace(0, 1000), TraceConfig())
    with FakeServer(FakeState(token_delay_s=0.01)) as server:
        samples = run(wl, server, LoadConfig(concurrency=2, max_requests=4))
    assert len(samples) == 4 and all(s.ok for s in samples)
    assert server.state.max_inflight == 2


def test_duration_bound_stops_sending_and_cancels_after_drain(trace_path):
    rows = [{"timestamp": i * 100, "input_length": 512, "output_length": 50, "hash_ids": [i]} for i in range(50)]
    trace_path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    wl = trace_workload(trace_path, TokenSpace(0, 1000), TraceConfig())
    t = time.monotonic()
    with FakeServer(FakeState(token_delay_s=0.05)) as server:   # 50 tokens take 2.5 s
        samples = run(wl, server, LoadConfig(duration_s=0.35, drain_timeout_s=0.3))
    assert time.monotonic() - t < 3.0
    assert 3 <= len(samples) <= 5
    assert all(s.error and s.error.startswith("cancelled") for s in samples)


def test_errors_are_recorded_not_raised(trace_path):
    wl = trace_workload(trace_path, TokenSpace(0, 1000), TraceConfig(time_scale=0.0))
    with FakeServer() as server:
        cfg = ClientConfig(base_url=server.url, model="fake-model")

        async def go():
            client = StreamingClient(cfg)
            try:
                from tandem.bench.sample import RequestSample
                s = RequestSample(request_id="x")
                await client.send(client.build_body(4, prompt_ids=[1, 2, 3]), s, time.perf_counter(),
                                  headers={"x-fail": "1"})
                return s
            finally:
                await client.aclose()
        s = asyncio.run(go())
    assert s.status == 503 and s.error == "http 503: injected failure" and not s.ok
    bad = StreamingClient.__new__(StreamingClient)
    bad.cfg = ClientConfig(base_url="http://127.0.0.1:1", model="m", endpoint="chat")
    with pytest.raises(ValueError, match="completions"):
        bad.build_body(4, prompt_ids=[1])
    del wl


def test_malformed_event_is_an_error_sample():
    from tandem.bench.sample import RequestSample

    async def go():
        async def handle(reader, writer):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 17\r\n\r\ndata: {not json\n\n")
            await writer.drain()
            writer.close()
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = StreamingClient(ClientConfig(base_url=f"http://127.0.0.1:{port}", model="m"))
        s = RequestSample(request_id="x")
        await client.send(client.build_body(2, prompt_ids=[1]), s, time.perf_counter())
        await client.aclose()
        server.close()
        return s
    s = asyncio.run(go())
    assert s.status == 200 and s.error.startswith("JSONDecodeError")


def test_unreachable_server_is_an_error_sample(trace_path):
    from tests.bench.fake_server import free_port
    wl = trace_workload(trace_path, TokenSpace(0, 1000), TraceConfig(time_scale=0.0, max_requests=2))
    cfg = ClientConfig(base_url=f"http://127.0.0.1:{free_port()}", model="m")

    async def go():
        client = StreamingClient(cfg)
        try:
            return await run_workload(wl, client, LoadConfig())
        finally:
            await client.aclose()
    samples = asyncio.run(go())
    assert len(samples) == 2 and all(s.error and "Connect" in s.error for s in samples)


def test_agentic_sessions_resend_history_with_affinity():
    wl = agentic_workload(AgenticConfig(num_sessions=3, turns=3, num_tenants=2, system_tokens=30,
                                        tool_tokens=16, num_tools=2, user_tokens=5, tool_result_tokens=8,
                                        output_tokens=4, think_time_s=0.01))
    with FakeServer(FakeState(block_size=4)) as server:
        samples = run(wl, server, LoadConfig(concurrency=2), endpoint="chat")
    assert len(samples) == 9 and all(s.ok for s in samples)
    by_session: dict[str, list] = {}
    for body, headers in zip(server.state.bodies, server.state.headers):
        by_session.setdefault(headers["x-session-affinity"], []).append(body["messages"])
    assert set(by_session) == {s.session_id for s in wl.sessions}
    for convs in by_session.values():
        assert [len(m) for m in convs] == [2, 4, 6]
        for prev, cur in zip(convs, convs[1:]):
            assert cur[:len(prev)] == prev                        # history is resent unchanged
            assert cur[len(prev)] == {"role": "assistant", "content": " tok" * 4}
    for s in samples:
        assert 0 <= s.ideal_cached_tokens < s.prompt_tokens
        if s.turn > 0:
            prev = next(p for p in samples if p.session_id == s.session_id and p.turn == s.turn - 1)
            assert s.ideal_cached_tokens == prev.prompt_tokens + prev.completion_tokens - 1
            assert s.cached_tokens > 0



def test_agent_hints_announce_each_sessions_next_think_time():
    from tandem.bench.runner import AGENT_HINT_HEADER
    from tandem.turn.agent_hint import HEADER

    assert AGENT_HINT_HEADER == HEADER          # the client names the server's header
    wl = agentic_workload(AgenticConfig(num_sessions=2, turns=3, num_tenants=1, system_tokens=30,
                                        tool_tokens=16, num_tools=2, user_tokens=5, tool_result_tokens=8,
                                        output_tokens=4, think_time_s=0.01))
    for hints in (False, True):
        with FakeServer(FakeState(block_size=4)) as server:
            samples = run(wl, server, LoadConfig(concurrency=2, agent_hints=hints), endpoint="chat")
        assert len(samples) == 6 and all(s.ok for s in samples)
        sent: dict[str, list] = {}
        for headers in server.state.headers:
            sent.setdefault(headers["x-session-affinity"], []).append(headers.get(HEADER))
        for session in wl.sessions:
            want = [f"{t.think_time_s:.3f}" for t in session.turns[1:]] + ["0.000"]
            assert sent[session.session_id] == (want if hints else [None] * 3)


def test_extra_body_fields_go_into_every_request_but_never_replace_its_own():
    client = StreamingClient.__new__(StreamingClient)
    client.cfg = ClientConfig(base_url="http://127.0.0.1:1", model="m", endpoint="chat",
                              extra_body=(("priority", 10), ("cache_salt", "run-1"), ("max_tokens", 999)))
    body = client.build_body(4, messages=[{"role": "user", "content": "hi"}])
    assert body["priority"] == 10 and body["cache_salt"] == "run-1"
    assert body["max_tokens"] == 4 and body["model"] == "m" and body["stream"] is True
