"""Two gateways on two hosts share one Redis queue on a third; a worker on a fourth. One gateway
is killed (SIGKILL) in the middle of a batch: the other takes up what it was running once the
lease expires, and every queued request is answered exactly once, with what the worker answers
the same request interactively."""

from __future__ import annotations

import asyncio
import signal
import time

import httpx
import pytest

from tandem.asyncq.job import ANONYMOUS, JobStatus
from tandem.asyncq.open_queue import open_queue
from tandem.testing.hosts import REDIS_PORT
from tests.e2e.hosts.client import wait_no_blocks_held

pytestmark = pytest.mark.timeout(150)

N = 24
RUN = "/client/v4/accounts/acc/ai/run/@cf/test/m"


def body(i: int) -> dict:
    return {"prompt": f"Request {i}: tell me a long story", "max_tokens": 64, "temperature": 0,
            "external_reference": f"r{i}"}


def jobs(url: str, rid: str):
    async def read():
        q = open_queue(url)
        try:
            return await q.list_batch(rid, ANONYMOUS)
        finally:
            await q.close()
    return asyncio.run(read())


def wait_running_on(url: str, rid: str, pid: int, timeout_s: float) -> None:
    """Until the process `pid` holds a running job of the batch (a lease owner names its
    process) and some job has finished."""
    async def watch():
        q = open_queue(url)
        try:
            deadline = time.monotonic() + timeout_s
            while True:
                now = await q.list_batch(rid, ANONYMOUS)
                if any(j.status is JobStatus.RUNNING and f":{pid}:" in (j.owner or "") for j in now) \
                        and any(j.status is JobStatus.SUCCEEDED for j in now):
                    return
                assert not all(j.status is JobStatus.SUCCEEDED for j in now), \
                    "the batch finished before gw0 was seen running a job"
                assert time.monotonic() < deadline, f"the batch never got going: {[j.status for j in now]}"
                await asyncio.sleep(0.02)
        finally:
            await q.close()
    asyncio.run(watch())


def test_gateway_killed_mid_batch_every_request_answered_once(net, cluster):
    r_host, w_host, g0, g1 = (net.add_host(n) for n in ("redis", "w0", "gw0", "gw1"))
    cluster.redis("redis", r_host)
    queue_url = f"redis://{r_host.addr}:{REDIS_PORT}"
    cluster.worker("w0", w_host, "both", transport=None)
    queue_args = ["--queue-url", queue_url, "--queue-lease", "2", "--queue-concurrency", "3"]
    for name, host in (("gw0", g0), ("gw1", g1)):
        cluster.gateway(name, host, workers=[cluster.url("w0")], extra=queue_args)
    cluster.wait_ready()
    gw0, gw1 = cluster.url("gw0"), cluster.url("gw1")
    r = httpx.post(gw0 + RUN + "?queueRequest=true", json={"requests": [body(i) for i in range(N)]}, timeout=30)
    assert r.status_code == 200, r.text
    rid = r.json()["result"]["request_id"]

    gw0_pid = cluster.procs["gw0"].proc.pid
    wait_running_on(queue_url, rid, gw0_pid, 60)
    cluster.send("gw0", signal.SIGKILL)
    cluster.procs["gw0"].proc.wait(10)
    held = [j for j in jobs(queue_url, rid)              # what it was running when it died
            if j.status is JobStatus.RUNNING and f":{gw0_pid}:" in (j.owner or "")]
    assert held
    cluster.check_addresses()

    deadline = time.monotonic() + 90
    while True:
        result = httpx.post(gw1 + RUN + "?queueRequest=true", json={"request_id": rid}, timeout=30).json()["result"]
        if "responses" in result:
            break
        assert time.monotonic() < deadline, "the batch did not finish on the surviving gateway"
        time.sleep(0.2)
    responses = result["responses"]
    assert sorted(x["id"] for x in responses) == list(range(N))          # each answered, once
    assert all(x["success"] for x in responses), responses
    final = jobs(queue_url, rid)
    assert all(j.status is JobStatus.SUCCEEDED and j.result is not None for j in final)
    rerun = {j.id for j in final if j.attempts == 2}
    assert {j.id for j in held} <= rerun               # what the dead gateway ran, ran again
    # a queued answer is what the worker gives the same request interactively (greedy)
    for x in responses:
        i = x["id"]
        direct = httpx.post(cluster.url("w0") + RUN, json={k: v for k, v in body(i).items()
                                                          if k != "external_reference"}, timeout=60)
        assert direct.json()["result"]["response"] == x["result"]["response"], i
    wait_no_blocks_held(cluster, ["w0"])
