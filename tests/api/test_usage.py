"""Rate limits and the usage ledger of an app (fake backend, real SQLite queue database): the 429
of each API shape with Retry-After and x-ratelimit-* headers, output tokens reserved then
reconciled (exact numbers), interactive and batch limits apart, the ledger equal to the
responses' usage, its routes' ownership, and /metrics by account."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from starlette.testclient import TestClient

from tandem.api.app import build_app
from tandem.api.config import ServerConfig
from tandem.api.context import ServerContext
from tandem.api.queue.service import QueueConfig, QueueSetup
from tandem.asyncq.job import JobStatus
from tandem.types import EngineRequest, RequestContext, SamplingParams
from tandem.usage.limits import Limit, RateLimits, Rule
from tandem.usage.meter import Meter, UsageConfig
from tandem.usage.open_store import open_sqlite_store
from tandem.usage.pricing import Price, PriceTable, TokenUsage
from tandem.usage.window import Counts
from tests.api.fakes import FakeBackend

KEYS = ("sk-zero", "sk-one")
SECRET = "cluster-secret-for-tests"
CHAT = "/v1/chat/completions"
WAI = "/client/v4/accounts/key-0/ai/run/@cf/meta/fake-model"


def auth(i: int) -> dict:
    return {"Authorization": f"Bearer {KEYS[i]}"}


def limits(interactive: Limit = Limit(), batch: Limit = Limit(), reserve: int = 20) -> RateLimits:
    return RateLimits(rules={("*", "*"): Rule(interactive=interactive, batch=batch)},
                      reserve_output_tokens=reserve)


def fresh_window() -> None:
    """Start a test's burst early in a minute of the clock (SQLite's store reads this host's),
    so that its counts stay in one window and the numbers are exact."""
    if time.time() % 60 > 45:
        time.sleep(60 - time.time() % 60 + 0.05)


@pytest.fixture
def make_client(tmp_path):
    clients = []

    def make(usage: UsageConfig, backend: FakeBackend | None = None, room: dict | None = None):
        setup = QueueSetup(QueueConfig(target=str(tmp_path / "queue.db"), poll_s=0.05, lease_s=5.0),
                           headroom=lambda: (room or {"free": True})["free"])
        app = build_app(backend or FakeBackend(), ServerConfig(api_keys=KEYS, cluster_secret=SECRET,
                                                               usage=usage), queue=setup)
        client = TestClient(app)
        client.__enter__()
        clients.append(client)
        return client

    yield make
    for c in clients:
        c.__exit__(None, None, None)


def chat(max_tokens: int = 16, **extra) -> dict:
    return {"messages": [{"role": "user", "content": "hi"}], "max_tokens": max_tokens, **extra}


def test_each_api_answers_a_spent_limit_with_its_own_429(make_client):
    fresh_window()
    client = make_client(UsageConfig(limits=limits(Limit(requests=1))))
    ok = client.post(CHAT, json=chat(), headers=auth(0))
    assert ok.status_code == 200
    assert (ok.headers["x-ratelimit-limit-requests"],
            ok.headers["x-ratelimit-remaining-requests"]) == ("1", "0")
    assert ok.headers["x-ratelimit-reset-requests"].endswith("s")

    r = client.post(CHAT, json=chat(), headers=auth(0))
    assert r.status_code == 429
    err = r.json()["error"]
    assert (err["code"], err["type"]) == ("rate_limit_exceeded", "requests")
    assert "limit 1, used 1, requested 1" in err["message"]
    assert 1 <= int(r.headers["retry-after"]) <= 120 and int(r.headers["retry-after-ms"]) > 0
    assert r.headers["x-ratelimit-remaining-requests"] == "0"

    a = client.post("/v1/messages", headers={"x-api-key": KEYS[0], "anthropic-version": "2023-06-01"},
                    json={"model": "fake-model", "max_tokens": 8,
                          "messages": [{"role": "user", "content": "hi"}]})
    assert a.status_code == 429 and a.json()["type"] == "error"
    assert a.json()["error"]["type"] == "rate_limit_error" and "retry-after" in a.headers

    w = client.post(WAI, json={"prompt": "hi"}, headers=auth(0))
    assert w.status_code == 429 and w.json()["success"] is False
    assert w.json()["errors"][0]["code"] == 3036 and "retry-after" in w.headers

    stream = client.post(CHAT, json=chat(stream=True), headers=auth(0))   # refused before the stream
    assert stream.status_code == 429
    # the other tenant has its own window
    assert client.post(CHAT, json=chat(), headers=auth(1)).status_code == 200


def test_output_tokens_are_reserved_then_reconciled_to_what_was_produced(make_client):
    """Limit 30 output tokens a minute, 20 reserved per request; the reply is 11 tokens."""
    fresh_window()
    client = make_client(UsageConfig(limits=limits(Limit(output_tokens=30), reserve=20)))
    r1 = client.post(CHAT, json=chat(max_tokens=100), headers=auth(0))
    assert r1.json()["usage"]["completion_tokens"] == 11
    assert r1.headers["x-ratelimit-remaining-output-tokens"] == "10"     # 30 - 20 reserved
    assert r1.headers["x-ratelimit-remaining-tokens"] == "10"            # the binding token count
    r2 = client.post(CHAT, json=chat(max_tokens=19), headers=auth(0))    # 11 + 19 = 30
    assert r2.status_code == 200 and r2.headers["x-ratelimit-remaining-output-tokens"] == "0"
    r3 = client.post(CHAT, json=chat(max_tokens=9), headers=auth(0))     # 22 + 9 = 31
    assert r3.status_code == 429 and r3.json()["error"]["type"] == "tokens"
    assert "output tokens per minute: limit 30, used 22, requested 9" in r3.json()["error"]["message"]
    assert client.post(CHAT, json=chat(max_tokens=8), headers=auth(0)).status_code == 200   # 22 + 8


def test_a_request_over_a_token_limit_alone_is_too_large(make_client):
    client = make_client(UsageConfig(limits=limits(Limit(input_tokens=10))))
    r = client.post(CHAT, json=chat(), headers=auth(0))
    assert r.status_code == 429
    assert r.json()["error"]["message"].startswith("Request too large for fake-model")
    assert r.headers["retry-after"] == "60"


def test_the_ledger_adds_up_to_the_responses_usage_and_is_each_tenants_own(make_client):
    prices = PriceTable(models={"fake-model": Price(input=2.0, cached_input=0.5, output=10.0)})
    backend = FakeBackend(reply="Hello world")
    client = make_client(UsageConfig(limits=limits(Limit(requests=100)), prices=prices), backend)
    usages = []
    for body in (chat(), chat(), chat(n=3, temperature=1.0, max_tokens=5)):
        usages.append(client.post(CHAT, json=body, headers=auth(0)).json()["usage"])
    with client.stream("POST", CHAT, headers=auth(0),
                       json=chat(stream=True, stream_options={"include_usage": True})) as s:
        last = [line for line in s.iter_lines() if line.startswith("data: {")][-1]
    usages.append(json.loads(last[6:])["usage"])
    anthropic = client.post("/v1/messages", headers={"x-api-key": KEYS[0], "anthropic-version": "2023-06-01"},
                            json={"model": "fake-model", "max_tokens": 8,
                                  "messages": [{"role": "user", "content": "hi"}]}).json()["usage"]
    wai = client.post(WAI, json={"prompt": "hi"}, headers=auth(0)).json()["result"]["usage"]
    client.post(CHAT, json=chat(), headers=auth(1))          # the other tenant's

    prompt = sum(u["prompt_tokens"] for u in usages) + anthropic["input_tokens"] \
        + anthropic["cache_read_input_tokens"] + wai["prompt_tokens"]
    cached = sum(u["prompt_tokens_details"]["cached_tokens"] for u in usages) \
        + anthropic["cache_read_input_tokens"] + wai["prompt_tokens_details"]["cached_tokens"]
    output = sum(u["completion_tokens"] for u in usages) + anthropic["output_tokens"] \
        + wai["completion_tokens"]
    assert usages[2]["completion_tokens"] == 15 and cached > 0       # 3 choices of 5; a cache hit

    r = client.get("/client/v4/accounts/key-0/ai/usage", headers=auth(0))
    assert r.status_code == 200 and r.json()["success"]
    result = r.json()["result"]
    (row,) = result["usage"]
    assert row["model"] == "fake-model" and row["requests"] == 6
    assert (row["input_uncached_tokens"] + row["input_cached_tokens"], row["input_cached_tokens"],
            row["output_tokens"]) == (prompt, cached, output)
    assert row["cost_usd"] == pytest.approx(((prompt - cached) * 2.0 + cached * 0.5 + output * 10.0) / 1e6)
    assert result["totals"]["output_tokens"] == output

    # another tenant's account reads as unknown; the admin route takes the cluster secret
    other = client.get("/client/v4/accounts/key-1/ai/usage", headers=auth(0))
    unknown = client.get("/client/v4/accounts/nobody/ai/usage", headers=auth(0))
    assert other.status_code == unknown.status_code == 404
    assert other.json()["errors"][0]["message"].replace("key-1", "X") == \
        unknown.json()["errors"][0]["message"].replace("nobody", "X")
    assert client.get("/admin/usage", headers=auth(0)).status_code == 403
    assert client.get("/admin/usage").status_code == 401
    admin = client.get("/admin/usage", headers={"x-tandem-cluster-secret": SECRET}).json()
    assert [(d["account"], d["requests"]) for d in admin["data"]] == [("key-0", 6), ("key-1", 1)]
    one = client.get("/admin/usage?account=key-1", headers={"x-tandem-cluster-secret": SECRET}).json()
    assert [d["account"] for d in one["data"]] == ["key-1"]
    bad = client.get("/client/v4/accounts/key-0/ai/usage?since=yesterday", headers=auth(0))
    assert bad.status_code == 400 and "since must be a date" in bad.json()["errors"][0]["message"]
    assert client.get("/client/v4/accounts/key-0/ai/usage?since=2020-01-01&until=2026-01-01",
                      headers=auth(0)).status_code == 400     # over 366 days
    assert client.get("/client/v4/accounts/key-0/ai/usage?since=2020-01-01&until=2020-01-31",
                      headers=auth(0)).json()["result"]["usage"] == []

    metrics = client.get("/metrics").text
    assert 'tandem:usage_requests_total{account="key-0",model="fake-model"} 6.0' in metrics
    assert f'tandem:usage_tokens_total{{account="key-0",kind="output",model="fake-model"}} ' \
        f'{float(output)}' in metrics
    assert 'tandem:usage_cost_usd_total{account="key-0",model="fake-model"}' in metrics


def test_queued_work_has_its_own_limit_and_is_recorded_once_per_job(make_client):
    fresh_window()
    room = {"free": True}
    client = make_client(UsageConfig(limits=limits(Limit(requests=1), Limit(requests=1))),
                         FakeBackend(reply="Hi"), room)
    r = client.post(WAI + "?queueRequest=true", headers=auth(0),
                    json={"requests": [{"prompt": "a", "max_tokens": 4}, {"prompt": "b", "max_tokens": 4}]})
    request_id = r.json()["result"]["request_id"]
    service = client.app.state.queue
    deadline = time.monotonic() + 10
    while True:   # one job ran; the other went back to the queue for its batch limit
        jobs = client.portal.call(service.queue.list_batch, request_id, "key-0")
        done = [j for j in jobs if j.status is JobStatus.SUCCEEDED]
        if len(done) == 1 and 'kind="batch"' in client.get("/metrics").text:
            break
        assert time.monotonic() < deadline, jobs
        time.sleep(0.05)
    waiting = next(j for j in jobs if j is not done[0])
    assert waiting.status is JobStatus.QUEUED and waiting.attempts == 0   # no attempt counted
    assert 'tandem:rate_limited_requests_total{account="key-0",kind="batch",model="fake-model"}' in \
        client.get("/metrics").text
    # interactive requests are limited apart: the tenant's one a minute is still there
    assert client.post(CHAT, json=chat(), headers=auth(0)).status_code == 200

    rows = client.get("/client/v4/accounts/key-0/ai/usage", headers=auth(0)).json()["result"]["usage"]
    usage = done[0].result["usage"]
    assert rows[0]["requests"] == 2                     # the job and the interactive request
    meter = client.app.state.ctx.meter
    entry = meter.entry(f"job:{done[0].id}", "key-0", "fake-model", "batch", TokenUsage(9, 9, 9))
    assert not client.portal.call(meter.store.settle, None, entry)   # the job's key is taken
    assert usage["completion_tokens"] == 2


def test_without_a_ledger_nothing_is_recorded_and_limits_still_apply(make_client):
    fresh_window()
    client = make_client(UsageConfig(limits=limits(Limit(requests=1)), ledger=False))
    assert client.post(CHAT, json=chat(), headers=auth(0)).status_code == 200
    assert client.post(CHAT, json=chat(), headers=auth(0)).status_code == 429
    rows = client.get("/client/v4/accounts/key-0/ai/usage", headers=auth(0)).json()["result"]["usage"]
    assert rows == []


def test_a_cut_stream_records_what_was_generated_and_a_failed_one_nothing(tmp_path):
    """The run's close is where usage is final: a client gone after 3 tokens is charged 3; a
    request that failed before its first token is charged nothing and its admission is given
    back."""
    async def go():
        store = open_sqlite_store(str(tmp_path / "usage.db"))
        ctx = ServerContext.create(FakeBackend(reply="abcdefgh", max_model_len=64), ServerConfig())
        ctx.meter = Meter(store, limits(Limit(requests=5, output_tokens=100), reserve=8), None)
        who = RequestContext(tenant="key-0")
        run = ctx.run([EngineRequest("cut-0", [5, 6, 7], SamplingParams(max_tokens=8), who)])
        await run.start()
        seen = 0
        async for _, d in run.deltas():
            seen += len(d.new_token_ids)
            if seen == 3:
                break
        await run.aclose()
        failed = ctx.run([EngineRequest("long-0", list(range(100)), SamplingParams(max_tokens=8), who)])
        with pytest.raises(Exception, match="too long"):
            await failed.start()
        await failed.aclose()
        day = ctx.meter.entry("x", "", "", "", TokenUsage()).day
        rows = await ctx.meter.ledger("key-0", day, day)
        window = await store.consume("interactive\x1fkey-0\x1ffake-model", Counts(), Limit(), 60.0)
        await store.close()
        return rows, window

    fresh_window()
    (row,), window = asyncio.run(go())
    assert (row.requests, row.usage) == (1, TokenUsage(3, 0, 3))
    assert window.cur == Counts(1, 3, 3)    # the cut one as used; the failed one given back
