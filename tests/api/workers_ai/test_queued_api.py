"""Queued Workers AI requests over a real engine (tiny random model, greedy or seeded): the
queued result is the synchronous route's result for the same body, tool calls included, and a
job preempted in the middle of its answer continues it (resume_output_ids) and ends with the
same result."""

from __future__ import annotations

import asyncio
import time

import pytest
from starlette.testclient import TestClient

from tandem.asyncq.job import ANONYMOUS
from tests.api.preempting_backend import MODEL, live_app

URL = f"/client/v4/accounts/acc1/ai/run/{MODEL}"
QUEUED = URL + "?queueRequest=true"
TOOLS = [{"name": "get_weather", "description": "weather of a city",
          "parameters": {"type": "object", "required": ["city"],
                         "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}}}}]
FORCED = {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": TOOLS,
          "tool_choice": "required", "max_tokens": 80, "temperature": 0}
PROSE = {"prompt": "Tell me a story about a cat", "max_tokens": 40, "temperature": 0}
# seeded sampling draws per position (the seed and the output's length), and penalties read the
# output: a continued answer samples the same tokens as a whole one
SEEDED = {"prompt": "Tell me a story about a dog", "max_tokens": 40, "temperature": 1.0,
          "seed": 7, "frequency_penalty": 0.5}


@pytest.fixture(scope="module")
def live(llama_dir, tmp_path_factory):
    app, backend = live_app(llama_dir, tmp_path_factory.mktemp("q") / "queue.db")
    with TestClient(app) as client:
        backend.service = app.state.queue
        yield client, backend


def queued(client, body: dict, timeout_s: float = 60.0) -> dict:
    r = client.post(QUEUED, json={"requests": [body]})
    assert r.status_code == 200, r.text
    rid = r.json()["result"]["request_id"]
    deadline = time.monotonic() + timeout_s
    while "responses" not in (result := client.post(QUEUED, json={"request_id": rid}).json()["result"]):
        assert time.monotonic() < deadline, "queued request not done in time"
        time.sleep(0.05)
    (response,) = result["responses"]
    assert response["success"] is True, response
    return response["result"]


def sync(client, body: dict) -> dict:
    r = client.post(URL, json=body)
    assert r.status_code == 200, r.text
    return r.json()["result"]


def same(a: dict, b: dict) -> None:
    """Equal results; cached prompt tokens aside (the second run hits the prefix cache)."""
    strip = lambda r: {**r, "usage": {k: v for k, v in r["usage"].items()
                                      if k != "prompt_tokens_details"}}
    assert strip(a) == strip(b)


@pytest.mark.parametrize("body", [PROSE, FORCED], ids=["prose", "forced-tool-call"])
def test_queued_result_equals_the_synchronous_one(live, body):
    client, _ = live
    expected = sync(client, body)
    if body is FORCED:
        assert expected["tool_calls"][0]["name"] == "get_weather"
        assert expected["tool_calls"][0]["arguments"]["city"] in ("Paris", "Rome")
    same(queued(client, body), expected)


@pytest.mark.parametrize("body,after", [(PROSE, 12), (FORCED, 9), (SEEDED, 15)],
                         ids=["prose", "mid-tool-call", "seeded"])
def test_a_preempted_job_continues_its_tokens_to_the_same_result(live, body, after):
    client, backend = live
    expected = sync(client, body)
    assert expected["usage"]["completion_tokens"] > after
    service = backend.service
    before = service.dispatcher.preemptions
    backend.log.clear()
    backend.after = after
    got = queued(client, body)
    same(got, expected)
    assert service.dispatcher.preemptions == before + 1
    runs = [e for e in backend.log if e[0] == "start" and e[2]]
    # the second run resumed what the first had handed to the job: the `after` tokens, or more
    # when further deltas were already waiting as the cancellation came (the job reads a ready
    # delta without yielding to the event loop), never more than the first run handed on
    assert len(runs) == 2 and runs[0][3] == 0, backend.log
    first, second = runs[0][1], runs[1][1]
    assert after <= runs[1][3] <= backend.delivered[first], (backend.delivered, backend.log)
    events = [e[:2] for e in backend.log]
    # the preempted stream was closed unfinished (its engine request aborted) before the job
    # went back to the queue and ran again
    assert events.index(("end", first)) < events.index(("start", second))
    assert ("end", first, False) in backend.log and ("end", second, True) in backend.log
    (job,) = asyncio.run(_jobs(service))
    assert job.attempts == 1 and job.progress is None   # ended: the result supersedes it


async def _jobs(service):
    from tandem.asyncq.open_queue import open_queue
    q = open_queue(service.config.target)
    try:
        (batch,) = (await q.list_batches("acc1", ANONYMOUS))[:1]
        return await q.list_batch(batch.id, ANONYMOUS)
    finally:
        await q.close()
