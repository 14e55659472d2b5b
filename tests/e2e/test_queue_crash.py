"""The queue survives a gateway crash: a real worker (tiny model) behind a gateway with
`--queue-db`; the gateway is killed with SIGKILL in the middle of a Workers AI batch and started
again on the same queue file. Every request completes exactly once (one result each, the ones
the dead gateway was running taken up again after their lease), greedy results equal the same
request sent interactively, and a webhook subscriber gets the batch's events. Two gateways on
one Redis or PostgreSQL queue never run a request twice."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx
import orjson
import pytest

from tandem.asyncq.job import ANONYMOUS
from tandem.asyncq.open_queue import open_queue
from tandem.asyncq.signature import HEADER, verify
from tandem.testing.server_process import stop, wait_healthy
from tandem.testing.tiny_model import write_test_model
from tests.asyncq import servers
from tests.asyncq.receiver import Receiver
from tests.asyncq.servers import free_port

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
N = 10
RUN = "/client/v4/accounts/acc/ai/run/@cf/test/m"


def start(args: list[str], log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tandem.cli", *args], cwd=REPO, env=ENV,
                            stdout=log.open("ab"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def gateway(model: Path, worker: str, port: int, db: Path, log: Path) -> subprocess.Popen:
    return start(["gateway", "--model", str(model), "--worker", worker, "--port", str(port),
                  "--served-model-name", "m", "--poll-interval", "0.2", "--queue-db", str(db),
                  "--queue-lease", "2", "--queue-concurrency", "3", "--log-level", "warning"], log)


def completed_runs(metrics_text: str) -> int:
    """This app's queued runs that ended with a recorded result, from its /metrics."""
    line = next(x for x in metrics_text.splitlines()
                if x.startswith('tandem:queue_runs_total{outcome="completed"}'))
    return int(float(line.split()[-1]))


def body(i: int) -> dict:
    return {"prompt": f"Request {i}: tell me a long story", "max_tokens": 48, "temperature": 0,
            "external_reference": f"r{i}"}


def test_gateway_killed_mid_batch_every_request_completes_once(tmp_path):
    model = write_test_model(tmp_path / "tiny")
    log = tmp_path / "procs.log"
    wport, gport, db = free_port(), free_port(), tmp_path / "queue.db"
    worker = start(["serve", "--model", str(model), "--port", str(wport), "--threads", "1",
                    "--device", "cpu", "--num-kv-blocks", "128", "--block-size", "16",
                    "--max-model-len", "256", "--served-model-name", "m",
                    "--log-level", "warning"], log)
    wurl, gurl = f"http://127.0.0.1:{wport}", f"http://127.0.0.1:{gport}"
    receiver = Receiver(free_port())
    receiver.start()
    procs = [worker]
    try:
        wait_healthy(wurl, worker, 120, describe=lambda: log.read_text()[-3000:])
        g1 = gateway(model, wurl, gport, db, log)
        procs.append(g1)
        wait_healthy(gurl, g1, 60, describe=lambda: log.read_text()[-3000:])
        sub = httpx.post(gurl + "/client/v4/accounts/acc/event_subscriptions/subscriptions",
                         json={"url": f"http://127.0.0.1:{receiver.port}/hook"}).json()["result"]
        r = httpx.post(gurl + RUN + "?queueRequest=true",
                       json={"requests": [body(i) for i in range(N)]}, timeout=30)
        assert r.status_code == 200, r.text
        rid = r.json()["result"]["request_id"]

        # kill -9 once some jobs have finished and others are running
        deadline = time.monotonic() + 60
        while True:
            with sqlite3.connect(db) as c:
                counts = dict(c.execute("SELECT status, count(*) FROM asyncq_jobs GROUP BY status"))
            if counts.get("succeeded", 0) >= 1 and counts.get("running", 0) >= 1:
                break
            assert time.monotonic() < deadline, f"batch never got going: {counts}"
            time.sleep(0.02)
        os.kill(g1.pid, signal.SIGKILL)
        g1.wait(10)
        assert counts.get("succeeded", 0) < N

        g2 = gateway(model, wurl, gport, db, log)
        procs.append(g2)
        wait_healthy(gurl, g2, 60, describe=lambda: log.read_text()[-3000:])
        deadline = time.monotonic() + 120
        while True:
            result = httpx.post(gurl + RUN + "?queueRequest=true", json={"request_id": rid},
                                timeout=30).json()["result"]
            if "responses" in result:
                break
            assert time.monotonic() < deadline, "the batch did not finish after the restart"
            time.sleep(0.2)

        responses = result["responses"]
        assert [x["id"] for x in responses] == list(range(N))
        assert all(x["success"] for x in responses), responses
        assert [x["external_reference"] for x in responses] == [f"r{i}" for i in range(N)]
        with sqlite3.connect(db) as c:
            rows = c.execute("SELECT status, attempts, result IS NOT NULL FROM asyncq_jobs").fetchall()
        assert len(rows) == N and all(s == "succeeded" and has for s, _, has in rows)
        assert any(a == 2 for _, a, _ in rows)      # the dead gateway's jobs ran again
        # queued results are what the same request gets interactively (greedy, same backend path)
        for i in (0, N - 1):
            inter = httpx.post(gurl + RUN, json={k: v for k, v in body(i).items()
                                                  if k != "external_reference"}, timeout=60)
            assert inter.json()["result"]["response"] == responses[i]["result"]["response"]

        # the subscriber got the batch's events, signed (deliveries are at least once: dedupe)
        deadline = time.monotonic() + 30
        while len({p.headers["x-tandem-delivery"] for p in receiver.posts}) < 2:
            assert time.monotonic() < deadline, [p.body for p in receiver.posts]
            time.sleep(0.1)
        events = {}
        for p in receiver.posts:
            assert verify(sub["secret"], p.headers[HEADER], p.body, now=time.time())
            events[p.headers["x-tandem-delivery"]] = orjson.loads(p.body)
        assert sorted(e["type"] for e in events.values()) == [
            "cf.workersAi.model.batch.queued", "cf.workersAi.model.batch.succeeded"]
        assert all(e["payload"]["requestId"] == rid for e in events.values())
    finally:
        receiver.stop()
        for p in reversed(procs):
            stop(p)


@pytest.mark.parametrize("backend", ["redis", "postgres"])
def test_two_gateways_on_one_shared_queue_run_each_request_once(tmp_path, backend):
    server = servers.start_redis() if backend == "redis" else servers.start_postgres()
    if server is None:
        pytest.skip(f"{backend} server binary not found (Debian package "
                    f"{'redis-server' if backend == 'redis' else 'postgresql'})")
    model = write_test_model(tmp_path / "tiny")
    log = tmp_path / "procs.log"
    wport = free_port()
    wurl = f"http://127.0.0.1:{wport}"
    procs = [start(["serve", "--model", str(model), "--port", str(wport), "--threads", "1",
                    "--device", "cpu", "--num-kv-blocks", "128", "--block-size", "16",
                    "--max-model-len", "256", "--served-model-name", "m",
                    "--log-level", "warning"], log)]
    try:
        wait_healthy(wurl, procs[0], 120, describe=lambda: log.read_text()[-3000:])
        gurls = []
        for _ in range(2):
            port = free_port()
            procs.append(start(["gateway", "--model", str(model), "--worker", wurl,
                                "--port", str(port), "--served-model-name", "m",
                                "--poll-interval", "0.2", "--queue-url", server.url,
                                "--queue-concurrency", "1", "--log-level", "warning"], log))
            gurls.append(f"http://127.0.0.1:{port}")
        for url, proc in zip(gurls, procs[1:]):
            wait_healthy(url, proc, 60, describe=lambda: log.read_text()[-3000:])
        r = httpx.post(gurls[0] + RUN + "?queueRequest=true",
                       json={"requests": [body(i) for i in range(N)]})
        rid = r.json()["result"]["request_id"]
        deadline = time.monotonic() + 120
        while True:   # polled on the other gateway: the queue is shared
            result = httpx.post(gurls[1] + RUN + "?queueRequest=true", json={"request_id": rid},
                                timeout=30).json()["result"]
            if "responses" in result:
                break
            assert time.monotonic() < deadline
            time.sleep(0.2)
        assert [x["success"] for x in result["responses"]] == [True] * N

        async def attempts():
            q = open_queue(server.url)
            jobs = await q.list_batch(rid, ANONYMOUS)
            await q.close()
            return [j.attempts for j in jobs]

        assert asyncio.run(attempts()) == [1] * N   # no request ran twice
        # each gateway ran a share (one job at a time each, the other polling meanwhile), and
        # the shares add up to the batch: every run ended in a recorded result
        completed = [completed_runs(httpx.get(url + "/metrics").text) for url in gurls]
        assert sum(completed) == N and min(completed) > 0, completed
    finally:
        for p in reversed(procs):
            stop(p)
        server.stop()
