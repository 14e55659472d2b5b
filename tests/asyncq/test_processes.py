"""Two dispatcher processes on one queue (SQLite file, Redis, PostgreSQL) never run a job twice."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

from tandem.asyncq.job import ANONYMOUS, BatchSpec, JobSpec, JobStatus
from tandem.asyncq.open_queue import open_queue

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_two_processes_run_each_job_once(queue_target):
    async def enqueue():
        q = open_queue(queue_target)
        batch, _ = await q.enqueue(BatchSpec(account="a", model="m",
                                             jobs=tuple(JobSpec({"i": i}) for i in range(60))))
        await q.close()
        return batch.id

    batch_id = asyncio.run(enqueue())
    procs = [subprocess.Popen([sys.executable, "-m", "tests.asyncq.dispatch_process", queue_target,
                               f"p{k}", "1.0"], cwd=ROOT, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
             for k in range(2)]
    assert [p.stdout.readline().strip() for p in procs] == ["ready", "ready"]
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    outs = [p.communicate(timeout=60)[0].split() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    ran = outs[0] + outs[1]

    async def check():
        q = open_queue(queue_target)
        jobs = await q.list_batch(batch_id, ANONYMOUS)
        await q.close()
        return jobs

    jobs = asyncio.run(check())
    assert sorted(ran) == sorted(j.id for j in jobs)            # each run once, none lost
    assert all(j.status is JobStatus.SUCCEEDED and j.attempts == 1 for j in jobs)
    assert outs[0] and outs[1]                                  # both took part
    assert {j.result["by"] for j in jobs} == {"p0", "p1"}
