"""Rate limits and the usage ledger on real processes (tiny test model, 1 thread per worker):
- two gateways on one Redis or PostgreSQL admit exactly the limit: what one admitted counts at
  the other, and a concurrent burst split between them gets exactly what is left;
- every request is recorded once, whether it completed, was migrated after its worker was
  killed, was cut by its client, or ran from the queue across a gateway killed with SIGKILL: the
  ledger's totals are the responses' usage (the cut stream's output: what was generated before
  the cut, between what the client read and its max_tokens)."""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import time

import httpx
import pytest

from tandem.launcher.cluster import LocalCluster, ProcSpec, free_port, gateway_proc, worker_proc
from tests.asyncq import servers
from tests.e2e.test_gateway_e2e import CORES, GATEWAY_ARGS, PROMPT, WORKER_ARGS, running, worker_name

pytestmark = pytest.mark.timeout(400)

KEY = "sk-usage-e2e"
AUTH = {"Authorization": f"Bearer {KEY}"}
SECRET = "usage-e2e-cluster-secret"
RUN = "/client/v4/accounts/key-0/ai/run/@cf/test/m"
USAGE = "/client/v4/accounts/key-0/ai/usage"


@pytest.fixture(scope="module")
def model(llama_dir):
    return str(llama_dir)


def cluster(model: str, workers: int, gateways: dict[str, tuple[str, ...]]) -> LocalCluster:
    taken: set[int] = set()
    procs: list[ProcSpec] = []
    for i in range(workers):
        port = free_port(avoid=taken)
        taken.add(port)
        procs.append(worker_proc(f"w{i}", model, "both", "127.0.0.1", port,
                                 (CORES[i % len(CORES)],), WORKER_ARGS, "warning"))
    ws = list(procs)
    for name, extra in gateways.items():
        port = free_port(avoid=taken)
        taken.add(port)
        g = gateway_proc(model, "127.0.0.1", port, ws, "round_robin",
                         GATEWAY_ARGS + ("--api-key", KEY) + extra)
        procs.append(ProcSpec(name, g.cmd, g.url, None))
    return LocalCluster(procs, cluster_secret=SECRET)


def fresh_window() -> None:
    """Begin a burst early in a minute of the store's clock (this host's), so it stays in one."""
    if time.time() % 60 > 40:
        time.sleep(60 - time.time() % 60 + 0.05)


@pytest.mark.parametrize("backend", ["redis", "postgres"])
def test_two_gateways_on_one_database_admit_exactly_the_limit_of_a_burst(model, backend):
    server = servers.start_redis() if backend == "redis" else servers.start_postgres()
    if server is None:
        pytest.skip(f"{backend} not installed")
    limit, sent = 10, 40
    try:
        c = cluster(model, 1, {g: ("--queue-url", server.url, "--rate-limit",
                                   f"requests_per_minute={limit}") for g in ("g0", "g1")})
        with running(c):
            urls = [c.spec("g0").url, c.spec("g1").url]
            body = {"model": "m", "prompt": "Hi", "max_tokens": 1, "temperature": 0}

            async def burst():
                async with httpx.AsyncClient(timeout=60) as client:
                    return await asyncio.gather(*(
                        client.post(urls[i % 2] + "/v1/completions", json=body, headers=AUTH)
                        for i in range(sent)))

            fresh_window()
            # g1 takes 4 first; then the burst over both: g0 must see g1's count too
            early = [httpx.post(urls[1] + "/v1/completions", json=body, headers=AUTH, timeout=60)
                     for _ in range(4)]
            assert [r.status_code for r in early] == [200] * 4
            answers = asyncio.run(burst())
            codes = [r.status_code for r in answers]
            assert codes.count(200) == limit - 4 and codes.count(429) == sent - (limit - 4), codes
            refused = [r for r in answers if r.status_code == 429]
            assert all(r.json()["error"]["code"] == "rate_limit_exceeded" for r in refused)
            assert all(int(r.headers["retry-after"]) >= 1 for r in refused)
            assert {r.headers["x-ratelimit-limit-requests"] for r in answers} == {str(limit)}
            # the ledger both gateways share holds exactly the admitted requests
            admin = httpx.get(urls[0] + "/admin/usage?account=key-0",
                              headers={"x-tandem-cluster-secret": SECRET}, timeout=10).json()
            assert admin["totals"]["requests"] == limit
    finally:
        server.stop()


def _stream(base: str, body: dict, on_chunk=None, stop_after: int | None = None):
    """(headers, chunks read, usage or None) of a streamed completion."""
    chunks, usage = 0, None
    with httpx.stream("POST", base + "/v1/completions", json={**body, "stream": True},
                      headers=AUTH, timeout=120) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if not line.startswith("data: {"):
                continue
            event = json.loads(line[6:])
            assert "error" not in event, event
            usage = event.get("usage") or usage
            if any(ch.get("text") for ch in event.get("choices", [])):
                chunks += 1
                if on_chunk is not None:
                    on_chunk(chunks, r.headers)
                if chunks == stop_after:
                    break   # leaving the block closes the connection: the client is gone
        return r.headers, chunks, usage


def _healthy(url: str) -> bool:
    try:
        return httpx.get(url + "/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _add(total: dict, usage: dict) -> None:
    total["input"] += usage["prompt_tokens"]
    total["cached"] += (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    total["output"] += usage["completion_tokens"]


def test_every_request_is_recorded_once_completed_migrated_cut_or_queued_across_a_crash(model, tmp_path):
    db = tmp_path / "queue.db"
    gateway_args = ("--queue-db", str(db), "--queue-lease", "2", "--queue-concurrency", "2")
    c = cluster(model, 2, {"g": gateway_args})
    long = 400
    with running(c):
        g = c.spec("g").url
        base = {"model": "m", "prompt": PROMPT, "temperature": 0, "ignore_eos": True}
        expected = {"input": 0, "cached": 0, "output": 0}
        requests = 0

        # completed: whole answers and a stream with its usage chunk
        for max_tokens in (8, 16):
            r = httpx.post(g + "/v1/completions", json={**base, "max_tokens": max_tokens},
                           headers=AUTH, timeout=60)
            _add(expected, r.json()["usage"])
        _, _, usage = _stream(g, {**base, "max_tokens": 12, "stream_options": {"include_usage": True}})
        _add(expected, usage)
        requests += 3

        # migrated: its worker killed after 20 tokens; the stream ends on the other one
        killed: list[str] = []

        def kill(n, headers):
            if n == 20 and not killed:
                killed.append(worker_name(c, headers["x-tandem-decode"]))
                c.kill(killed[0])

        _, chunks, usage = _stream(g, {**base, "max_tokens": long,
                                       "stream_options": {"include_usage": True}}, on_chunk=kill)
        assert killed and usage["completion_tokens"] == long
        _add(expected, usage)
        prompt_tokens = usage["prompt_tokens"]
        requests += 1

        # cut: the client leaves after 5 chunks
        _, read, _ = _stream(g, {**base, "max_tokens": long}, stop_after=5)
        requests += 1

        # queued, across a gateway killed with SIGKILL in the middle of the batch
        n = 6
        r = httpx.post(g + RUN + "?queueRequest=true", headers=AUTH, timeout=30, json={"requests": [
            {"prompt": f"Request {i}: tell me a long story", "max_tokens": 48, "temperature": 0}
            for i in range(n)]})
        batch = r.json()["result"]["request_id"]
        deadline = time.monotonic() + 120
        while True:
            with sqlite3.connect(db) as conn:
                counts = dict(conn.execute("SELECT status, count(*) FROM asyncq_jobs GROUP BY status"))
            if counts.get("succeeded", 0) >= 1 and counts.get("running", 0) >= 1:
                break
            assert time.monotonic() < deadline, f"the batch never got going: {counts}"
            time.sleep(0.02)
        c.kill("g", signal.SIGKILL)
        assert counts.get("succeeded", 0) < n
        c.start("g")
        deadline = time.monotonic() + 120
        while not _healthy(g):   # its dead worker stays unhealthy: only the gateway is awaited
            c.check_alive()
            assert time.monotonic() < deadline, "the gateway did not come back"
            time.sleep(0.2)
        deadline = time.monotonic() + 180
        while "responses" not in (result := httpx.post(g + RUN + "?queueRequest=true", headers=AUTH,
                                                       json={"request_id": batch},
                                                       timeout=30).json()["result"]):
            assert time.monotonic() < deadline, "the batch did not finish after the restart"
            time.sleep(0.2)
        assert all(x["success"] for x in result["responses"])
        for x in result["responses"]:
            _add(expected, x["result"]["usage"])
        requests += n
        with sqlite3.connect(db) as conn:
            attempts = [a for (a,) in conn.execute("SELECT attempts FROM asyncq_jobs")]
        assert max(attempts) == 2        # the dead gateway's jobs ran again

        ledger = httpx.get(g + USAGE, headers=AUTH, timeout=10).json()["result"]
        (row,) = ledger["usage"]
        got_input = row["input_uncached_tokens"] + row["input_cached_tokens"]
        assert row["requests"] == requests
        assert got_input == expected["input"] + prompt_tokens           # the cut one's prompt too
        assert row["input_cached_tokens"] >= expected["cached"]
        cut_output = row["output_tokens"] - expected["output"]
        assert read <= cut_output <= long, (read, cut_output)
