"""OpenAI batch lines over a real engine (tiny random model, greedy), driven by the official
`openai` client: each line's response body is what /v1/chat/completions answers for the same
body (n choices and logprobs included), also when the job is preempted in the middle of its
choices and continued."""

from __future__ import annotations

import json
import time

import openai
import pytest
from starlette.testclient import TestClient

from tests.api.preempting_backend import MODEL, live_app

BODY = {"model": MODEL, "messages": [{"role": "user", "content": "Tell me about cats"}],
        "max_tokens": 24, "temperature": 0, "n": 2, "logprobs": True, "top_logprobs": 2}


@pytest.fixture(scope="module")
def live(llama_dir, tmp_path_factory):
    app, backend = live_app(llama_dir, tmp_path_factory.mktemp("q") / "queue.db")
    with TestClient(app) as client:
        backend.service = app.state.queue
        yield client, backend


def batch_line(client, tmp_path, body: dict) -> dict:
    oa = openai.OpenAI(base_url="http://testserver/v1", api_key="unused", http_client=client,
                       max_retries=0)
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps({"custom_id": "c1", "method": "POST", "url": "/v1/chat/completions",
                                "body": body}) + "\n")
    f = oa.files.create(file=path.open("rb"), purpose="batch")
    batch = oa.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions",
                              completion_window="24h")
    deadline = time.monotonic() + 60
    while (batch := oa.batches.retrieve(batch.id)).status != "completed":
        assert time.monotonic() < deadline, "batch not done in time"
        time.sleep(0.05)
    assert batch.request_counts.completed == 1 and batch.error_file_id is None
    (line,) = [json.loads(x) for x in oa.files.content(batch.output_file_id).text.splitlines()]
    assert line["custom_id"] == "c1" and line["response"]["status_code"] == 200
    return line["response"]["body"]


def rounded(value):
    """Logprobs to 3 decimals: float32 sums differ in their last bits with the batch's shape
    (two choices in one step, a prompt from the prefix cache), not the tokens they choose."""
    if isinstance(value, float):
        return round(value, 3)
    if isinstance(value, list):
        return [rounded(v) for v in value]
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    return value


def comparable(body: dict) -> dict:
    """The answer without what differs between two requests (id, time, the prefix cache's hits)."""
    usage = {k: v for k, v in body["usage"].items() if k != "prompt_tokens_details"}
    return {"choices": rounded(body["choices"]), "usage": usage, "model": body["model"]}


@pytest.mark.parametrize("after", [None, 10], ids=["whole", "preempted"])
def test_a_batch_line_answers_as_the_endpoint_does(live, tmp_path, after):
    client, backend = live
    r = client.post("/v1/chat/completions", json=BODY)
    assert r.status_code == 200, r.text
    expected = r.json()
    assert len(expected["choices"]) == 2 and expected["usage"]["completion_tokens"] == 2 * 24
    before = backend.service.dispatcher.preemptions
    backend.log.clear()
    backend.after = after
    got = batch_line(client, tmp_path, BODY)
    assert comparable(got) == comparable(expected)
    assert got["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
    queued_starts = [e for e in backend.log if e[0] == "start" and e[2]]
    if after is None:
        assert backend.service.dispatcher.preemptions == before
        assert [e[3] for e in queued_starts] == [0, 0]
    else:
        assert backend.service.dispatcher.preemptions == before + 1
        first, second = queued_starts[:2], queued_starts[2:]
        assert [e[3] for e in first] == [0, 0] and len(second) == 2
        # both choices continued from what the job had received of them (the tokens still in
        # flight to it when it was cancelled are generated again)
        assert all(0 < e[3] <= after + 1 for e in second), backend.log
