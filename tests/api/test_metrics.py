from starlette.testclient import TestClient

from tests.api.fakes import FakeBackend
from tandem.api.app import build_app
from tandem.api.config import ServerConfig


def sample(text: str, name: str, **labels) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            if all(f'{k}="{v}"' in line for k, v in labels.items()):
                return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} {labels} not in metrics")


def test_metrics_after_requests():
    app = build_app(FakeBackend(), ServerConfig())
    other = build_app(FakeBackend(), ServerConfig())  # its own registry: never sees app's counts
    with TestClient(app) as c, TestClient(other) as c2:
        body = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}
        assert c.post("/v1/chat/completions", json={**body, "max_tokens": 4}).status_code == 200
        assert c.post("/v1/chat/completions", json=body).status_code == 200  # full reply: stop
        m = c.get("/metrics")
        assert m.headers["content-type"].startswith("text/plain")
        text = m.text
        assert sample(text, "tandem:time_to_first_token_seconds_count") == 2
        assert sample(text, "tandem:inter_token_latency_seconds_count") == 3 + 10
        assert sample(text, "tandem:e2e_request_latency_seconds_count") == 2
        assert sample(text, "tandem:request_queue_time_seconds_count") == 2
        assert sample(text, "tandem:request_success_total", finished_reason="length") == 1
        assert sample(text, "tandem:request_success_total", finished_reason="stop") == 1
        assert sample(text, "tandem:generation_tokens_total") == 4 + 11
        assert sample(text, "tandem:prompt_tokens_total") > 0
        assert sample(text, "tandem:prefix_cache_queries_total", model_name="fake-model") == 40
        assert sample(text, "tandem:prefix_cache_hits_total") == 10
        for gauge in ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc"):
            assert sample(text, f"tandem:{gauge}") == 0
        assert "tandem:time_to_first_token_seconds_count{" not in c2.get("/metrics").text


def test_speculative_decoding_metrics():
    import dataclasses

    backend = FakeBackend()
    spec = dataclasses.replace(backend.stats(), spec_num_drafts=4, spec_num_draft_tokens=12,
                               spec_num_accepted_tokens=6, spec_accepted_per_pos=(3, 2, 1))
    backend.stats = lambda: spec
    with TestClient(build_app(backend, ServerConfig())) as c:
        text = c.get("/metrics").text
    assert sample(text, "tandem:spec_decode_num_drafts_total") == 4
    assert sample(text, "tandem:spec_decode_num_draft_tokens_total") == 12
    assert sample(text, "tandem:spec_decode_num_accepted_tokens_total") == 6
    assert [sample(text, "tandem:spec_decode_num_accepted_tokens_per_pos_total", position=str(p))
            for p in range(3)] == [3, 2, 1]
    assert sample(text, "tandem:spec_decode_acceptance_rate") == 0.5
    assert sample(text, "tandem:spec_decode_mean_accepted_length") == 2.5


def test_queued_prefill_tokens_and_kv_handoff_metrics():
    import dataclasses

    from tandem.types import KV_HANDOFF_BUCKETS

    backend = FakeBackend()
    assert "tandem:kv_handoff_seconds" not in _render(backend)    # no handoff: no series
    n = len(KV_HANDOFF_BUCKETS) + 1
    counts = [0] * n
    counts[0], counts[3], counts[n - 1] = 2, 1, 1       # two fast pulls, one <= 10 ms, one slower than all
    stats = dataclasses.replace(backend.stats(), waiting_prefill_tokens=37,
                                kv_handoff_stats=(*counts, 42.5, 3))
    backend.stats = lambda: stats
    text = _render(backend)
    assert sample(text, "tandem:waiting_prefill_tokens", model_name="fake-model") == 37
    assert sample(text, "tandem:kv_handoff_seconds_bucket", le="0.001") == 2
    assert sample(text, "tandem:kv_handoff_seconds_bucket", le="0.005") == 2
    assert sample(text, "tandem:kv_handoff_seconds_bucket", le="0.01") == 3
    assert sample(text, "tandem:kv_handoff_seconds_bucket", le="10.0") == 3
    assert sample(text, "tandem:kv_handoff_seconds_bucket", le="+Inf") == 4
    assert sample(text, "tandem:kv_handoff_seconds_count") == 4
    assert sample(text, "tandem:kv_handoff_seconds_sum") == 42.5
    assert sample(text, "tandem:kv_handoff_failures_total") == 3


def _render(backend) -> str:
    with TestClient(build_app(backend, ServerConfig())) as c:
        return c.get("/metrics").text
def test_kv_retention_metrics():
    """Retained blocks, hits, expiries, evictions and the histogram of observed gaps between
    turns: one series per model, no per-session or per-tenant label."""
    import dataclasses

    from tandem.types import TURN_GAP_BUCKETS

    backend = FakeBackend()
    counts = [0] * (len(TURN_GAP_BUCKETS) + 1)
    counts[TURN_GAP_BUCKETS.index(1.0)] = 3      # three gaps in (0.5, 1]
    counts[-1] = 1                               # one past the last bound
    cumulative = tuple(sum(counts[:i + 1]) for i in range(len(counts)))
    stats = dataclasses.replace(backend.stats(), retained_blocks=44, retention_hits=4, retention_expired=2,
                                retention_evicted_blocks=6, turn_gap_counts=cumulative, turn_gap_sum=902.5)
    backend.stats = lambda: stats
    with TestClient(build_app(backend, ServerConfig())) as c:
        text = c.get("/metrics").text
    assert sample(text, "tandem:kv_retained_blocks") == 44
    assert sample(text, "tandem:kv_retention_hits_total") == 4
    assert sample(text, "tandem:kv_retention_expired_total") == 2
    assert sample(text, "tandem:kv_retention_evicted_blocks_total") == 6
    assert sample(text, "tandem:session_turn_gap_seconds_bucket", le="0.5") == 0
    assert sample(text, "tandem:session_turn_gap_seconds_bucket", le="1.0") == 3
    assert sample(text, "tandem:session_turn_gap_seconds_bucket", le="+Inf") == 4
    assert sample(text, "tandem:session_turn_gap_seconds_count") == 4
    assert sample(text, "tandem:session_turn_gap_seconds_sum") == 902.5
    assert "session=" not in text and "tenant=" not in text
