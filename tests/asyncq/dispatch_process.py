"""A dispatcher in its own process (a stand-in for a gateway): runs jobs from the queue at
argv[1] as owner argv[2] until argv[3] seconds pass with nothing to do. Prints "ready" once
imported, starts when a line arrives on stdin (so that several start together), then prints
each job id it runs, one per line."""

from __future__ import annotations

import asyncio
import sys
import time

from tandem.asyncq.dispatcher import Dispatcher, DispatcherConfig
from tandem.asyncq.open_queue import open_queue


async def main(target: str, owner: str, idle_exit_s: float) -> None:
    q = open_queue(target)
    print("ready", flush=True)
    sys.stdin.readline()
    last = {"t": time.monotonic()}

    async def run(job, checkpoint):
        print(job.id, flush=True)
        await asyncio.sleep(0.02)
        last["t"] = time.monotonic()
        return {"by": owner}

    d = Dispatcher(q, run, lambda: True, DispatcherConfig(owner=owner, max_concurrency=4,
                                                          lease_s=5.0, renew_every_s=1.0,
                                                          idle_poll_s=0.05))
    d.start()
    while time.monotonic() - last["t"] < idle_exit_s or d.running:
        await asyncio.sleep(0.05)
    await d.stop()
    await q.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], float(sys.argv[3])))
