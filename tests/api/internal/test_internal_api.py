import orjson

from tandem.api.internal import wire
from tandem.types import EngineRequest, FinishReason, RequestContext, SamplingParams


def post(client, req: EngineRequest):
    return client.post("/internal/generate", content=orjson.dumps(wire.request_to_dict(req)))


def test_generate_streams_ndjson_deltas(client, backend):
    req = EngineRequest("gw-1", [5, 6, 7], SamplingParams(max_tokens=3, logprobs=1),
                        context=RequestContext(cache_salt="t"))
    r = post(client, req)
    assert r.status_code == 200 and r.headers["content-type"] == "application/x-ndjson"
    assert r.headers["x-tandem-prefill"] == "w1"
    deltas = [wire.delta_from_dict(orjson.loads(line)) for line in r.text.splitlines()]
    assert [d.new_text for d in deltas] == ["H", "e", "l"]
    assert deltas[-1].finished and deltas[-1].finish_reason is FinishReason.LENGTH
    assert deltas[-1].timings is not None and deltas[0].logprobs[0].top[0][0] == deltas[0].new_token_ids[0]
    (seen,) = backend.seen
    assert seen.request_id == "gw-1" and seen.cache_salt == "t" and seen.sampling == req.sampling


def test_errors_before_the_first_line_have_status(client, backend):
    backend.kv_capacity = 2
    r = post(client, EngineRequest("gw-2", [5, 6, 7], SamplingParams()))
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
    r = client.post("/internal/generate", json={"request_id": "x", "prompt_token_ids": "abc"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt_token_ids"


def test_failure_after_first_line_is_a_final_error_delta(client, backend):
    backend.fail_after = 1
    r = post(client, EngineRequest("gw-3", [5], SamplingParams(max_tokens=5)))
    deltas = [wire.delta_from_dict(orjson.loads(line)) for line in r.text.splitlines()]
    assert deltas[-1].finished and deltas[-1].finish_reason is FinishReason.ERROR
    assert deltas[-1].request_id == "gw-3" and "exploded" not in (deltas[-1].error or "")


def test_stats_and_kv_events(client):
    s = client.get("/internal/stats").json()
    assert s["num_blocks_total"] == 100 and s["role"] is None and s["kv_layout"] is None
    assert s["model"] == "fake-model" and len(s["instance_id"]) == 32
    assert client.get("/internal/kv_events?since=0").status_code == 404
