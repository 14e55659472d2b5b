"""The asynchronous batch API of an app over a fake backend: Workers AI `?queueRequest=true`
(queue, poll, idempotency, 413), event subscriptions, and OpenAI files + batches driven by the
official `openai` client."""

from __future__ import annotations

import asyncio
import json
import time

import openai
import pytest
from starlette.testclient import TestClient

from tandem.api.app import build_app
from tandem.api.config import ServerConfig
from tandem.api.queue.service import QueueConfig, QueueSetup
from tandem.asyncq.event import EventType
from tandem.asyncq.job import ANONYMOUS
from tests.api.fakes import FakeBackend

URL = "/client/v4/accounts/acc1/ai/run/@cf/meta/fake-model"
QUEUED = URL + "?queueRequest=true"


@pytest.fixture
def room():
    return {"free": True}


@pytest.fixture
def app_client(tmp_path, room):
    backend = FakeBackend(reply="Hi there")
    setup = QueueSetup(QueueConfig(target=str(tmp_path / "queue.db"), poll_s=0.05,
                                   max_payload_bytes=20_000, lease_s=5.0),
                       headroom=lambda: room["free"])
    app = build_app(backend, ServerConfig(max_body_bytes=4096), queue=setup)
    with TestClient(app) as client:
        yield client, backend


def poll(client, request_id: str, url: str = QUEUED, timeout_s: float = 10.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        r = client.post(url, json={"request_id": request_id})
        assert r.status_code == 200, r.text
        result = r.json()["result"]
        if "responses" in result:
            return result
        assert result["status"] in ("queued", "running") and result["request_id"] == request_id
        assert time.monotonic() < deadline, "batch not done in time"
        time.sleep(0.05)


def test_workers_ai_queue_and_poll(app_client):
    client, backend = app_client
    r = client.post(QUEUED, json={"requests": [
        {"prompt": "a", "max_tokens": 4, "external_reference": "ref-a"},
        {"messages": [{"role": "user", "content": "b"}]},
        {"prompt": ""}]})   # invalid: fails alone, with its error
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["success"] is True and body["errors"] == [] and body["messages"] == []
    assert body["result"]["status"] == "queued" and body["result"]["model"] == "@cf/meta/fake-model"
    result = poll(client, body["result"]["request_id"])
    a, b, bad = result["responses"]
    assert (a["id"], a["success"], a["external_reference"]) == (0, True, "ref-a")
    assert a["result"]["response"] == "Hi t" and a["result"]["usage"]["completion_tokens"] == 4
    assert (b["id"], b["success"], b["result"]["response"]) == (1, True, "Hi there")
    assert bad["success"] is False and bad["result"] is None and "prompt" in bad["error"]
    assert result["usage"]["completion_tokens"] == 4 + 8
    assert result["usage"]["total_tokens"] == result["usage"]["prompt_tokens"] + 12
    assert len(backend.seen) == 2   # each valid request ran once


def test_workers_ai_poll_says_running_once_a_job_started(tmp_path):
    """queued until a job is leased, running while it generates (before any job has ended),
    then the responses."""
    backend = FakeBackend(reply="Hi there", token_delay=0.15)
    setup = QueueSetup(QueueConfig(target=str(tmp_path / "queue.db"), poll_s=0.05, lease_s=5.0),
                       headroom=lambda: True)
    with TestClient(build_app(backend, ServerConfig(), queue=setup)) as client:
        r = client.post(QUEUED, json={"requests": [{"prompt": "a", "max_tokens": 8}]})
        request_id = r.json()["result"]["request_id"]
        statuses = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            result = client.post(QUEUED, json={"request_id": request_id}).json()["result"]
            if "responses" in result:
                break
            statuses.append(result["status"])
            time.sleep(0.05)
        assert result["responses"][0]["success"] is True
        assert "running" in statuses and set(statuses) <= {"queued", "running"}
        assert statuses == sorted(statuses, key=("queued", "running").index)   # never back to queued


def test_workers_ai_queue_is_idempotent_and_bounded(app_client):
    client, backend = app_client
    body = {"requests": [{"prompt": "x"}]}
    r1 = client.post(QUEUED, json=body, headers={"idempotency-key": "k1"})
    r2 = client.post(QUEUED, json=body, headers={"idempotency-key": "k1"})
    assert r1.json()["result"]["request_id"] == r2.json()["result"]["request_id"]
    poll(client, r1.json()["result"]["request_id"])
    assert len(backend.seen) == 1
    big = client.post(QUEUED, json={"requests": [{"prompt": "x" * 30_000}]})
    assert big.status_code == 413 and big.json()["success"] is False
    assert big.json()["errors"][0]["code"] == 5021
    missing = client.post(QUEUED, json={"request_id": "nope"})
    assert missing.status_code == 404 and missing.json()["success"] is False
    other_account = client.post(QUEUED.replace("acc1", "acc2"),
                                json={"request_id": r1.json()["result"]["request_id"]})
    assert other_account.status_code == 404
    assert client.post(QUEUED, json={"requests": []}).status_code == 400
    wrong_model = client.post(QUEUED.replace("fake-model", "other"), json=body)
    assert wrong_model.status_code == 404


def test_no_queued_work_runs_without_headroom(app_client, room):
    client, backend = app_client
    room["free"] = False
    rid = client.post(QUEUED, json={"requests": [{"prompt": "x"}]}).json()["result"]["request_id"]
    time.sleep(0.4)
    r = client.post(QUEUED, json={"request_id": rid}).json()["result"]
    assert r["status"] == "queued" and backend.seen == []
    room["free"] = True
    assert poll(client, rid)["responses"][0]["success"] is True


def test_subscriptions(app_client):
    client, _ = app_client
    path = "/client/v4/accounts/acc1/event_subscriptions/subscriptions"
    r = client.post(path, json={"destination": {"url": "http://127.0.0.1:9/hook"},
                                "events": ["batch.succeeded", EventType.FAILED.value]})
    assert r.status_code == 200, r.text
    sub = r.json()["result"]
    assert sub["events"] == [EventType.SUCCEEDED.value, EventType.FAILED.value]
    assert len(sub["secret"]) == 64
    listed = client.get(path).json()["result"]
    assert [s["id"] for s in listed] == [sub["id"]] and "secret" not in listed[0]
    assert client.get(path.replace("acc1", "acc2")).json()["result"] == []
    assert client.post(path, json={"url": "ftp://x"}).status_code == 400
    assert client.post(path, json={"url": "http://x", "events": ["nope"]}).status_code == 400
    assert client.delete(f"{path}/{sub['id']}").json()["result"] == {"id": sub["id"]}
    assert client.delete(f"{path}/{sub['id']}").status_code == 404


def test_dead_letters_of_a_subscription(tmp_path):
    """A receiver that always fails: after the last attempt the event is a dead letter, listed
    with its error and the body that was posted, for its own subscription only."""
    from tandem.asyncq.notifier import NotifierConfig
    from tests.asyncq.receiver import Receiver
    from tests.asyncq.servers import free_port

    receiver = Receiver(free_port(), status=500)
    receiver.start()
    notifier = NotifierConfig(max_attempts=2, backoff_base_s=0.05, backoff_max_s=0.1, timeout_s=2.0,
                              lease_s=5.0, idle_poll_s=0.05)
    setup = QueueSetup(QueueConfig(target=str(tmp_path / "queue.db"), poll_s=0.05, lease_s=5.0,
                                   notifier=notifier), headroom=lambda: True)
    path = "/client/v4/accounts/acc1/event_subscriptions/subscriptions"
    try:
        with TestClient(build_app(FakeBackend(reply="Hi"), ServerConfig(), queue=setup)) as client:
            sub = client.post(path, json={"url": f"http://127.0.0.1:{receiver.port}/hook",
                                          "events": ["batch.queued"]}).json()["result"]
            other = client.post(path, json={"url": "http://127.0.0.1:9/other",
                                            "events": ["batch.succeeded"]}).json()["result"]
            rid = client.post(QUEUED, json={"requests": [{"prompt": "a"}]}).json()["result"]["request_id"]
            deadline = time.monotonic() + 10
            while not (dead := client.get(f"{path}/{sub['id']}/dead_letters").json()["result"]):
                assert time.monotonic() < deadline, "no dead letter in time"
                time.sleep(0.05)
            (letter,) = dead
            assert (letter["attempts"], letter["last_error"]) == (2, "HTTP 500")
            assert letter["event"]["type"] == EventType.QUEUED.value
            assert letter["event"]["payload"]["requestId"] == rid
            others = client.get(f"{path}/{other['id']}/dead_letters").json()["result"]
            assert all(o["subscription_id"] == other["id"] and o["event"]["type"] == EventType.SUCCEEDED.value
                       for o in others)     # its own letters only (nothing listens at port 9)
            assert client.get(f"{path}/nope/dead_letters").status_code == 404
            assert len(receiver.posts) == 2
    finally:
        receiver.stop()


def test_queue_request_without_a_queue_is_refused():
    with TestClient(build_app(FakeBackend(), ServerConfig())) as client:
        r = client.post(QUEUED, json={"requests": [{"prompt": "x"}]})
        assert r.status_code == 400 and "--queue-db" in r.json()["errors"][0]["message"]
        assert client.get("/v1/batches").status_code == 404


def test_openai_batch_with_the_official_client(app_client, tmp_path):
    client, backend = app_client
    oa = openai.OpenAI(base_url="http://testserver/v1", api_key="unused", http_client=client,
                       max_retries=0)
    lines = [{"custom_id": f"req-{i}", "method": "POST", "url": "/v1/chat/completions",
              "body": {"model": "fake-model", "max_tokens": 3,
                       "messages": [{"role": "user", "content": f"q{i}"}]}} for i in range(3)]
    lines.append({"custom_id": "bad", "method": "POST", "url": "/v1/chat/completions",
                  "body": {"model": "other-model", "messages": [{"role": "user", "content": "x"}]}})
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    f = oa.files.create(file=path.open("rb"), purpose="batch")
    assert f.purpose == "batch" and f.bytes == path.stat().st_size and f.filename == "in.jsonl"
    assert oa.files.content(f.id).text == path.read_text()
    assert [x.id for x in oa.files.list().data] == [f.id]

    batch = oa.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions",
                              completion_window="24h", metadata={"job": "nightly"})
    assert batch.status in ("in_progress", "completed") and batch.request_counts.total == 4
    deadline = time.monotonic() + 10
    while batch.status != "completed":
        assert time.monotonic() < deadline
        time.sleep(0.05)
        batch = oa.batches.retrieve(batch.id)
    assert batch.request_counts.completed == 3 and batch.request_counts.failed == 1
    assert batch.metadata == {"job": "nightly"} and batch.completed_at is not None
    out = [json.loads(x) for x in oa.files.content(batch.output_file_id).text.splitlines()]
    assert sorted(o["custom_id"] for o in out) == ["req-0", "req-1", "req-2"]
    assert all(o["response"]["status_code"] == 200 and o["error"] is None for o in out)
    assert out[0]["response"]["body"]["choices"][0]["message"]["content"] == "Hi "
    assert out[0]["response"]["body"]["object"] == "chat.completion"
    (err,) = [json.loads(x) for x in oa.files.content(batch.error_file_id).text.splitlines()]
    assert err["custom_id"] == "bad" and err["response"]["status_code"] == 404
    assert err["response"]["body"]["error"]["code"] == "model_not_found"
    assert [b.id for b in oa.batches.list().data] == [batch.id]
    assert oa.files.retrieve(batch.output_file_id).purpose == "batch_output"
    assert oa.files.delete(f.id).deleted is True
    with pytest.raises(openai.NotFoundError):
        oa.files.retrieve(f.id)
    with pytest.raises(openai.NotFoundError):
        oa.batches.retrieve("batch_nope")


def test_openai_batch_cancel_and_validation(app_client, tmp_path, room):
    client, backend = app_client
    oa = openai.OpenAI(base_url="http://testserver/v1", api_key="unused", http_client=client,
                       max_retries=0)
    room["free"] = False   # nothing runs: the cancel finds every job queued
    line = {"custom_id": "a", "method": "POST", "url": "/v1/completions",
            "body": {"model": "fake-model", "prompt": "x"}}
    f = oa.files.create(file=("in.jsonl", json.dumps(line).encode()), purpose="batch")
    with pytest.raises(openai.BadRequestError):
        oa.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions",
                          completion_window="24h")   # the line's url differs
    batch = oa.batches.create(input_file_id=f.id, endpoint="/v1/completions",
                              completion_window="24h")
    for bad in ("x", "0", "101"):
        r = client.get("/v1/batches", params={"limit": bad})
        assert r.status_code == 400 and r.json()["error"]["param"] == "limit", r.text
    assert [b.id for b in oa.batches.list(limit=1)] == [batch.id]
    cancelled = oa.batches.cancel(batch.id)
    assert cancelled.status == "cancelled" and cancelled.output_file_id is None
    assert backend.seen == []


@pytest.mark.parametrize("fields, param", [
    ({"endpoint": ["/v1/completions"]}, "endpoint"),       # unhashable: was a 500
    ({"endpoint": {"url": "/v1/completions"}}, "endpoint"),
    ({"endpoint": None}, "endpoint"),
    ({"completion_window": ["24h"]}, "completion_window"),
    ({"input_file_id": ["file-x"]}, "input_file_id"),
    ({"input_file_id": None}, "input_file_id"),
    ({"metadata": ["a"]}, "metadata"),
    ({"metadata": {"k": 1}}, "metadata"),
    ({"metadata": {f"k{i}": "v" for i in range(17)}}, "metadata"),
])
def test_openai_batch_create_refuses_bad_fields(app_client, fields, param):
    client, _ = app_client
    body = {"endpoint": "/v1/completions", "input_file_id": "file-x", "completion_window": "24h",
            **fields}
    r = client.post("/v1/batches", json=body)
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text


def test_openai_batch_input_file_is_bounded(app_client, monkeypatch):
    client, _ = app_client
    monkeypatch.setattr("tandem.api.openai.batch_api.MAX_BATCH_REQUESTS", 2)
    lines = "".join(json.dumps({"custom_id": str(i), "url": "/v1/completions",
                                "body": {"prompt": "x"}}) + "\n" for i in range(3))
    f = client.post("/v1/files", files={"file": ("in.jsonl", lines.encode())}, data={"purpose": "batch"})
    r = client.post("/v1/batches", json={"endpoint": "/v1/completions", "input_file_id": f.json()["id"],
                                         "completion_window": "24h"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "input_file_id"
    assert "more than 2 requests" in r.json()["error"]["message"]


def test_batch_events_stream(app_client):
    client, _ = app_client
    rid = client.post(QUEUED, json={"requests": [{"prompt": "a"}, {"prompt": "b"}]}
                      ).json()["result"]["request_id"]
    path = f"/client/v4/accounts/acc1/ai/batches/{rid}/events"
    with client.stream("GET", path) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        text = "".join(r.iter_text())
    blocks = [b for b in text.split("\n\n") if b]
    assert blocks[-1] == "data: [DONE]"
    types = [b.split("\n")[0].removeprefix("event: ") for b in blocks[:-1]]
    assert types[0] == EventType.QUEUED.value and types[-1] == EventType.SUCCEEDED.value
    assert set(types[1:-1]) <= {"tandem.batch.progress"}
    final = json.loads(blocks[-2].split("\n")[1].removeprefix("data: "))
    assert final["payload"] == {"requestId": rid, "total": 2, "succeeded": 2, "failed": 0,
                                "cancelled": 0}
    assert final["metadata"]["accountId"] == "acc1"
    assert client.get(path.replace("acc1", "acc2")).status_code == 404


def test_interactive_request_preempts_queued_work_which_resumes_after(tmp_path):
    backend = FakeBackend(reply="queued work takes a while", token_delay=0.03)
    setup = QueueSetup(QueueConfig(target=str(tmp_path / "queue.db"), poll_s=0.05, lease_s=5.0),
                       headroom=lambda: True)
    app = build_app(backend, ServerConfig(), queue=setup)
    with TestClient(app) as client:
        rid = client.post(QUEUED, json={"requests": [{"prompt": "q"}]}).json()["result"]["request_id"]
        deadline = time.monotonic() + 10
        while not backend.running:
            assert time.monotonic() < deadline, "the queued request never started"
            time.sleep(0.01)
        (queued_id,) = backend.running
        r = client.post("/v1/completions", json={"model": "fake-model", "prompt": "hi",
                                                 "max_tokens": 3})
        assert r.status_code == 200 and r.json()["choices"][0]["text"] == "que"
        assert queued_id in backend.aborted        # it yielded while the interactive one ran
        service = app.state.queue
        assert service.dispatcher.preemptions >= 1
        result = poll(client, rid)
        assert result["responses"][0]["result"]["response"] == "queued work takes a while"
        (job,) = asyncio.run(_jobs(tmp_path / "queue.db", rid))
        assert job.attempts == 1                   # the preemption was not counted
    queued = [s for s in backend.seen if s.context.priority >= 10]
    interactive = [s for s in backend.seen if s.context.priority < 10]
    assert len(queued) >= 2 and len(interactive) == 1
    assert {s.context.priority for s in queued} == {QueueConfig.background_priority}
    assert interactive[0].context.priority == 0


async def _jobs(path, batch_id):
    from tandem.asyncq.open_queue import open_queue
    q = open_queue(str(path))
    try:
        return await q.list_batch(batch_id, ANONYMOUS)
    finally:
        await q.close()


def test_subscription_urls_can_be_restricted(tmp_path):
    setup = QueueSetup(QueueConfig(target=str(tmp_path / "queue.db"),
                                   event_url_allow=("https://hooks.example.com/",)),
                       headroom=lambda: True)
    path = "/client/v4/accounts/acc1/event_subscriptions/subscriptions"
    with TestClient(build_app(FakeBackend(), ServerConfig(), queue=setup)) as client:
        ok = client.post(path, json={"destination": {"url": "https://hooks.example.com/tandem"}})
        assert ok.status_code == 200, ok.text
        for url in ("http://127.0.0.1:8000/internal/drain", "https://hooks.example.com.evil.net/"):
            r = client.post(path, json={"destination": {"url": url}})
            assert r.status_code == 400 and "hooks.example.com" in r.json()["errors"][0]["message"]
        assert len(client.get(path).json()["result"]) == 1


def test_queue_metrics(app_client):
    client, _ = app_client
    rid = client.post(QUEUED, json={"requests": [{"prompt": "a"}]}).json()["result"]["request_id"]
    poll(client, rid)
    text = client.get("/metrics").text
    assert "tandem:queue_jobs_running 0.0" in text
    assert "tandem:queue_preemptions_total 0.0" in text
    assert "tandem:queue_interactive_requests 0.0" in text
    assert 'tandem:queue_runs_total{outcome="completed"} 1.0' in text
    assert 'tandem:queue_runs_total{outcome="failed"} 0.0' in text


def test_queued_prompts_start_one_at_a_time(tmp_path):
    backend = FakeBackend(reply="abcdef", token_delay=0.05)
    setup = QueueSetup(QueueConfig(target=str(tmp_path / "queue.db"), poll_s=0.05, lease_s=5.0),
                       headroom=lambda: True)
    with TestClient(build_app(backend, ServerConfig(), queue=setup)) as client:
        rid = client.post(QUEUED, json={"requests": [{"prompt": f"q{i}"} for i in range(4)]}
                          ).json()["result"]["request_id"]
        most = 0
        deadline = time.monotonic() + 10
        while not (r := client.post(QUEUED, json={"request_id": rid}).json()["result"]).get("responses"):
            most = max(most, len(backend.running))
            assert time.monotonic() < deadline
            time.sleep(0.01)
    starts = sorted(s.arrival_time for s in backend.seen)
    # each starts once the previous one has its first token (one token_delay later) ...
    assert all(b - a >= 0.04 for a, b in zip(starts, starts[1:])), starts
    assert most >= 2    # ... while the earlier ones go on decoding beside it
    assert all(x["success"] for x in r["responses"])
